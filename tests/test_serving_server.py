"""npu-model-server against the real clients (gRPC stubs of tensorflow-serving-api, urllib) on
127.0.0.1: results equal TF on CPU, batching, hot reload, error codes, graceful shutdown."""
import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving.apis")
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,  # noqa: E402
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from npu_device.serving import atc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL, ATOL = 1e-5, 1e-6
# urllib must not send loopback requests through a proxy from the environment
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Mlp(tf.Module):
    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.w1 = tf.Variable(rng.normal(size=(4, 16)).astype(np.float32))
        self.w2 = tf.Variable(rng.normal(size=(16, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"probs": tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2))}


def save_mlp(path, seed):
    """Saved elsewhere and renamed into place, so the server never sees half a version."""
    tmp = path + ".tmp"
    with tf.device("/CPU:0"):
        m = Mlp(seed)
        tf.saved_model.save(m, tmp, signatures={"serving_default": m.serve})
    os.rename(tmp, path)


def reference(seed, x):
    m = Mlp(seed)
    with tf.device("/CPU:0"):
        return m.serve(tf.constant(x))["probs"].numpy()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """models/mlp/1 (SavedModel), models/mlp_om/1/mlp.om (batch sizes 1, 4, 16), a config."""
    base = tmp_path_factory.mktemp("models")
    os.makedirs(base / "mlp")
    save_mlp(str(base / "mlp" / "1"), seed=1)
    os.makedirs(base / "mlp_om" / "1")
    gd, ins, outs = atc.load_saved_model(str(base / "mlp" / "1"))
    with open(base / "mlp_om" / "1" / "mlp.om", "wb") as f:
        f.write(atc.compile_graph(gd, ins, outs, "x:-1,4", [1, 4, 16]))
    with tf.device("/CPU:0"):
        text = Text()
        tf.saved_model.save(text, str(base / "text" / "1"),
                            signatures={"serving_default": text.serve})
    config = base / "models.config"
    config.write_text("model_config_list { %s }" % " ".join(
        'config { name: "%s" base_path: "%s" model_platform: "tensorflow" }' % (m, base / m)
        for m in ("mlp", "mlp_om", "text")))
    return base


class Text(tf.Module):
    """Binary (string) inputs: these ops stay in TensorFlow on CPU."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
    def serve(self, s):
        return {"length": tf.strings.length(s), "upper": tf.strings.upper(s)}


@pytest.fixture(scope="module")
def server(models):
    yield from run_server(models, ["--model_config_file", str(models / "models.config"),
                                   "--batch_timeout_micros", "50000",
                                   "--file_system_poll_wait_seconds", "0.5"])


def run_server(base, flags):
    log, server = open(base / f"server{len(flags)}.log", "w"), {}
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_device.serving.model_server", "--port", "0",
         "--rest_api_port", "0", "--enable_batching", "--max_batch_size", "16", *flags],
        stdout=subprocess.PIPE, stderr=log, text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        line = proc.stdout.readline()          # the server prints it once both ports listen
        m = re.search(r"grpc=([\d.:]+) rest=([\d.:]+)", line)
        assert m, f"server did not start: {line!r}\n{open(log.name).read()[-3000:]}"
        channel = grpc.insecure_channel(m.group(1))
        server = {"grpc": channel, "rest": "http://" + m.group(2), "base": base, "proc": proc}
        yield server
        channel.close()
    finally:
        if proc.returncode is None and not server.get("terminated"):
            proc.send_signal(signal.SIGTERM)    # once: a second one may hit Python's exit path
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        log.close()
    assert rc == 0, open(log.name).read()[-3000:]


def rest(server, path, body=None):
    """(HTTP status, decoded JSON or text)."""
    data = None if body is None else (body if isinstance(body, bytes) else
                                      json.dumps(body).encode())
    req = urllib.request.Request(server["rest"] + path, data=data,
                                 method="GET" if data is None else "POST")
    try:
        with HTTP.open(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def grpc_predict(server, model, x, version=None):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    if version is not None:
        req.model_spec.version.value = version
    req.inputs["x"].CopyFrom(tf.make_tensor_proto(x))
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server["grpc"])
    return tf.make_ndarray(stub.Predict(req, timeout=60).outputs["probs"])


X = np.random.default_rng(7).normal(size=(5, 4)).astype(np.float32)


@pytest.mark.parametrize("model", ["mlp", "mlp_om"])
def test_grpc_and_rest_equal_tf_on_cpu(server, model):
    want = reference(1, X)
    np.testing.assert_allclose(grpc_predict(server, model, X), want, rtol=RTOL, atol=ATOL)
    status, body = rest(server, f"/v1/models/{model}:predict", {"instances": X.tolist()})
    assert status == 200, body
    np.testing.assert_allclose(body["predictions"], want, rtol=RTOL, atol=ATOL)
    status, body = rest(server, f"/v1/models/{model}/versions/1:predict",
                        {"inputs": {"x": X[:2].tolist()}})
    assert status == 200, body
    np.testing.assert_allclose(body["outputs"], want[:2], rtol=RTOL, atol=ATOL)


def test_status_and_metadata(server):
    status, body = rest(server, "/v1/models/mlp_om")
    assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
    status, body = rest(server, "/v1/models/mlp_om/metadata")
    sig = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in sig["inputs"]["x"]["tensor_shape"]["dim"]] == ["-1", "4"]
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server["grpc"])
    req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    req.model_spec.name = "mlp"
    sig_map = get_model_metadata_pb2.SignatureDefMap()
    stub.GetModelMetadata(req, timeout=60).metadata["signature_def"].Unpack(sig_map)
    assert list(sig_map.signature_def["serving_default"].outputs) == ["probs"]
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = "mlp_om"
    reply = model_service_pb2_grpc.ModelServiceStub(server["grpc"]).GetModelStatus(req)
    assert reply.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE


def test_b64_binary_values(server):
    raw = [b"hello", bytes([0xFF, 0x00, 0x41])]
    status, body = rest(server, "/v1/models/text:predict",
                        {"instances": [{"s": {"b64": base64.b64encode(r).decode()}} for r in raw]})
    assert status == 200, body
    assert [p["length"] for p in body["predictions"]] == [5, 3]
    assert body["predictions"][0]["upper"] == "HELLO"
    assert base64.b64decode(body["predictions"][1]["upper"]["b64"]) == bytes([0xFF, 0x00, 0x41])
    # a single input's rows may be the {"b64": ...} objects themselves (how images are sent)
    encoded = [{"b64": base64.b64encode(r).decode()} for r in raw]
    status, body = rest(server, "/v1/models/text:predict", {"instances": encoded})
    assert status == 200 and [p["length"] for p in body["predictions"]] == [5, 3], body
    status, body = rest(server, "/v1/models/text:predict", {"inputs": encoded})
    assert status == 200 and body["outputs"]["length"] == [5, 3], body


def test_errors_have_codes_and_messages(server):
    cases = [
        ("/v1/models/mlp:predict", b"{not json", 400, "not JSON"),
        ("/v1/models/mlp:predict", {"instances": [[1, 2, 3]]}, 400, "expects [-1, 4]"),
        ("/v1/models/mlp:predict", {"instances": [["a", "b", "c", "d"]]}, 400, "float32"),
        ("/v1/models/mlp:predict", {"rows": []}, 400, '"instances"'),
        ("/v1/models/mlp:predict", {"inputs": {"y": [[1, 2, 3, 4]]}}, 400, "unknown input 'y'"),
        ("/v1/models/mlp_om:predict", {"instances": [{"x": {"b64": "%%"}}]}, 400, "base64"),
        ("/v1/models/nope:predict", {"instances": [[1, 2, 3, 4]]}, 404, "'nope' is not served"),
        ("/v1/models/mlp/versions/9:predict", {"instances": [[1, 2, 3, 4]]}, 404, "version 9"),
        ("/v1/models/mlp/versions/9", None, 404, "version 9"),
    ]
    for path, body, code, text in cases:
        status, reply = rest(server, path, body)
        assert status == code and text in reply["error"], (path, body, status, reply)
    with pytest.raises(grpc.RpcError) as e:
        grpc_predict(server, "mlp", np.zeros((2, 3), np.float32))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "expects" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        grpc_predict(server, "nope", X)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def batch_histogram(server, model):
    _, text = rest(server, "/monitoring/prometheus/metrics")
    le1 = re.search(rf'npu_serving_batch_size_bucket{{model_name="{model}",le="1"}} (\d+)', text)
    count = re.search(rf'npu_serving_batch_size_count{{model_name="{model}"}} (\d+)', text)
    return int(le1.group(1)), int(count.group(1)), text


def test_concurrent_requests_are_batched(server):
    rows = [np.random.default_rng(i).normal(size=(1, 4)).astype(np.float32) for i in range(24)]
    before = batch_histogram(server, "mlp_om")
    results, barrier = [None] * len(rows), threading.Barrier(len(rows))

    def call(i):
        barrier.wait()
        results[i] = rest(server, "/v1/models/mlp_om:predict", {"instances": rows[i].tolist()})
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(rows))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for x, (status, body) in zip(rows, results):
        assert status == 200, body
        np.testing.assert_allclose(body["predictions"], reference(1, x), rtol=RTOL, atol=ATOL)
    le1, count, text = batch_histogram(server, "mlp_om")
    assert 'npu_serving_request_count{model_name="mlp_om",api="predict",status="OK"}' in text
    assert "npu_serving_request_latency_microseconds_bucket" in text
    # fewer batches than requests: at least one batch held more than one request
    assert (count - before[1]) - (le1 - before[0]) >= 1 and count - before[1] < len(rows)


def test_a_request_larger_than_the_batching_queue_runs_alone(server):
    """1601 rows, over max_enqueued_batches x max_batch_size (100 x 16): on an idle server it
    runs as a batch of its own (it used to get 503 however long the client retried)."""
    x = np.random.default_rng(5).normal(size=(1601, 4)).astype(np.float32)
    status, body = rest(server, "/v1/models/mlp_om:predict", {"instances": x.tolist()})
    assert status == 200, body
    np.testing.assert_allclose(body["predictions"], reference(1, x), rtol=RTOL, atol=ATOL)


def test_new_version_is_served_without_failed_requests(server):
    failures, done, served = [], threading.Event(), []

    def load():
        while not done.is_set():
            try:
                served.append(grpc_predict(server, "mlp", X))
            except grpc.RpcError as e:
                failures.append(e.details())
    t = threading.Thread(target=load)
    t.start()
    try:
        save_mlp(str(server["base"] / "mlp" / "2"), seed=2)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            _, body = rest(server, "/v1/models/mlp")
            if body["model_version_status"][0] == {"version": "2", "state": "AVAILABLE",
                                                   "status": {"error_code": "OK",
                                                              "error_message": ""}}:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"version 2 was not loaded: {body}")
    finally:
        done.set()
        t.join(60)
    assert not failures and served
    np.testing.assert_allclose(grpc_predict(server, "mlp", X, version=2), reference(2, X),
                               rtol=RTOL, atol=ATOL)
    status, body = rest(server, "/v1/models/mlp/versions/1:predict", {"instances": X.tolist()})
    assert status == 404


def test_sigterm_drains_in_flight_requests(models):
    """A request waiting in a long batching window still gets its answer after SIGTERM."""
    gen = run_server(models, ["--model_name", "mlp_om", "--model_base_path",
                              str(models / "mlp_om"), "--batch_timeout_micros", "3000000"])
    srv = next(gen)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=grpc_predict(srv, "mlp_om", X[:1])))
    t.start()
    time.sleep(1.0)                 # the request is queued in the 3 s batching window
    srv["proc"].send_signal(signal.SIGTERM)
    srv["terminated"] = True
    t.join(60)
    np.testing.assert_allclose(result["r"], reference(1, X[:1]), rtol=RTOL, atol=ATOL)
    with pytest.raises(StopIteration):
        next(gen)                   # the server exited with status 0
