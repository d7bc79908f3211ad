"""tf.distribute on NPUs (docs/distributed.md), each run in fresh interpreters (device counts are
fixed before TensorFlow starts):

* MirroredStrategy over two NPUs in one process (Keras fit and a custom loop with strategy.run,
  reduce and gather), gradients all-reduced by TF's collective ops on NPU tensors, against the
  same strategy over two logical CPUs;
* MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1
  (tests/multi_worker_program.py): fit on NPUs against CPU workers, the chief's checkpoint
  restored on one NPU, and a worker killed mid-training: the other fails with a clear error
  (the strategy's health check), and training resumes from BackupAndRestore's backup."""
import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import run_python

TIMEOUT = 240
PROGRAM = """
import json, sys
import npu_device
import numpy as np
import tensorflow as tf
import keras

kind = sys.argv[1]
if kind == "npu":
    npu_device.set_npu_config(device_count=2)
    devices = ["/device:NPU:0", "/device:NPU:1"]
else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    devices = ["/device:CPU:0", "/device:CPU:1"]
strategy = tf.distribute.MirroredStrategy(devices)
rng = np.random.default_rng(0)
x = rng.standard_normal((100, 8)).astype(np.float32)        # 100 = 6 batches of 16 + 4
y = rng.integers(0, 3, 100).astype(np.int32)

def model():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(3)])
    return m

out = {}
with strategy.scope():
    m = model()
    m.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
out["fit_loss"] = m.fit(x, y, batch_size=16, epochs=2, verbose=0).history["loss"]
out["fit_weights"] = [w.numpy().tolist() for w in m.weights]

# A custom loop: per-replica steps, gradients all-reduced by apply_gradients, the losses
# summed across replicas and the per-replica predictions gathered.
with strategy.scope():
    c = model()
    opt = keras.optimizers.SGD(0.1)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
ds = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(16))

@tf.function
def step(xb, yb):
    def replica(xb, yb):
        with tf.GradientTape() as tape:
            logits = c(xb, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(yb, logits), global_batch_size=16)
        opt.apply_gradients(zip(tape.gradient(loss, c.trainable_variables),
                                c.trainable_variables))
        return loss, tf.argmax(logits, axis=1)
    loss, pred = strategy.run(replica, args=(xb, yb))
    return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
            strategy.gather(pred, axis=0))

losses, preds = [], []
for xb, yb in ds:
    loss, pred = step(xb, yb)
    losses.append(float(loss))
    preds.extend(pred.numpy().tolist())
out["loop_loss"] = losses
out["loop_predictions"] = preds
out["loop_weights"] = [w.numpy().tolist() for w in c.weights]
out["replica_devices"] = [d.split("/")[-1] for d in strategy.extended.worker_devices]
print("RESULT " + json.dumps(out))
"""


def _run(kind):
    p = run_python(PROGRAM.replace("sys.argv[1]", repr(kind)), timeout=TIMEOUT)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def runs():
    return _run("npu"), _run("cpu")


def test_mirrored_strategy_runs_one_replica_per_npu(runs):
    npu, cpu = runs
    assert npu["replica_devices"] == ["device:NPU:0", "device:NPU:1"]
    assert cpu["replica_devices"] == ["device:CPU:0", "device:CPU:1"]


def test_mirrored_fit_matches_two_cpu_replicas(runs):
    npu, cpu = runs
    np.testing.assert_allclose(npu["fit_loss"], cpu["fit_loss"], rtol=1e-5, atol=1e-6)
    for a, b in zip(npu["fit_weights"], cpu["fit_weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_mirrored_custom_loop_matches_two_cpu_replicas(runs):
    npu, cpu = runs
    assert len(npu["loop_loss"]) == 7                      # the partial last batch included
    np.testing.assert_allclose(npu["loop_loss"], cpu["loop_loss"], rtol=1e-5, atol=1e-6)
    assert npu["loop_predictions"] == cpu["loop_predictions"]
    assert len(npu["loop_predictions"]) == 100
    for a, b in zip(npu["loop_weights"], cpu["loop_weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)



# ---- MultiWorkerMirroredStrategy: worker processes on 127.0.0.1 -------------------------------

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi_worker_program.py")
WORKERS = 2


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _train(tmp, name, device="npu", epochs=4, backup=None, die=None):
    """Runs WORKERS worker processes to their end; returns [(returncode, result or None, stderr)]
    per worker. `die`: (worker index, epoch) at which that worker crashes."""
    ports = _free_ports(WORKERS)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    procs = []
    for i in range(WORKERS):
        args = {"index": i, "ports": ports, "device": device, "epochs": epochs,
                "backup": str(backup or tmp / f"{name}-backup"),
                "die_at_epoch": die[1] if die and die[0] == i else -1,
                "weights": str(tmp / f"{name}-weights" / "ckpt"), "out": str(tmp / f"{name}-{i}.json")}
        procs.append(subprocess.Popen([sys.executable, WORKER, json.dumps(args)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    results = []
    for i, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"worker {i} of {name} hung past {TIMEOUT} s") from None
        out = tmp / f"{name}-{i}.json"
        results.append((p.returncode, json.loads(out.read_text()) if out.exists() else None, err))
    return results


@pytest.fixture(scope="module")
def multi_worker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi_worker")
    return tmp, {"npu": _train(tmp, "npu"), "cpu": _train(tmp, "cpu", device="cpu")}


def test_multi_worker_fit_on_npus_matches_cpu_workers(multi_worker):
    _, runs = multi_worker
    for kind, results in runs.items():
        for code, _, err in results:
            assert code == 0, f"{kind} worker failed:\n{err[-3000:]}"
    npu = [r for _, r, _ in runs["npu"]]
    cpu = [r for _, r, _ in runs["cpu"]]
    assert [r["devices"] for r in npu] == [[f"/job:worker/replica:0/task:{i}/device:NPU:0"]
                                           for i in range(WORKERS)]
    assert all("CPU" in r["devices"][0] for r in cpu)
    for n, c in zip(npu, cpu):
        np.testing.assert_allclose(n["loss"], c["loss"], rtol=1e-5, atol=1e-6)
        for a, b in zip(n["weights"], c["weights"]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(npu[0]["weights"], npu[1]["weights"]):
        np.testing.assert_array_equal(a, b)                  # the replicas stay in sync


def test_the_chiefs_checkpoint_restores_on_one_npu(multi_worker):
    tmp, runs = multi_worker
    chief = runs["npu"][0][1]
    code = f"""
import json
import npu_device
import numpy as np
import tensorflow as tf
import tf_keras as keras
with tf.device("/device:NPU:0"):
    model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                              keras.layers.Dense(3)])
    model.load_weights({str(tmp / "npu-weights" / "ckpt")!r}).expect_partial()
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    y = model(x)
    print("RESULT " + json.dumps({{"weights": [w.numpy().tolist() for w in model.weights],
                                  "pred": y.numpy().tolist(), "x": x.tolist(),
                                  "device": y.device}}))
"""
    p = run_python(code, timeout=TIMEOUT)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT "):])
    assert got["device"].endswith("NPU:0")
    for a, b in zip(got["weights"], chief["weights"]):
        np.testing.assert_array_equal(a, b)
    w1, b1, w2, b2 = (np.asarray(w, np.float32) for w in chief["weights"])
    want = np.maximum(np.asarray(got["x"], np.float32) @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(got["pred"], want, rtol=1e-5, atol=1e-5)


def test_a_killed_worker_fails_the_others_and_training_resumes_from_backup(multi_worker, tmp_path):
    _, runs = multi_worker
    backup = tmp_path / "backup"
    start = time.monotonic()
    crashed = _train(tmp_path, "crash", backup=backup, die=(1, 2))
    assert crashed[1][0] == 17                               # the worker that died
    code, result, err = crashed[0]
    assert code != 0 and result is None, "the surviving worker finished without its peer"
    assert re.search(r"unhealthy|heartbeat|Unavailable|Aborted|DeadlineExceeded", err), err[-3000:]
    assert time.monotonic() - start < TIMEOUT                # a clear error, not a hang
    resumed = _train(tmp_path, "resume", backup=backup)
    for code, result, err in resumed:
        assert code == 0, err[-3000:]
        assert result["epochs"] == [2, 3]                    # epochs 0 and 1 came from the backup
    for a, b in zip(resumed[0][1]["weights"], runs["npu"][0][1]["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)   # as if never interrupted
