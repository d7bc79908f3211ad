"""Slice assignment, count_up_to and the gathers/scatters of every variable dtype on NPU variables
(tf_plugin_cc/resource_ops.cc).

ResourceStridedSliceAssign (v[1:3, ::2].assign(...), layer.kernel[0].assign(...)) and
ResourceCountUpTo (v.count_up_to(limit)) have NPU kernels, and ResourceGather/GatherNd/Scatter*
take every dtype NPU variables hold (bool, int8 ... uint64, complex) as TF's CPU kernels do: a
variable on the NPU needs an NPU kernel for every op that takes its handle, or TF cannot place the
op at all (there is no CPU fallback for it). Each case runs the same code with the variable on CPU
and on the NPU: results must be bit-identical (complex products and quotients within an ulp or
two) and invalid input must raise the same error class with the same message.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

from test_resource_ops import BF16, CPU, NPU, R, same_on_cpu_and_npu

pytestmark = pytest.mark.timeout(300)

# The dtypes variables have on the NPU (int32 variables live on the CPU).
VAR_DTYPES = [np.float32, np.float16, BF16, np.float64, np.int8, np.int16, np.int64, np.uint8,
              np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128]
NEW_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64,
              np.complex64, np.complex128]


@pytest.fixture(autouse=True)
def no_cpu_fallback(caplog):
    """No op of a test ran on CPU instead of the NPU (the plugin's eager-fallback warning)."""
    with caplog.at_level(logging.WARNING, logger="npu_device"):
        yield
    fallbacks = [r.getMessage() for r in caplog.records if "ran on CPU instead" in r.getMessage()
                 and "Resource" in r.getMessage()]
    assert not fallbacks, fallbacks


def values(dtype, shape, offset=0):
    n = int(np.prod(shape))
    v = (np.arange(n).reshape(shape) % 7 + 1 + offset)
    if dtype == np.bool_:
        return v % 2 == 0
    if np.issubdtype(dtype, np.complexfloating):
        return (v + 1j * (v % 3)).astype(dtype)
    return v.astype(dtype)


def kernel_devices(op, dtype):
    """The device types TF has a kernel of `op` for `dtype` on."""
    enum = tf.as_dtype(dtype).as_datatype_enum
    out = set()
    for k in kernels.get_registered_kernels_for_op(op).kernel:
        for c in k.constraint:
            if c.name in ("T", "dtype") and enum in c.allowed_values.list.type:
                out.add(k.device_type)
    return out


# --- slice assignment -----------------------------------------------------------------------
# (variable shape, the subscript, the value's shape or None for a scalar broadcast)
SLICES = [
    ((4, 5), (slice(1, 3), slice(None, None, 2)), (2, 3)),
    ((4, 5), (slice(None, None, -1), slice(3, 0, -2)), (4, 2)),
    ((4, 5), (slice(-2, None),), (2, 5)),
    ((4, 5), (-1,), (5,)),
    ((4, 5), (Ellipsis, 0), (4,)),
    ((4, 5), (None, 2), (1, 5)),
    ((4, 5), (1, 3), ()),
    ((2, 3, 4), (1, Ellipsis, None, slice(1, 3)), (3, 1, 2)),
    ((2, 3, 4), (slice(None), None, slice(None, None, -2), 1), (2, 1, 2)),
    ((4, 5), (slice(1, 3),), None),                 # a scalar broadcast into the slice
    ((4, 5), (slice(1, 3),), (1, 5)),               # a row broadcast
    ((2, 3, 4), (Ellipsis, slice(0, 2)), (3, 1)),   # broadcast over dims 0 and 2
    ((4, 5), (slice(2, 2),), (0, 5)),               # empty slices
    ((4, 5), (slice(3, 1), 0), (0,)),
    ((), (), ()),                                   # a scalar variable
    ((), (Ellipsis,), ()),
    ((), (None,), (1,)),
]


@pytest.mark.parametrize("dtype", VAR_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,key,value_shape", SLICES, ids=range(len(SLICES)))
def test_strided_slice_assign(dtype, shape, key, value_shape):
    def fn(device):
        with tf.device(device):
            v = tf.Variable(values(dtype, shape))
            assert v.handle.device.endswith(device[1:]), v.handle.device
            value = values(dtype, value_shape if value_shape is not None else (), offset=3)
            v[key].assign(value)
            return v.read_value()
    cpu, npu = fn(CPU).numpy(), fn(NPU)
    assert npu.device.endswith("device:NPU:0")
    npu = npu.numpy()
    assert cpu.dtype == npu.dtype and cpu.shape == npu.shape
    wide = np.float64 if cpu.dtype in (np.float16, BF16) else cpu.dtype
    np.testing.assert_array_equal(cpu.astype(wide), npu.astype(wide))
    if dtype != np.bool_ and value_shape not in ((0, 5), (0,)):
        assert not np.array_equal(values(dtype, shape), npu)   # the assignment wrote something


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.complex128, np.uint16, BF16],
                         ids=lambda d: np.dtype(d).name)
def test_strided_slice_assign_in_tf_function(dtype):
    def fn():
        v = tf.Variable(values(dtype, (3, 4, 5)))

        @tf.function
        def step(value, i):
            v[1:, ..., ::-2].assign(value)
            v[0, i].assign(value[0, 0, 0])     # a shrunk axis indexed by a tensor
            v[tf.newaxis, 2, :, 4].assign(value[:1, :, 0])
            return v.read_value()
        return [step(values(dtype, (2, 4, 3), offset=k), tf.constant(k)) for k in range(3)]
    same_on_cpu_and_npu(fn)


def test_strided_slice_assign_keras_kernel():
    def predict(device):
        with tf.device(device):
            keras.utils.set_random_seed(3)
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3),
                                      keras.layers.Dense(2)])
            kernel = model.layers[0].kernel
            assert kernel.value.handle.device.endswith(device[1:]), kernel.value.handle.device
            kernel[0].assign(tf.constant([1.0, -2.0, 0.5]))
            kernel[1:3, ::2].assign(tf.fill([2, 2], 0.25))
            model.layers[1].bias[-1].assign(3.0)
            x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
            return model.predict(x, verbose=0), kernel.numpy()
    cpu_y, cpu_k = predict(CPU)
    npu_y, npu_k = predict(NPU)
    np.testing.assert_array_equal(cpu_k, npu_k)
    np.testing.assert_allclose(cpu_y, npu_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(npu_k[0], [1.0, -2.0, 0.5])


@pytest.mark.parametrize("name,kwargs", [
    ("broadcast", dict(begin=[1], end=[3], strides=[1], value=np.ones([3, 5], np.float32))),
    ("out of bounds", dict(begin=[7], end=[8], strides=[1], value=np.ones([5], np.float32),
                           shrink_axis_mask=1)),
    ("zero stride", dict(begin=[1], end=[3], strides=[0], value=np.ones([2, 5], np.float32))),
    ("dtype", dict(begin=[1], end=[3], strides=[1], value=np.ones([2, 5], np.float64))),
    ("two ellipses", dict(begin=[0, 0], end=[0, 0], strides=[1, 1], ellipsis_mask=3,
                          value=np.ones([4, 5], np.float32))),
    ("begin length", dict(begin=[0, 0], end=[1], strides=[1], value=np.ones([1, 5], np.float32))),
], ids=lambda x: x if isinstance(x, str) else "")
def test_strided_slice_assign_errors(name, kwargs):
    def fn():
        v = tf.Variable(values(np.float32, (4, 5)))
        # A first slice assignment: TF's CPU kernel, on a variable's first one, copies a buffer a
        # reader still shares as its T, and aborts when T is not the variable's dtype.
        v[0].assign(tf.zeros([5]))
        R.ResourceStridedSliceAssign(ref=v.handle, **kwargs)
        return v.read_value()
    err, msg = same_on_cpu_and_npu(fn)
    assert err is tf.errors.InvalidArgumentError, (err, msg)
    if name == "broadcast":
        assert msg == "Cannot broadcast input shape [3,5] into final shape [2,5]"
    if name == "dtype":
        assert msg == "l-value dtype float does not match r-value dtype double"


def test_strided_slice_assign_in_tf_function_error():
    def fn():
        v = tf.Variable(values(np.float32, (4, 5)))
        @tf.function
        def f(b):
            R.ResourceStridedSliceAssign(ref=v.handle, begin=b, end=b + 1, strides=[1],
                                         value=tf.ones([5]), shrink_axis_mask=1)
        f(tf.constant([2]))
        f(tf.constant([9]))
    for device in (CPU, NPU):
        with tf.device(device), pytest.raises(tf.errors.InvalidArgumentError,
                                              match="slice index 9 of dimension 0 out of bounds"):
            fn()


def test_strided_slice_assign_copies_a_shared_buffer():
    def fn():
        v = tf.Variable(values(np.float32, (4, 5)))
        before = v.value()             # shares the variable's buffer
        v[1:3].assign(tf.zeros([2, 5]))
        middle = v.read_value()
        v[::2, 1].assign(tf.ones([2]))
        return before, middle, v.read_value()
    _, (before, middle, after) = same_on_cpu_and_npu(fn)
    np.testing.assert_array_equal(before, values(np.float32, (4, 5)))
    assert middle[1:3].sum() == 0 and after[0, 1] == 1


def test_strided_slice_assign_large():
    def fn():
        v = tf.Variable(tf.reshape(tf.range(64 * 128 * 9, dtype=tf.float32), [64, 128, 9]))
        v[3:60:3, ::-5, 2:].assign(tf.ones([19, 26, 7]) * 2)
        v[:, 7].assign(tf.fill([64, 9], -1.0))
        return v.read_value()
    same_on_cpu_and_npu(fn)


# --- gathers and scatters of every dtype ----------------------------------------------------
SPARSE_OPS = ["ResourceGather", "ResourceGatherNd", "ResourceScatterAdd", "ResourceScatterSub",
              "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMin",
              "ResourceScatterMax", "ResourceScatterUpdate", "ResourceScatterNdAdd",
              "ResourceScatterNdSub", "ResourceScatterNdUpdate", "ResourceScatterNdMin",
              "ResourceScatterNdMax", "ResourceStridedSliceAssign"]


@pytest.mark.parametrize("op", SPARSE_OPS + ["ResourceCountUpTo"])
def test_npu_dtypes_are_tfs_cpu_dtypes(op):
    """An NPU kernel for every dtype of an NPU variable that TF's CPU kernel takes, none other."""
    dtypes = VAR_DTYPES if op != "ResourceCountUpTo" else [np.int64]
    for dtype in dtypes:
        devices = kernel_devices(op, dtype)
        assert ("NPU" in devices) == ("CPU" in devices), (op, np.dtype(dtype).name, devices)


def sparse_ops(dtype):
    """Every op of the dtype (as TF's CPU registers them), eager: (name, fn(v) -> tensor)."""
    u = values(dtype, (2, 3), offset=2)
    out = [("sparse_read", lambda v: v.sparse_read([3, 0, 3])),
           ("batch gather", lambda v: R.ResourceGather(
               resource=v.handle, indices=[[1], [0], [2], [1], [0]], dtype=v.dtype, batch_dims=1)),
           ("gather_nd", lambda v: tf.gather_nd(v, [[4, 1], [0, 2]])),
           ("scatter_update", lambda v: v.scatter_update(tf.IndexedSlices(u, [3, 1]))),
           ("scatter_nd_update", lambda v: v.scatter_nd_update([[4, 1], [0, 0]], u[0, :2])),
           ("scalar scatter", lambda v: R.ResourceScatterUpdate(resource=v.handle, indices=[2, 0],
                                                                updates=u[0, 0]))]
    if "CPU" in kernel_devices("ResourceScatterNdAdd", dtype):
        out += [("scatter_nd_add", lambda v: v.scatter_nd_add([[4, 1], [4, 1]], u[0, :2])),
                ("scatter_nd_sub", lambda v: v.scatter_nd_sub([[1, 1]], u[0, :1]))]
    if "CPU" in kernel_devices("ResourceScatterAdd", dtype):
        out += [(name, lambda v, f=f: getattr(v, f)(tf.IndexedSlices(u, [3, 3])))
                for name, f in (("add", "scatter_add"), ("sub", "scatter_sub"),
                                ("mul", "scatter_mul"), ("div", "scatter_div"))]
    if "CPU" in kernel_devices("ResourceScatterMin", dtype):
        out += [(name, lambda v, f=f: getattr(v, f)(tf.IndexedSlices(u, [3, 0])))
                for name, f in (("min", "scatter_min"), ("max", "scatter_max"))]
        out += [("scatter_nd_max", lambda v: R.ResourceScatterNdMax(
            ref=v.handle, indices=[[2, 2]], updates=u[0, :1]))]
    return out


# complex products and quotients: within an ulp or two of TF's (see below); the rest bit-exact
COMPLEX_RTOL = {"mul": 1e-6, "div": 1e-6}


@pytest.mark.parametrize("dtype", NEW_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_and_scatter_of_every_dtype(dtype):
    for name, op in sparse_ops(dtype):
        def fn():
            v = tf.Variable(values(dtype, (5, 3)))
            out = op(v)
            out = out.read_value() if isinstance(out, tf.Variable) else out
            return [v.read_value()] + ([out] if isinstance(out, tf.Tensor) else [])
        same_on_cpu_and_npu(fn, rtol=COMPLEX_RTOL.get(name if np.dtype(dtype).kind == "c" else ""))


@pytest.mark.parametrize("dtype", NEW_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_and_scatter_in_tf_function(dtype):
    def fn():
        v = tf.Variable(values(dtype, (5, 3)))
        u = values(dtype, (2, 3), offset=4)

        @tf.function
        def step(i):
            v.scatter_update(tf.IndexedSlices(u, tf.stack([i, 4 - i])))
            v.scatter_nd_update(tf.reshape(i, [1, 1]), u[:1])
            return v.sparse_read([i, 2]), tf.gather_nd(v, [[i, 1]]), v.read_value()
        return [t for i in range(3) for t in step(tf.constant(i))]
    same_on_cpu_and_npu(fn)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["scatter_mul", "scatter_div"])
def test_complex_scatter_arithmetic_matches_tf(dtype, op):
    """Complex products and quotients: this build's Eigen rounds them differently from the TF
    wheel's (FMA), within an ulp or two."""
    rng = np.random.default_rng(5)
    cplx = lambda *shape: (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    table, rows, row = cplx(4, 11), cplx(3, 11), cplx(1)[0]

    def fn():
        v = tf.Variable(table)
        getattr(v, op)(tf.IndexedSlices(rows, [2, 0, 2]))
        R.ResourceScatterDiv(resource=v.handle, indices=[1], updates=row) if op == "scatter_div" \
            else R.ResourceScatterMul(resource=v.handle, indices=[3], updates=row)
        return v.read_value()
    same_on_cpu_and_npu(fn, rtol=1e-6 if dtype == np.complex64 else 1e-14)


def test_gather_and_scatter_errors_of_new_dtypes():
    for dtype in (np.bool_, np.uint8, np.complex64):
        def fn():
            v = tf.Variable(values(dtype, (5, 3)))
            return v.sparse_read([1, 5])
        err, msg = same_on_cpu_and_npu(fn)
        assert err is tf.errors.InvalidArgumentError and "is not in [0, 5)" in msg, msg

        def fn2():
            v = tf.Variable(values(dtype, (5, 3)))
            return v.scatter_nd_update([[9, 0]], values(dtype, (1,)))
        err, msg = same_on_cpu_and_npu(fn2)
        assert err is tf.errors.InvalidArgumentError, msg


# --- count_up_to ----------------------------------------------------------------------------
def test_count_up_to():
    def fn():
        v = tf.Variable(np.int64(3))
        outs = [v.count_up_to(6) for _ in range(3)]
        return outs + [v.read_value()]
    _, out = same_on_cpu_and_npu(fn)
    assert [int(o) for o in out] == [3, 4, 5, 6]

    def limit():
        v = tf.Variable(np.int64(3))
        for _ in range(4):
            tf.compat.v1.count_up_to(v, 6)
        return v.read_value()
    err, msg = same_on_cpu_and_npu(limit)
    assert err is tf.errors.OutOfRangeError and msg.startswith("Reached limit of 6"), msg


def test_count_up_to_in_tf_function():
    def fn():
        v = tf.Variable(np.int64(-2))
        before = v.value()           # a reader sharing the buffer keeps its value
        step = tf.function(lambda: v.count_up_to(2))
        return [step() for _ in range(4)] + [v.read_value(), before]
    _, out = same_on_cpu_and_npu(fn)
    assert [int(o) for o in out] == [-2, -1, 0, 1, 2, -2]

    def past_limit():
        v = tf.Variable(np.int64(0))
        step = tf.function(lambda: v.count_up_to(1))
        return [step(), step()]
    err, msg = same_on_cpu_and_npu(past_limit)
    assert err is tf.errors.OutOfRangeError and msg.startswith("Reached limit of 1"), msg


def test_count_up_to_not_a_scalar():
    def fn():
        v = tf.Variable(np.zeros(2, np.int64))
        return R.ResourceCountUpTo(resource=v.handle, limit=5, T=tf.int64)
    err, msg = same_on_cpu_and_npu(fn)
    assert err is tf.errors.InvalidArgumentError and msg == "input is not a scalar: [2]", msg
