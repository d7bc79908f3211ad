"""npu-model-server against hostile requests (issue 13): size limits checked before anything is
allocated, strict dtypes, no null, bounded connections and threads, malformed or unreadable .om
files, and the drain on SIGTERM. Servers run in subprocesses on 127.0.0.1 with ephemeral ports;
every call has a timeout and every loop a bound."""
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest
import tensorflow as tf

grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving.apis")
pytest.importorskip("cheroot")
from tensorflow.core.framework import tensor_pb2, types_pb2  # noqa: E402
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402

from npu_device.serving import CannSession, atc, container  # noqa: E402
from test_serving_server import RTOL, ATOL, reference, save_mlp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 30          # seconds, any single call


class Ints(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int32, name="k")])
    def serve(self, k):
        return {"doubled": k * 2}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("limits")
    os.makedirs(base / "mlp")
    save_mlp(str(base / "mlp" / "1"), seed=1)
    os.makedirs(base / "mlp_om" / "1")
    gd, ins, outs = atc.load_saved_model(str(base / "mlp" / "1"))
    with open(base / "mlp_om" / "1" / "mlp.om", "wb") as f:
        f.write(atc.compile_graph(gd, ins, outs, "x:-1,4", [1, 4, 16]))
    with tf.device("/CPU:0"):
        ints = Ints()
        tf.saved_model.save(ints, str(base / "ints" / "1"),
                            signatures={"serving_default": ints.serve})
    return base


def write_config(base, names):
    path = base / ("-".join(names) + ".config")
    path.write_text("model_config_list { %s }" % " ".join(
        'config { name: "%s" base_path: "%s" }' % (m, base / m) for m in names))
    return str(path)


class Server:
    """npu-model-server in a subprocess; .grpc (channel), .rest_host/.rest_port, .proc."""

    def __init__(self, base, flags):
        self.log = open(base / f"server-{time.monotonic_ns()}.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "npu_device.serving.model_server", "--port", "0",
             "--rest_api_port", "0", "--file_system_poll_wait_seconds", "0", *flags],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
        line = _readline(self.proc, 120)
        m = re.search(r"grpc=([\d.:]+) rest=([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"server did not start: {line!r}\n{self.log_text()}")
        self.grpc = grpc.insecure_channel(m.group(1))
        self.stub = prediction_service_pb2_grpc.PredictionServiceStub(self.grpc)
        self.rest_host, self.rest_port = m.group(2), int(m.group(3))

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024

    def terminate(self, timeout=60):
        """SIGTERM once; (exit status, seconds to exit)."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"server still running {timeout} s after SIGTERM\n"
                                 f"{self.log_text()}")
        finally:
            self.proc.stdout.close()
        seconds = time.monotonic() - start
        self.grpc.close()
        return rc, seconds


def _readline(proc, timeout):
    """The server's first stdout line, or '' after `timeout` seconds."""
    result = []
    t = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else ""


@pytest.fixture(scope="module")
def server(models):
    s = Server(models, ["--model_config_file", write_config(models, ["mlp", "mlp_om", "ints"]),
                        "--max_request_bytes", str(1 << 20), "--max_request_elements", "100000",
                        "--rest_api_max_json_depth", "16"])
    yield s
    rc, _ = s.terminate()
    assert rc == 0, s.log_text()


def predict_request(model, name, proto):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    req.inputs[name].CopyFrom(proto)
    return req


def tensor(dtype, shape, **fields):
    proto = tensor_pb2.TensorProto(dtype=dtype, **fields)
    for d in shape:
        proto.tensor_shape.dim.add(size=d)
    return proto


def grpc_error(server, req):
    with pytest.raises(grpc.RpcError) as e:
        server.stub.Predict(req, timeout=TIMEOUT)
    return e.value.code(), e.value.details()


def rest(server, method, path, body=None, headers=None):
    """(status, decoded JSON) on a fresh connection."""
    conn = http.client.HTTPConnection(server.rest_host, server.rest_port, timeout=TIMEOUT)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, path, data, headers or {})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def raw_http(server, head):
    """Sends raw request bytes (headers, maybe a partial body); (status, JSON body)."""
    with socket.create_connection((server.rest_host, server.rest_port), timeout=TIMEOUT) as s:
        s.sendall(head)
        data, need = b"", None
        for _ in range(1000):                 # until the whole response (or EOF) is here
            if need is None and b"\r\n\r\n" in data:
                headers, _, _ = data.partition(b"\r\n\r\n")
                need = len(headers) + 4 + int(re.search(rb"Content-Length: (\d+)", headers,
                                                        re.I).group(1))
            if need is not None and len(data) >= need:
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    headers, _, body = data.partition(b"\r\n\r\n")
    assert re.search(rb"^Content-Type: application/json\r?$", headers, re.I | re.M), headers
    return int(headers.split(b" ", 2)[1]), json.loads(body)


# ------------------------------------------------------------------ gRPC request tensors

def test_grpc_declared_shape_is_checked_before_allocating(server):
    """The 35-byte request that declared [2^26, 4] with one float_val grew the server to
    6.7 GB: now it is refused from its header alone."""
    rss = server.rss_mb()
    for proto in (tensor(types_pb2.DT_FLOAT, [1 << 26, 4], float_val=[1.0]),
                  tensor(types_pb2.DT_FLOAT, [1 << 26, 4], tensor_content=b"\0" * 16),
                  tensor(types_pb2.DT_FLOAT, [1 << 40, 1 << 40])):
        req = predict_request("mlp", "x", proto)
        assert req.ByteSize() < 64
        code, details = grpc_error(server, req)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "--max_request_elements" in details and "'x'" in details, details
    assert server.rss_mb() - rss < 100
    # a message over --max_request_bytes is refused by gRPC itself
    big = tf.make_tensor_proto(np.zeros((70000, 4), np.float32))
    code, details = grpc_error(server, predict_request("mlp", "x", big))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details


def test_grpc_values_must_match_the_declared_shape(server):
    cases = [
        (tensor(types_pb2.DT_FLOAT, [10, 4], tensor_content=b"\0" * 16), "exactly 160"),
        (tensor(types_pb2.DT_FLOAT, [2, 4], float_val=[1.0, 2.0, 3.0]), "3 float_val values"),
        (tensor(types_pb2.DT_FLOAT, [2, 4]), "0 float_val values"),
        (tensor(types_pb2.DT_FLOAT, [-1, 4], float_val=[1.0]), "must be >= 0"),
    ]
    for proto, text in cases:
        code, details = grpc_error(server, predict_request("mlp_om", "x", proto))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and text in details, details
    ones = np.ones((2, 4), np.float32)
    for proto in (tensor(types_pb2.DT_FLOAT, [2, 4], float_val=[1.0]),        # broadcast
                  tensor(types_pb2.DT_FLOAT, [2, 4], float_val=[1.0] * 8)):
        for model in ("mlp", "mlp_om"):
            out = server.stub.Predict(predict_request(model, "x", proto), timeout=TIMEOUT)
            np.testing.assert_allclose(tf.make_ndarray(out.outputs["probs"]), reference(1, ones),
                                       rtol=RTOL, atol=ATOL)


def test_grpc_dtypes_are_checked_strictly(server):
    for model in ("mlp", "mlp_om"):
        proto = tf.make_tensor_proto(np.ones((2, 4), np.int32))
        code, details = grpc_error(server, predict_request(model, "x", proto))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "'x'" in details and "DT_INT32" in details and "DT_FLOAT" in details, details
    proto = tf.make_tensor_proto(np.ones((1, 2), np.float32))
    code, details = grpc_error(server, predict_request("ints", "k", proto))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "DT_INT32" in details, details
    out = server.stub.Predict(predict_request("ints", "k", tf.make_tensor_proto(
        np.array([[3, -4]], np.int32))), timeout=TIMEOUT)
    assert tf.make_ndarray(out.outputs["doubled"]).tolist() == [[6, -8]]


# ------------------------------------------------------------------ REST bodies

def test_rest_body_limit_is_checked_before_reading(server):
    head = (b"POST /v1/models/mlp:predict HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{")
    for length in (10**12, (1 << 20) + 1):
        status, body = raw_http(server, head % length)
        assert status == 413 and "--max_request_bytes" in body["error"], body
    chunked = (b"POST /v1/models/mlp:predict HTTP/1.1\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n200000\r\n{")
    status, body = raw_http(server, chunked)
    assert status == 413 and "--max_request_bytes" in body["error"], body
    status, body = rest(server, "POST", "/v1/models/mlp:predict",
                        {"instances": [[0, 0, 0, 0]] * 30000})
    assert status == 413 and "--max_request_elements" in body["error"], body
    for headers, text in ((b"Content-Length: 2\r\nContent-Length: 40\r\n", "conflicting"),
                          (b"Content-Length: two\r\n", "Content-Length")):
        status, body = raw_http(server, b"POST /v1/models/mlp:predict HTTP/1.1\r\nHost: x\r\n"
                                + headers + b"\r\n{}")
        assert status == 400 and text in body["error"], body
    status, body = rest(server, "POST", "/v1/models/mlp:predict", b"[" * 100000)
    assert status == 400 and "--rest_api_max_json_depth" in body["error"], body
    status, body = rest(server, "POST", "/v1/models/mlp:predict",
                        {"instances": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]})
    assert status == 400 and "--rest_api_max_json_depth" in body["error"], body
    status, body = rest(server, "POST", "/v1/models/mlp:predict", {"instances": [[1, 2, 3, 4]]})
    assert status == 200, body


@pytest.mark.timeout(120)    # quadratic, this body took hours; linear, well under a second
def test_json_depth_check_is_linear_on_unterminated_strings():
    """A string that never closes, full of escaped quotes, made the depth check's string pattern
    retry from every quote (a 120 KB body stopped the whole server for 20 s: the GIL is held)."""
    from npu_device.serving.errors import InvalidArgument
    from npu_device.serving.limits import check_json_depth
    with pytest.raises(InvalidArgument, match="nests 20 levels"):
        check_json_depth(b"[" * 20 + b'"' + b'\\"' * 2_000_000, 16)
    check_json_depth(b'["\\"' + b"[" * 40 + b'"]', 16)          # brackets in a string
    with pytest.raises(InvalidArgument, match="nests 41 levels"):    # an escaped backslash
        check_json_depth(b'["\\\\"' + b"[" * 40 + b"]" * 40 + b"]", 16)


def test_string_elements_count_what_they_take():
    """One string broadcast to many elements: each element costs TF a string object besides its
    bytes (a 30-byte request held 2 GB for 15M elements whose bytes counted 15 MB)."""
    from npu_device.serving.errors import ResourceExhausted
    from npu_device.serving.limits import (STRING_ELEMENT_BYTES, Budget, Limits,
                                           tensor_from_proto)
    from npu_device.serving.servable import TensorSpec
    limits = Limits(max_request_bytes=1 << 20)
    spec = TensorSpec("s", np.dtype(object), (-1,))
    n = (1 << 20) // (STRING_ELEMENT_BYTES + 1) + 1           # bytes alone: 32 KiB, fine
    proto = tensor(types_pb2.DT_STRING, [n], string_val=[b"a"])
    with pytest.raises(ResourceExhausted, match="--max_request_bytes"):
        tensor_from_proto("s", proto, spec, "serving_default", Budget(limits))
    proto = tensor(types_pb2.DT_STRING, [n // 2], string_val=[b"a"])
    assert tensor_from_proto("s", proto, spec, "serving_default", Budget(limits)).shape == (n // 2,)


def test_int64_bounds_are_exact_for_float_values():
    """int64's max rounds up to 2^63 as a float: 2^63 written as a float compared equal to it
    and wrapped to -2^63."""
    from npu_device.serving.errors import InvalidArgument
    from npu_device.serving.limits import Budget, Limits, array_from_json
    from npu_device.serving.servable import TensorSpec
    for dtype in (np.int64, np.uint64):
        spec = TensorSpec("i", np.dtype(dtype), (-1,))
        top = float(np.iinfo(dtype).max) + 1                    # 2^63 / 2^64, exact
        with pytest.raises(InvalidArgument, match="outside the range"):
            array_from_json("i", [top], spec, "s", Budget(Limits()), False)
        below = np.nextafter(top, 0)
        assert array_from_json("i", [below], spec, "s", Budget(Limits()), False)[0] == int(below)


def test_rest_values_are_checked_strictly(server):
    cases = [
        ("mlp", {"instances": [[1, None, 3, 4]]}, "null"),
        ("mlp_om", {"inputs": None}, "null"),
        ("mlp", {"inputs": {"x": [[True, 1, 2, 3]]}}, "boolean"),
        ("mlp", {"instances": [["1", "2", "3", "4"]]}, "string"),
        ("ints", {"instances": [[1.5, 2]]}, "non-integral"),
        ("ints", {"instances": [[2**40, 1]]}, "outside the range of int32"),
        ("ints", {"instances": [[1, 2], [3]]}, "equal-length rows"),
    ]
    for model, body, text in cases:
        status, reply = rest(server, "POST", f"/v1/models/{model}:predict", body)
        assert status == 400 and text in reply["error"], (model, body, reply)
    status, reply = rest(server, "POST", "/v1/models/ints:predict",
                         {"instances": [[1, 2], [3.0, -4]]})
    assert status == 200 and reply["predictions"] == [[2, 4], [6, -8]], reply
    status, reply = rest(server, "POST", "/v1/models/mlp:predict", {"instances": [[1, 2, 3, 4]]})
    np.testing.assert_allclose(reply["predictions"], reference(1, np.array(
        [[1, 2, 3, 4]], np.float32)), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ .om files

def pack_raw(payload):
    return container._HEADER.pack(container.MAGIC, 1, zlib.crc32(payload), len(payload)) + payload


def test_malformed_containers_name_the_file_and_field(models, tmp_path):
    good = (models / "mlp_om" / "1" / "mlp.om").read_bytes()
    manifest, blobs = container.unpack(good)

    def variant(**changes):
        m = json.loads(json.dumps(manifest))
        for key, value in changes.items():
            if key == "input0":
                m["inputs"][0].update(value)
            elif value is None:
                del m[key]
            else:
                m[key] = value
        return container.pack(m, blobs)
    meta = json.dumps(manifest).encode()
    cases = [
        (variant(inputs=None), "manifest field inputs is missing"),
        (variant(input0={"dtype": 5}), "manifest field inputs[0].dtype must be a string"),
        (variant(input0={"dtype": "float99"}), "inputs[0].dtype is 'float99'"),
        (variant(input0={"shape": ["a", 4]}), "inputs[0].shape must be a list of integers"),
        (variant(input0={"shape": [2, 4]}), "the first dimension must be -1"),
        (variant(dynamic_batch="yes"), "dynamic_batch must be true or false"),
        (variant(dynamic_batch=False), "exactly one model with batch size 0"),
        (container.pack([1, 2], blobs), "manifest must be a JSON object"),
        (pack_raw(struct.pack("<I", 5) + b"{nope"), "manifest is not JSON"),
        (pack_raw(struct.pack("<I", 999) + b"{}"), "manifest_len 999 runs past the payload"),
        (pack_raw(struct.pack("<I", len(meta)) + meta + struct.pack("<I", 2)
                  + struct.pack("<IQ", 1, 4) + b"abcd"), "payload ends inside models[1]"),
        (pack_raw(struct.pack("<I", len(meta)) + meta + struct.pack("<I", 1)
                  + struct.pack("<IQ", 1, 10**9)), "past the end of the payload"),
        (container.pack(manifest, {1: b"NPUOM\0\0\0garbage"}), "compiled model for batch size 1"),
    ]
    for i, (data, text) in enumerate(cases):
        path = tmp_path / f"bad{i}.om"
        path.write_bytes(data)
        with pytest.raises(container.ContainerError) as e:
            CannSession(str(path))
        assert str(path) in str(e.value) and text in str(e.value), (i, str(e.value))
    truncated = tmp_path / "truncated.om"
    truncated.write_bytes(good[:-10])
    with pytest.raises(container.ContainerError, match="truncated"):
        CannSession(str(truncated))


def test_non_regular_files_are_refused_without_blocking(tmp_path, python_subprocess):
    """A FIFO, a directory and /dev/zero used to hang CannSession (or read forever)."""
    fifo = tmp_path / "model.om"
    os.mkfifo(fifo)
    os.makedirs(tmp_path / "dir.om")
    result = python_subprocess(f"""
        from npu_device.serving import CannSession, container
        for path in ({str(fifo)!r}, {str(tmp_path / 'dir.om')!r}, "/dev/zero"):
            try:
                CannSession(path)
            except container.ContainerError as e:
                print("refused:", e)
        """, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"refused: {fifo}: not a regular file (a FIFO)" in result.stdout
    assert "dir.om: not a regular file (a directory)" in result.stdout
    assert "refused: /dev/zero: not a regular file (a character device)" in result.stdout


# ------------------------------------------------------------------ concurrency, deadline

def test_connection_and_rpc_limits_then_drain_deadline(models):
    s = Server(models, ["--model_name", "mlp_om", "--model_base_path", str(models / "mlp_om"),
                        "--enable_batching", "--max_batch_size", "64",
                        "--batch_timeout_micros", "1500000", "--grpc_max_threads", "2",
                        "--grpc_max_concurrent_rpcs", "2", "--rest_api_num_threads", "2",
                        "--rest_api_max_connections", "2",
                        "--rest_api_idle_timeout_seconds", "5", "--drain_timeout_seconds", "0.5"])
    req = predict_request("mlp_om", "x", tf.make_tensor_proto(np.ones((1, 4), np.float32)))
    try:
        # gRPC: 4 calls that wait in the 1.5 s batch window; 2 may run at once
        codes = []

        def call():
            try:
                s.stub.Predict(req, timeout=TIMEOUT)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        assert len(codes) == 4 and codes.count(grpc.StatusCode.OK) >= 1, codes
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 1, codes
        # REST: 2 silent connections hold both threads, 2 more wait; the next gets 503
        silent = []
        for _ in range(4):
            silent.append(socket.create_connection((s.rest_host, s.rest_port), timeout=10))
            time.sleep(0.3)
        status, body = raw_http(s, b"GET /v1/models/mlp_om HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503 and "--rest_api_max_connections" in body["error"], body
        for c in silent:
            c.close()
        for _ in range(50):                     # the threads notice the closed connections
            status, body = rest(s, "GET", "/v1/models/mlp_om")
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200, body
        # the drain deadline: a call still in its batch window is cut, the server exits
        result = []
        t = threading.Thread(target=lambda: result.append(grpc_error(s, req)))
        t.start()
        time.sleep(0.3)
    finally:
        rc, seconds = s.terminate()
    t.join(TIMEOUT)
    assert rc == 1 and seconds < 5, (rc, seconds, s.log_text())
    assert result and result[0][0] == grpc.StatusCode.UNAVAILABLE, result
    assert "deadline cut 1 request(s) short" in s.log_text()


def test_requests_that_arrive_too_slowly_are_cut(models):
    """A client sending a header line now and then (slowloris), and one sending less body than
    its Content-Length, each hold a worker thread only until --rest_api_request_timeout_seconds:
    with both threads taken, a good request is still served."""
    s = Server(models, ["--model_name", "mlp_om", "--model_base_path", str(models / "mlp_om"),
                        "--rest_api_num_threads", "2", "--rest_api_request_timeout_seconds", "1.5"])
    stop, cut = threading.Event(), []

    def trickle(first, then):
        with socket.create_connection((s.rest_host, s.rest_port), timeout=TIMEOUT) as c:
            c.sendall(first)
            c.settimeout(0.2)
            while not stop.is_set():
                try:
                    if c.recv(1024) == b"":            # the server closed it
                        break
                except socket.timeout:
                    try:
                        c.sendall(then)                 # well within the idle timeout
                    except OSError:
                        break
                except OSError:
                    break
            else:
                return
            cut.append(first[:4])

    clients = [threading.Thread(target=trickle, args=(
                   b"GET /v1/models/mlp_om HTTP/1.1\r\nHost: x\r\n", b"X-Slow: 1\r\n")),
               threading.Thread(target=trickle, args=(
                   b"POST /v1/models/mlp_om:predict HTTP/1.1\r\nHost: x\r\n"
                   b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", b" "))]
    try:
        for c in clients:
            c.start()
        time.sleep(0.5)                                  # both threads are taken
        status, body = rest(s, "GET", "/v1/models/mlp_om")
        assert status == 200, body
        for c in clients:
            c.join(TIMEOUT)
        assert sorted(cut) == [b"GET ", b"POST"], cut
        assert "did not arrive within 1.5 s" in s.log_text()
    finally:
        stop.set()
        rc, _ = s.terminate()
    assert rc == 0, s.log_text()


def test_sigterm_drains_grpc_and_closes_rest_keep_alive(models):
    """16 gRPC calls in flight at SIGTERM all succeed (they used to come back CANCELLED when
    they still waited inside gRPC), and a REST client looping on a keep-alive connection no
    longer keeps the server alive."""
    s = Server(models, ["--model_config_file", write_config(models, ["mlp", "mlp_om"]),
                        "--drain_timeout_seconds", "20"])
    x = np.random.default_rng(3).normal(size=(200000, 4)).astype(np.float32)
    want = reference(1, x[:8])
    req = predict_request("mlp", "x", tf.make_tensor_proto(x))
    rest_log, stop_rest = [], threading.Event()

    def keep_alive_client():
        conn = http.client.HTTPConnection(s.rest_host, s.rest_port, timeout=TIMEOUT)
        body = json.dumps({"instances": [[1, 2, 3, 4]]})
        deadline = time.monotonic() + 60
        for _ in range(5000):
            if stop_rest.is_set() or time.monotonic() > deadline:
                break
            try:
                conn.request("POST", "/v1/models/mlp_om:predict", body)
                r = conn.getresponse()
                r.read()
                rest_log.append((r.status, r.getheader("Connection")))
            except OSError as e:
                rest_log.append((type(e).__name__, None))
                break
        conn.close()
    rest_thread = threading.Thread(target=keep_alive_client)
    rest_thread.start()
    for _ in range(100):
        if len(rest_log) >= 5:
            break
        time.sleep(0.05)
    results = [None] * 16

    def call(i):
        try:
            results[i] = s.stub.Predict(req, timeout=60)
        except grpc.RpcError as e:
            results[i] = e
    threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.1)
        rc, seconds = s.terminate(timeout=40)
    finally:
        stop_rest.set()
        for t in threads:
            t.join(60)
        rest_thread.join(TIMEOUT)
    errors = [r for r in results if not isinstance(r, predict_pb2.PredictResponse)]
    assert not errors, [(e.code(), e.details()) if isinstance(e, grpc.RpcError) else e
                        for e in errors]
    for r in results:
        np.testing.assert_allclose(tf.make_ndarray(r.outputs["probs"])[:8], want,
                                   rtol=RTOL, atol=ATOL)
    assert rc == 0 and seconds < 20, (rc, seconds, s.log_text())
    statuses = [st for st, _ in rest_log]
    assert len(rest_log) >= 5 and all(st == 200 for st in statuses[:-1]), rest_log[-5:]
    assert not rest_thread.is_alive()
