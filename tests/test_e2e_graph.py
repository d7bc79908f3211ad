"""End to end, graph mode: unsupported ops stay on CPU and are named, one tf.function is safe
from several threads, and every failure of the graph engine leaves a correct program or a clear
error (never a crash). Tests that swap the compiler or read TensorFlow's C++ log run in a fresh
interpreter."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import os
import threading

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_python
from npu_device.explain import explain

NPU = "/device:NPU:0"


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    yield
    npu_device.set_npu_config(precision_mode=None)


def test_unsupported_op_runs_on_cpu_and_is_named():
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)

    def f(a):
        with tf.device(NPU):
            h = tf.nn.relu(tf.matmul(a, a, transpose_b=True))
            return tf.raw_ops.Reverse(tensor=h, dims=[True, False]) * 2.0   # no NPU kernel (v1 Reverse)

    e = explain(f, tf.constant(x))
    with tf.device("/device:CPU:0"):
        want = np.flip(np.maximum(x @ x.T, 0), 0) * 2.0
    np.testing.assert_allclose(e.outputs.numpy(), want, rtol=1e-5, atol=1e-6)
    assert e.ops_on("cpu") == {"Reverse": 1}, str(e)
    assert {"MatMul", "Relu", "Mul"} <= set(e.ops_on("npu")), str(e)
    reverse = next(n for n in e.fallbacks() if n.op == "Reverse")
    assert reverse.reason, reverse
    assert "Reverse" in str(e) and reverse.reason in str(e)


def test_one_function_from_four_threads():
    w = tf.constant(np.random.default_rng(1).normal(size=(16, 16)).astype(np.float32))
    x = tf.constant(np.random.default_rng(2).normal(size=(8, 16)).astype(np.float32))

    @tf.function
    def f(a):
        with tf.device(NPU):
            return tf.reduce_sum(tf.nn.sigmoid(tf.matmul(a, w)), axis=1)

    before = npu_device.counters()["models_run"]
    results, errors = [[] for _ in range(4)], []

    def work(i):
        try:
            for _ in range(100):
                results[i].append(f(x).numpy())
        except Exception as e:  # reported below; a thread must not die silently
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    want = results[0][0]
    assert all(np.array_equal(r, want) for rs in results for r in rs)
    assert sum(map(len, results)) == 400
    assert npu_device.counters()["models_run"] - before >= 400
    np.testing.assert_allclose(want, tf.reduce_sum(tf.sigmoid(x @ w), axis=1).numpy(), rtol=1e-5)


SWAP = """
    import numpy as np
    import tensorflow as tf
    import npu_device
    from npu_device import _C, compiler_bridge

    def compiler(kind, request):
        if kind == FAIL_KIND:
            raise ValueError("refused by the test compiler")
        return compiler_bridge._compile(kind, request)

    _C.set_compiler(compiler)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    @tf.function
    def f(a):
        return tf.nn.relu(tf.matmul(a, a, transpose_b=True) - 20.0) * 0.5
"""


def test_partition_failure_runs_the_graph_op_by_op():
    # The graph keeps TF's placement; NPU-placed ops run through the per-op NPU kernels.
    r = run_python(SWAP.replace("FAIL_KIND", "0") + """
    before = npu_device.counters()["models_run"]
    got = f(tf.constant(x)).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ x.T - 20.0, 0) * 0.5, rtol=1e-5)
    assert npu_device.counters()["models_run"] - before >= 3   # MatMul, Sub, Relu, Mul singly
    print("OK")
    """, env={"TF_CPP_MIN_LOG_LEVEL": "1"})   # our warning goes to TF's C++ log
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]
    warnings = [l for l in r.stderr.splitlines() if "could not partition" in l]
    assert len(warnings) == 1 and "refused by the test compiler" in warnings[0], r.stderr[-3000:]


def test_cluster_compile_failure_runs_the_cluster_on_cpu():
    # The compiler refuses every model: the step still completes, the cluster's own TF ops
    # computing it on CPU, and the count says so.
    r = run_python(SWAP.replace("FAIL_KIND", "1") + """
    npu_device.set_npu_config(cpu_fallback=True)
    before = npu_device.compile_stats()
    for _ in range(3):
        got = f(tf.constant(x)).numpy()
        np.testing.assert_allclose(got, np.maximum(x @ x.T - 20.0, 0) * 0.5, rtol=1e-6)
    after = npu_device.compile_stats()
    assert after["fallback_runs"] - before["fallback_runs"] == 3, (before, after)
    assert after["compile_failures"] - before["compile_failures"] == 1, (before, after)
    print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-3000:]


def test_invalid_input_in_a_cluster_is_tfs_invalid_argument_error():
    # The program's own error is not a fallback: TF's error class, naming op and problem.
    r = run_python("""
    import npu_device
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)] * 2)
    def f(a, b):
        return tf.nn.relu(tf.matmul(a, b)) + 1.0
    try:
        f(tf.ones([2, 3]), tf.ones([4, 5]))
    except tf.errors.InvalidArgumentError as e:
        print("ERROR:", e.message)
    print("stats", npu_device.compile_stats()["fallbacks"])
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR:" in r.stdout and "MatMul" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "stats 0" in r.stdout


def test_plugin_imports_the_compiler_itself():
    # TensorFlow may load the plugin without npu_device ever being imported (an installed
    # plugin is auto-loaded): the first compile imports npu_device.compiler_bridge.
    plugin = os.path.join(os.path.dirname(npu_device.__file__), "_lib", "libnpu_plugin.so")
    r = run_python(f"""
    import sys
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import load_library
    if not tf.config.list_physical_devices("NPU"):   # not auto-loaded from an install
        load_library.load_pluggable_device_library({plugin!r})
    assert "npu_device.compiler_bridge" not in sys.modules
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = tf.function(lambda a: tf.matmul(a, a, transpose_b=True) + 1.0)(tf.constant(x))
    assert "NPU" in y.device, y.device
    np.testing.assert_allclose(y.numpy(), x @ x.T + 1.0)
    assert "npu_device.compiler_bridge" in sys.modules
    print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_bridge_turns_exceptions_into_errors():
    from npu_device import _C
    with pytest.raises(RuntimeError, match="unknown compile kind 7"):
        _C.call_compiler(7, b"")
    with pytest.raises(RuntimeError, match="not a serialized tensorflow.NodeDef"):
        _C.call_compiler(1, b"not a NodeDef")
    with pytest.raises(TypeError, match="callable"):
        _C.set_compiler(42)
