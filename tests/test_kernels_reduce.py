"""Reductions, ArgMax/ArgMin and BiasAddGrad against TensorFlow on the CPU."""
import numpy as np
import pytest

from test_kernels_harness import FLOAT_TYPES, assert_float_close, random, run1, tf_cpu, to_f32

AXES = [  # shape, reduction_indices: contiguous blocks, scattered axes, negative, all, none
    ((4, 5, 6), [1]), ((4, 5, 6), [0]), ((4, 5, 6), [2]), ((4, 5, 6), [0, 2]),
    ((4, 5, 6), [-1, -2]), ((3, 4, 5, 6), [0, 2]), ((4, 5, 6), [0, 1, 2]), ((4, 5, 6), []),
    ((1000, 300), [0]), ((300, 1000), [1]), ((200001,), [0]), ((2, 1, 3), [1]),
]
AXES_IDS = ["middle", "first", "last", "outer-pair", "negative", "scattered", "all", "none",
            "long-columns", "long-rows", "one-long-row", "size-one"]


def out_shape(shape, axes, keep_dims):
    axes = {a % len(shape) for a in axes}
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dims or i not in axes)


@pytest.mark.parametrize("keep_dims", [False, True])
@pytest.mark.parametrize("case", AXES, ids=AXES_IDS)
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min", "Prod"])
def test_reduce_float32(op, case, keep_dims):
    shape, axes = case
    x = random(shape, np.float32, 0.5, 1.5 if op == "Prod" else 2.0, seed=1)
    if op == "Prod" and int(np.prod([shape[a] for a in axes])) > 50:
        x = random(shape, np.float32, 0.99, 1.01, seed=1)   # keep products finite
    got = run1(op, [x], np.float32, out_shape(shape, axes, keep_dims),
               reduction_indices=axes, keep_dims=keep_dims)
    ref = tf_cpu(op, input=x, axis=np.array(axes, np.int32), keep_dims=keep_dims)
    assert_float_close(got, ref, np.float32)


@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max"])
def test_reduce_half_storage_accumulates_in_float(op, dtype):
    x = random((64, 513), dtype, -1, 1, seed=2)
    got = run1(op, [x], dtype, (64,), reduction_indices=[1], keep_dims=False)
    assert_float_close(got, tf_cpu(op, input=to_f32(x), axis=[1]), dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min", "Prod"])
def test_reduce_other_types(op, dtype):
    x = random((6, 7, 5), dtype, -4, 4, seed=3)
    got = run1(op, [x], dtype, (6, 5), reduction_indices=[1], keep_dims=False)
    ref = tf_cpu(op, input=x, axis=[1])
    if dtype == np.float64:
        np.testing.assert_allclose(got, ref, rtol=1e-12)
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", ["All", "Any"])
@pytest.mark.parametrize("case", [((5, 6, 7), [0, 2]), ((5, 6), [1]), ((40000,), [0])])
def test_logical_reductions(op, case):
    shape, axes = case
    x = random(shape, np.float32, seed=4) > (-1.9 if op == "All" else 1.9)   # mostly true / false
    got = run1(op, [x], np.bool_, out_shape(shape, axes, False), reduction_indices=axes)
    np.testing.assert_array_equal(got, tf_cpu(op, input=x, axis=axes))


@pytest.mark.parametrize("output_type", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape,axis", [((4, 7, 5), 1), ((4, 7, 5), -1), ((1000, 3), 0)])
def test_arg_reductions(op, dtype, output_type, shape, axis):
    from graph_engine.ops.dtypes import from_numpy
    x = random(shape, dtype, -3, 3, seed=5)   # few distinct values: ties resolve to the first
    if np.dtype(dtype).kind == "f":
        x = x.round().astype(dtype)
    got = run1(op, [x], output_type, out_shape(shape, [axis], False), dimension=[axis],
               output_type=from_numpy(output_type))
    ref = tf_cpu(op, input=x, dimension=axis, output_type=np.dtype(output_type))
    assert got.dtype == np.dtype(output_type)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("data_format,shape", [("NHWC", (2, 3, 4, 5)), ("NCHW", (2, 5, 3, 4)),
                                               ("NHWC", (3000, 5))])
def test_bias_add_grad(data_format, shape, dtype):
    dy = random(shape, dtype, seed=6)
    got = run1("BiasAddGrad", [dy], dtype, (5,), data_format=data_format)
    ref = tf_cpu("BiasAddGrad", out_backprop=to_f32(dy), data_format=data_format)
    assert_float_close(got, ref, dtype, grad=True)
