"""Elementwise kernels (arithmetic, comparisons, activations and their gradients, Cast,
Select, AddN, BiasAdd) against TensorFlow on the CPU."""
import ml_dtypes
import numpy as np
import pytest

from test_kernels_harness import (FLOAT_TYPES, assert_float_close, random, run1, tf_cpu,
                                  to_f32)

BF16 = ml_dtypes.bfloat16

# op -> (input range, or None for the default [-2, 2]); divisors stay away from zero.
BINARY_FLOAT = {
    "Add": None, "AddV2": None, "Sub": None, "Mul": None, "Maximum": None, "Minimum": None,
    "SquaredDifference": None, "RealDiv": (0.5, 3), "Div": (0.5, 3), "DivNoNan": (0.5, 3),
    "FloorDiv": (0.5, 3), "Pow": (0.5, 2),
}
COMPARISONS = ["Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual"]
UNARY_FLOAT = {
    "Neg": None, "Abs": None, "Square": None, "Sign": None, "Floor": None, "Ceil": None,
    "Round": None, "Exp": None, "Log": (0.1, 4), "Log1p": (-0.5, 4), "Sqrt": (0.1, 4),
    "Rsqrt": (0.1, 4), "Reciprocal": (0.5, 3), "Inv": (0.5, 3), "Relu": None, "Relu6": (-3, 9),
    "Sigmoid": (-8, 8), "Tanh": None, "Elu": None, "Selu": None, "Softplus": (-30, 30),
    "Softsign": None, "Cos": (-6, 6), "Sin": (-6, 6),
}
FEATURES_ARG = ("Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign")   # TF names the input so
# gradient op -> (TF argument names, the forward op that produces the second argument or None)
GRADS = {
    "ReluGrad": ("gradients", "features"), "Relu6Grad": ("gradients", "features"),
    "SigmoidGrad": ("y", "dy"), "TanhGrad": ("y", "dy"), "EluGrad": ("gradients", "outputs"),
    "SeluGrad": ("gradients", "outputs"), "SoftplusGrad": ("gradients", "features"),
    "ReciprocalGrad": ("y", "dy"), "RsqrtGrad": ("y", "dy"), "SqrtGrad": ("y", "dy"),
}
SHAPES = [((4, 1, 5), (3, 1), (4, 3, 5)), ((300, 701), (300, 701), (300, 701)),
          ((), (6, 2), (6, 2))]


def operands(op, shape_a, shape_b, dtype, ranges):
    low, high = ranges.get(op) or (-2, 2)
    a = random(shape_a, dtype, low, high, seed=1)
    b = random(shape_b, dtype, low, high, seed=2)
    if op in ("FloorDiv",):   # mixed signs exercise flooring
        a = random(shape_a, dtype, -6, 6, seed=1)
    return a, b


@pytest.mark.parametrize("shapes", SHAPES, ids=["broadcast", "large", "scalar"])
@pytest.mark.parametrize("op", sorted(BINARY_FLOAT))
def test_binary_float32(op, shapes):
    a, b = operands(op, shapes[0], shapes[1], np.float32, BINARY_FLOAT)
    got = run1(op, [a, b], np.float32, shapes[2])
    assert_float_close(got, tf_cpu(op, x=a, y=b), np.float32)


def test_floor_mod_float32_signs():
    a = random((64,), np.float32, -7, 7, seed=3)
    b = np.where(random((64,), np.bool_, seed=4), 1.5, -2.25).astype(np.float32)
    assert_float_close(run1("FloorMod", [a, b], np.float32, (64,)), tf_cpu("FloorMod", x=a, y=b), np.float32)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["AddV2", "Sub", "Mul", "RealDiv", "Maximum", "SquaredDifference", "Pow"])
def test_binary_half_storage(op, dtype):
    a, b = operands(op, (4, 1, 33), (7, 1), dtype, BINARY_FLOAT)
    got = run1(op, [a, b], dtype, (4, 7, 33))
    assert got.dtype == np.dtype(dtype)
    assert_float_close(got, tf_cpu(op, x=to_f32(a), y=to_f32(b)), dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("op", ["Add", "AddV2", "Sub", "Mul", "Maximum", "Minimum", "FloorDiv",
                                "FloorMod", "Div", "SquaredDifference", "Pow"])
def test_binary_integer(op, dtype):
    if (dtype in (np.uint8, np.int8) and op == "SquaredDifference") or (dtype == np.uint8 and op == "Pow"):
        pytest.skip("TF has no CPU kernel for this op and dtype")
    low = 0 if dtype == np.uint8 else -20
    a = random((5, 8), dtype, low, 20, seed=5)
    b = random((8,), dtype, 1 if op != "Pow" else 0, 7, seed=6)
    if op not in ("Pow",) and dtype != np.uint8:
        b = b * np.where(np.arange(8) % 2, 1, -1).astype(dtype)   # negative divisors too
    got = run1(op, [a, b], dtype, (5, 8))
    np.testing.assert_array_equal(got, tf_cpu(op, x=a, y=b))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons(op, dtype):
    if dtype == np.bool_ and op not in ("Equal", "NotEqual"):
        pytest.skip("ordering comparisons are not defined on bool")
    a = random((6, 1, 4), dtype, -3, 3, seed=7)
    b = random((5, 4), dtype, -3, 3, seed=8)
    got = run1(op, [a, b], np.bool_, (6, 5, 4))
    np.testing.assert_array_equal(got, tf_cpu(op, x=a, y=b))


@pytest.mark.parametrize("op", ["LogicalAnd", "LogicalOr"])
def test_logical_binary(op):
    a, b = random((7, 3), np.bool_, seed=9), random((3,), np.bool_, seed=10)
    np.testing.assert_array_equal(run1(op, [a, b], np.bool_, (7, 3)), tf_cpu(op, x=a, y=b))


def test_logical_not():
    a = random((9,), np.bool_, seed=11)
    np.testing.assert_array_equal(run1("LogicalNot", [a], np.bool_, (9,)), ~a)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", sorted(UNARY_FLOAT))
def test_unary_float(op, dtype):
    low, high = UNARY_FLOAT[op] or (-2, 2)
    x = random((3, 257), dtype, low, high, seed=12)
    if op == "Round":   # halves round to even
        x = (np.arange(3 * 257).reshape(3, 257) / 2 - 150).astype(dtype)
    got = run1(op, [x], dtype, x.shape)
    ref = tf_cpu(op, **{"features" if op in FEATURES_ARG else "x": to_f32(x)})
    assert_float_close(got, ref, dtype)


def test_unary_large_float32_uses_every_thread_consistently():
    x = random((1000, 1013), np.float32, -4, 4, seed=13)
    assert_float_close(run1("Tanh", [x], np.float32, x.shape), tf_cpu("Tanh", x=x), np.float32)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["Neg", "Abs", "Square", "Sign", "Relu"])
def test_unary_integer(op, dtype):
    x = random((40,), dtype, -50, 50, seed=14)
    ref = tf_cpu(op, features=x) if op == "Relu" else tf_cpu(op, x=x)
    np.testing.assert_array_equal(run1(op, [x], dtype, x.shape), ref)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", sorted(GRADS))
def test_activation_gradients(op, dtype):
    first, second = GRADS[op]
    g = random((5, 67), dtype, -2, 2, seed=15)
    v = random((5, 67), dtype, -3, 7, seed=16)
    if op in ("SigmoidGrad",):
        v = random((5, 67), dtype, 0, 1, seed=16)   # y = sigmoid(x)
    if op in ("TanhGrad",):
        v = random((5, 67), dtype, -1, 1, seed=16)  # y = tanh(x)
    if op in ("EluGrad",):
        v = np.maximum(v, -1).astype(dtype)         # elu(x) > -1
    if op in ("RsqrtGrad", "SqrtGrad", "ReciprocalGrad"):
        v = random((5, 67), dtype, 0.5, 3, seed=16)  # outputs of sqrt/rsqrt/reciprocal
    # SigmoidGrad/TanhGrad take (y, dy); the others (gradients, forward value).
    args = (v, g) if first == "y" else (g, v)
    got = run1(op, list(args), dtype, g.shape)
    ref = tf_cpu(op, **{first: to_f32(args[0]), second: to_f32(args[1])})
    assert_float_close(got, ref, dtype, grad=True)


CAST_TYPES = [np.float32, np.float16, BF16, np.float64, np.int32, np.int64, np.int8, np.uint8,
              np.int16, np.bool_]


@pytest.mark.parametrize("dst", CAST_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("src", CAST_TYPES, ids=lambda t: np.dtype(t).name)
def test_cast(src, dst):
    from graph_engine.ops.dtypes import from_numpy
    import tensorflow as tf
    # Values the destination can hold: TF's float->integer conversion is undefined beyond it.
    low = 0 if np.dtype(dst) == np.uint8 or np.dtype(src) == np.uint8 else -100
    x = random((4, 33), src, low, 100 if np.dtype(src) != np.uint8 else 255, seed=17)
    if np.dtype(src).kind == "f" or np.dtype(src) == BF16:
        x[0, :4] = [0.0, -0.0, 0.5, 0.75 if low == 0 else -0.75]   # fractions truncate toward zero
    got = run1("Cast", [x], dst, x.shape, SrcT=from_numpy(src), DstT=from_numpy(dst))
    with tf.device("/CPU:0"):
        ref = tf.cast(tf.constant(x), tf.as_dtype(np.dtype(dst))).numpy()
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("op", ["Select", "SelectV2"])
def test_select(op):
    t, e = random((6, 5), np.float32, seed=18), random((6, 5), np.float32, seed=19)
    cond = random((6,), np.bool_, seed=20) if op == "Select" else random((6, 1), np.bool_, seed=20)
    got = run1(op, [cond, t, e], np.float32, (6, 5))
    names = ("x", "y") if op == "Select" else ("t", "e")
    np.testing.assert_array_equal(got, tf_cpu(op, condition=cond, **dict(zip(names, (t, e)))))


def test_select_v2_broadcasts_every_operand():
    cond = random((3, 1, 4), np.bool_, seed=21)
    t = random((2, 1), np.int64, -9, 9, seed=22)
    e = np.array(-1, dtype=np.int64)
    np.testing.assert_array_equal(run1("SelectV2", [cond, t, e], np.int64, (3, 2, 4)),
                                  tf_cpu("SelectV2", condition=cond, t=t, e=e))


@pytest.mark.parametrize("dtype", FLOAT_TYPES + [np.int32], ids=["float32", "float16", "bfloat16", "int32"])
def test_add_n(dtype):
    xs = [random((70, 31), dtype, -5, 5, seed=s) for s in range(4)]
    got = run1("AddN", xs, dtype, xs[0].shape, N=4)
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(got, sum(xs))
    else:
        assert_float_close(got, tf_cpu("AddN", inputs=[to_f32(x) for x in xs]), dtype)


@pytest.mark.parametrize("data_format,shape", [("NHWC", (2, 3, 4, 5)), ("NCHW", (2, 5, 3, 4)),
                                               ("NHWC", (7, 5))])
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
def test_bias_add(data_format, shape, dtype):
    x = random(shape, dtype, seed=23)
    bias = random((5,), dtype, seed=24)
    got = run1("BiasAdd", [x, bias], dtype, shape, data_format=data_format)
    assert_float_close(got, tf_cpu("BiasAdd", value=to_f32(x), bias=to_f32(bias), data_format=data_format), dtype)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("alpha", [0.2, 0.01])
def test_leaky_relu_and_gradient(alpha, dtype):
    x = random((4, 50), dtype, seed=25)
    g = random((4, 50), dtype, seed=26)
    assert_float_close(run1("LeakyRelu", [x], dtype, x.shape, alpha=alpha),
                       tf_cpu("LeakyRelu", features=to_f32(x), alpha=alpha), dtype)
    assert_float_close(run1("LeakyReluGrad", [g, x], dtype, x.shape, alpha=alpha),
                       tf_cpu("LeakyReluGrad", gradients=to_f32(g), features=to_f32(x), alpha=alpha),
                       dtype, grad=True)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["IsFinite", "IsInf", "IsNan"])
def test_float_classification(op, dtype):
    x = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 3e4], np.float32).astype(dtype)
    np.testing.assert_array_equal(run1(op, [x], np.bool_, x.shape), tf_cpu(op, x=to_f32(x)))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op, dtype):
    a = random((6, 5), dtype, -1000, 1000, seed=27)
    b = random((5,), dtype, -1000, 1000, seed=28)
    np.testing.assert_array_equal(run1(op, [a, b], dtype, a.shape), tf_cpu(op, x=a, y=b))
