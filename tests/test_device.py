"""The NPU PluggableDevice as TensorFlow sees it: device listing, host<->NPU copies of every
dtype, memory accounting of TF tensors, out-of-memory, several devices, lazy initialization."""
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import dtypes

import npu_device
from conftest import run_python
from npu_device import _C, _loader

MiB = 1 << 20

# Host->NPU copies place these in NPU memory (one allocation each).
DEVICE_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int16, tf.int64,
                 tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.bool, tf.complex64, tf.complex128]
# TensorFlow keeps int32 and string tensors of a device in host memory (as it does for GPUs):
# the tensor reports NPU:0 but takes no NPU memory.
HOST_MEMORY_DTYPES = [tf.int32, tf.string]
# TensorFlow does not copy these to a PluggableDevice at all; they stay on CPU.
CPU_ONLY_DTYPES = [dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.int4, dtypes.uint4, tf.qint8]


def in_use():
    return _C.memory_stats(0)["in_use"]


def rounded(n):
    return (n + 63) // 64 * 64


def random_array(dtype, n=1000, seed=0):
    """n values of `dtype` with random bit patterns (NaN payloads, -0.0, denormals included)."""
    rng = np.random.default_rng(seed)
    if dtype == tf.string:
        return np.array([bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(n)])
    if dtype == tf.bool:
        return rng.integers(0, 2, n).astype(bool)
    if dtype in (dtypes.int4, dtypes.uint4, tf.qint8):
        return rng.integers(0, 8, n).astype(dtype.as_numpy_dtype)
    np_dtype = np.dtype(dtype.as_numpy_dtype)
    return rng.integers(0, 256, n * np_dtype.itemsize, dtype=np.uint8).view(np_dtype)


def same_bits(tensor_value, array):
    if array.dtype.kind in "SO":
        return list(tensor_value) == list(array)
    return np.asarray(tensor_value).tobytes() == array.tobytes()


def test_npu_is_listed():
    physical = [d.name for d in tf.config.list_physical_devices("NPU")]
    logical = [d.name for d in tf.config.list_logical_devices("NPU")]
    count = _C.device_count()
    assert physical == [f"/physical_device:NPU:{i}" for i in range(count)]
    assert logical == [f"/device:NPU:{i}" for i in range(count)]
    assert _C.plugin_registered() and _C.is_initialized()
    assert npu_device.info() == [_C.device_info(i) for i in range(count)]


@pytest.mark.parametrize("dtype", DEVICE_DTYPES, ids=lambda d: d.name)
def test_round_trip_through_npu_memory(dtype):
    array = random_array(dtype)
    before = in_use()
    with tf.device("/NPU:0"):
        x = tf.constant(array, dtype=dtype)
    assert x.device.endswith("/device:NPU:0")
    assert in_use() - before == rounded(array.nbytes)
    assert same_bits(x.numpy(), array)
    del x
    assert in_use() == before


@pytest.mark.parametrize("dtype", HOST_MEMORY_DTYPES, ids=lambda d: d.name)
def test_host_memory_dtypes_round_trip(dtype):
    array = random_array(dtype)
    before = in_use()
    with tf.device("/NPU:0"):
        x = tf.constant(array, dtype=dtype)
    assert x.device.endswith("/device:NPU:0")
    assert in_use() == before
    assert same_bits(x.numpy(), array)


@pytest.mark.parametrize("dtype", CPU_ONLY_DTYPES, ids=lambda d: d.name)
def test_cpu_only_dtypes_stay_on_cpu(dtype):
    array = random_array(dtype)
    with tf.device("/NPU:0"):
        x = tf.constant(array, dtype=dtype)
    assert x.device.endswith("/device:CPU:0")
    assert same_bits(x.numpy(), array)


def test_constant_of_4_mib_takes_exactly_4_mib():
    before = in_use()
    with tf.device("/NPU:0"):
        x = tf.constant(np.ones((1024, 1024), np.float32))
    assert in_use() - before == 4 * MiB
    del x
    assert in_use() == before


def test_ones_of_4_mib_takes_exactly_4_mib():
    with tf.device("/NPU:0"):
        tf.ones([2, 2])  # warm-up: caches of small host constants are not what we measure
    before = in_use()
    with tf.device("/NPU:0"):
        x = tf.ones([1024, 1024])
    assert x.device.endswith("/device:NPU:0"), f"tf.ones ran on {x.device}"
    assert in_use() - before == 4 * MiB
    np.testing.assert_array_equal(x.numpy(), np.ones((1024, 1024), np.float32))
    del x
    assert in_use() == before


def test_repeated_copies_do_not_leak():
    array = np.arange(10_000, dtype=np.float32)
    before = _C.memory_stats(0)
    for _ in range(50):
        with tf.device("/NPU:0"):
            x = tf.constant(array)
        assert same_bits(x.numpy(), array)
        del x
    after = _C.memory_stats(0)
    assert after["in_use"] == before["in_use"]
    assert after["total_allocs"] - before["total_allocs"] == 50


def test_out_of_memory_raises_and_the_process_recovers():
    result = run_python("""
        import numpy as np, tensorflow as tf, npu_device
        from npu_device import _C
        shape = tf.constant([1024], tf.int32)
        array = np.arange(1536 * 1024, dtype=np.float32).reshape(1536, 1024)    # 6 MiB
        with tf.device("/NPU:0"):
            x = tf.constant(array)
            items = tf.raw_ops.TensorListFromTensor(tensor=x, element_shape=shape)  # +6 MiB
            print(_C.memory_stats(0)["in_use"])
            try:
                tf.raw_ops.TensorListStack(input_handle=items, element_dtype=tf.float32,
                                           element_shape=shape)                    # +6 > 16
            except tf.errors.ResourceExhaustedError as e:
                print("ResourceExhaustedError", "OOM when allocating tensor" in str(e))
            del x
            stacked = tf.raw_ops.TensorListStack(input_handle=items, element_dtype=tf.float32,
                                                 element_shape=shape)
            print(stacked.device, np.array_equal(stacked.numpy(), array))
            del items, stacked
        print(_C.memory_stats(0)["in_use"])
    """, env={"NPU_HBM_SIZE": "16M"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        str(12 * MiB),
        "ResourceExhaustedError True",
        "/job:localhost/replica:0/task:0/device:NPU:0 True",
        "0",
    ]
    assert ("npu_device: NPU:0 out of memory: requested 6291456 bytes, 4194304 free of 16777216"
            in result.stderr)


def test_two_devices_copy_between_each_other():
    result = run_python("""
        import numpy as np, tensorflow as tf, npu_device
        from npu_device import _C
        print([d.name for d in tf.config.list_logical_devices("NPU")])
        array = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
        with tf.device("/NPU:0"):
            x = tf.constant(array)
        with tf.device("/NPU:1"):
            y = tf.identity(x)            # NPU:0 -> NPU:1
        print(y.device, y.numpy().tobytes() == array.tobytes())
        print(_C.memory_stats(0)["in_use"], _C.memory_stats(1)["in_use"])
    """, env={"NPU_DEVICE_COUNT": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['/device:NPU:0', '/device:NPU:1']",
        "/job:localhost/replica:0/task:0/device:NPU:1 True",
        "262144 262144",
    ]


def test_runtime_starts_only_when_tensorflow_creates_devices():
    # Loading the plugin lists devices but must not size them: configuration after import works.
    result = run_python("""
        import tensorflow as tf, npu_device
        from npu_device import _C
        from tensorflow.python.eager import context
        print(_C.plugin_registered(), _C.is_initialized())
        _C.configure(3, 1 << 30)
        context.context().reinitialize_physical_devices()
        print(len(tf.config.list_physical_devices("NPU")), _C.is_initialized())
        print(len(tf.config.list_logical_devices("NPU")), _C.is_initialized())
        print(_C.memory_stats(2)["limit"])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["True False", "3 False", "3 True", str(1 << 30)]


def test_invalid_environment_is_reported_not_fatal():
    # The plugin alone (as TensorFlow auto-loads it): no NPU, a clear log line, no abort.
    plugin = next(p for p in _loader.plugin_candidates() if os.path.isfile(p))
    load = "" if _loader.installed_plugins() else f"""
        from tensorflow.python.framework import load_library
        load_library.load_pluggable_device_library({plugin!r})"""
    result = run_python(f"""
        import tensorflow as tf{load}
        print(tf.config.list_logical_devices("NPU"))
    """, env={"NPU_DEVICE_COUNT": "12"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert "NPU_DEVICE_COUNT='12' is invalid: expected an integer from 1 to 8" in result.stderr
