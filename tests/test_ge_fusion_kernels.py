"""The fused kernels (graph_engine/ops/fused.py, runtime kernels conv.cc, depthwise.cc,
matmul.cc, fused_norm.cc, gelu.cc, fused_grad.cc) against their numpy references and TensorFlow on CPU,
in float32, float16 and bfloat16."""
import ml_dtypes
import numpy as np
import pytest

from graph_engine import ops
from test_kernels_harness import FLOAT_TYPES, assert_float_close, random, run1, run_kernel, tf_cpu, to_f32

ACTS = ["", "Relu", "Relu6", "Elu", "LeakyRelu", "Sigmoid", "Tanh", "GeluExact", "GeluTanh", "Swish"]


def tf_activation(y, act):
    import tensorflow as tf
    with tf.device("/CPU:0"):
        fn = {"": lambda v: v, "Relu": tf.nn.relu, "Relu6": tf.nn.relu6, "Elu": tf.nn.elu,
              "LeakyRelu": lambda v: tf.nn.leaky_relu(v, 0.3), "Sigmoid": tf.sigmoid,
              "Tanh": tf.tanh, "GeluExact": lambda v: tf.nn.gelu(v, approximate=False),
              "GeluTanh": lambda v: tf.nn.gelu(v, approximate=True), "Swish": tf.nn.silu}[act]
        return np.asarray(fn(tf.constant(y)))


def epilogue_attrs(act, bias=True, residual=False):
    return {"has_bias": bias, "has_residual": residual, "activation": act, "alpha": 0.3}


CASES = {   # fused op -> (TF op, input shapes as (arg name, shape), TF attrs)
    # 16 output channels, 144 output pixels: the direct convolution (kernels/conv.cc); the GEMM
    # path's epilogue is below (test_fused_conv_nchw_and_no_bias, test_pointwise_conv_epilogue_...)
    "NpuFusedConv2D": ("Conv2D", [("input", (2, 15, 9, 3)), ("filter", (3, 3, 3, 16))],
                       {"strides": [1, 2, 1, 1], "padding": "SAME", "data_format": "NHWC",
                        "dilations": [1, 1, 1, 1], "explicit_paddings": []}),
    "NpuFusedDepthwiseConv2D": ("DepthwiseConv2dNative", [("input", (2, 6, 6, 3)), ("filter", (3, 3, 3, 2))],
                                {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
                                 "dilations": [1, 1, 1, 1], "explicit_paddings": []}),
    "NpuFusedMatMul": ("MatMul", [("a", (9, 6)), ("b", (5, 6))], {"transpose_a": False, "transpose_b": True}),
    "NpuFusedBatchMatMul": ("BatchMatMulV2", [("x", (3, 4, 6)), ("y", (6, 5))],
                            {"adj_x": False, "adj_y": False}),
}


def _inputs(op, dtype, bias, residual, seed=0):
    tf_op, shapes, attrs = CASES[op]
    xs = [random(s, dtype, seed=seed + i) for i, (_, s) in enumerate(shapes)]
    y = tf_cpu(tf_op, **{name: to_f32(x) for (name, _), x in zip(shapes, xs)}, **attrs)
    if bias:
        xs.append(random((y.shape[-1],), dtype, seed=seed + 7))
    if residual:
        xs.append(random(y.shape, dtype, seed=seed + 8))
    return xs, y, attrs


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("act", ACTS)
def test_fused_contraction_float32_matches_tf_and_reference(op, act):
    residual = act in ("Relu", "Swish", "")
    xs, y, attrs = _inputs(op, np.float32, True, residual)
    want = y + xs[2] + (xs[3] if residual else 0)
    want = tf_activation(want, act)
    attrs = dict(attrs, **epilogue_attrs(act, True, residual))
    got = run1(op, xs, np.float32, y.shape, **attrs)
    assert_float_close(got, want, np.float32)
    ref = ops.evaluate(ops.get(op), xs, attrs, [1])[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("act", ["Relu", "GeluTanh", "Swish"])
def test_fused_contraction_narrow_types_round_once(op, dtype, act):
    """Computed in float32 from the stored inputs and rounded once: one storage ULP from the
    float32 result of the same inputs."""
    xs, y, attrs = _inputs(op, dtype, True, True, seed=3)
    want = tf_activation(y + to_f32(xs[2]) + to_f32(xs[3]), act)
    attrs = dict(attrs, **epilogue_attrs(act, True, True))
    got = run1(op, xs, dtype, y.shape, **attrs)
    assert got.dtype == np.dtype(dtype)
    assert_float_close(got, want, dtype)
    ref = ops.evaluate(ops.get(op), xs, attrs, [{np.float16: 19}.get(dtype, 14)])[0]
    assert_float_close(got, ref, dtype)


def test_fused_conv_nchw_and_no_bias():
    x, f, r = random((1, 3, 5, 5)), random((3, 3, 3, 4), seed=1), random((1, 4, 5, 5), seed=2)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW",
             "dilations": [1, 1, 1, 1], "explicit_paddings": []}
    import tensorflow as tf
    with tf.device("/CPU:0"):   # TF's CPU Conv2D has no NCHW kernel: transpose around it
        y = tf.transpose(tf.nn.conv2d(tf.transpose(x, [0, 2, 3, 1]), f, 1, "SAME"), [0, 3, 1, 2])
    want = np.maximum(np.asarray(y) + r, 0)
    got = run1("NpuFusedConv2D", [x, f, r], np.float32, y.shape,
               **attrs, **epilogue_attrs("Relu", bias=False, residual=True))
    assert_float_close(got, want, np.float32)


def test_pointwise_conv_epilogue_over_many_blocks():
    """A 1x1 convolution large enough to be split into blocks, each finished in cache."""
    x, f, b = random((4, 40, 40, 8)), random((1, 1, 8, 6), seed=1), random((6,), seed=2)
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
             "dilations": [1, 1, 1, 1], "explicit_paddings": []}
    y = tf_cpu("Conv2D", input=x, filter=f, **attrs)
    got = run1("NpuFusedConv2D", [x, f, b], np.float32, y.shape, **attrs, **epilogue_attrs("Relu6"))
    assert_float_close(got, np.clip(y + b, 0, 6), np.float32)


def test_bad_epilogue_attrs_are_clear_errors():
    xs, y, attrs = _inputs("NpuFusedMatMul", np.float32, True, False)
    with pytest.raises(Exception, match="unknown activation \"Mish\"; allowed: .*\"Relu\""):
        run1("NpuFusedMatMul", xs, np.float32, y.shape, **attrs, **epilogue_attrs("Mish"))
    with pytest.raises(Exception, match="expects 4 inputs"):
        run1("NpuFusedMatMul", xs, np.float32, y.shape, **attrs,
             **epilogue_attrs("Relu", residual=True))
    bad = xs[:2] + [random((y.shape[-1] + 1,))]
    with pytest.raises(Exception, match="bias must have shape"):
        run1("NpuFusedMatMul", bad, np.float32, y.shape, **attrs, **epilogue_attrs("Relu"))


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_kernel(dtype, approximate):
    x = random((5, 1000), dtype, low=-5, high=5)
    import tensorflow as tf
    with tf.device("/CPU:0"):
        want = np.asarray(tf.nn.gelu(to_f32(x), approximate=approximate))
    got = run1("NpuGelu", [x], dtype, x.shape, approximate=approximate)
    assert_float_close(got, want, dtype)
    ref = ops.evaluate(ops.get("NpuGelu"), [to_f32(x)], {"approximate": approximate}, [1])[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=["float32", "float16", "bfloat16"])
def test_layer_norm_kernel(dtype):
    import keras
    x = random((3, 4, 16), dtype, seed=1)
    gamma, beta = random((16,), dtype, seed=2), random((16,), dtype, seed=3)
    layer = keras.layers.LayerNormalization(epsilon=1e-3)
    layer.build((3, 4, 16))
    layer.gamma.assign(to_f32(gamma))
    layer.beta.assign(to_f32(beta))
    want = np.asarray(layer(to_f32(x)))
    got = run1("NpuLayerNorm", [x, gamma, beta], dtype, x.shape, axis=-1, epsilon=1e-3)
    tol = 1e-5 if dtype == np.float32 else 2 * float(ml_dtypes.finfo(dtype).eps)
    np.testing.assert_allclose(to_f32(got), want, rtol=tol, atol=tol * 4)
    ref = ops.evaluate(ops.get("NpuLayerNorm"), [to_f32(v) for v in (x, gamma, beta)],
                       {"axis": -1, "epsilon": 1e-3}, [1])[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    y, mean, inv = run_kernel("NpuLayerNorm", [x, gamma, beta],
                              [(dtype, x.shape), (dtype, (3, 4, 1)), (dtype, (3, 4, 1))],
                              {"axis": -1, "epsilon": 1e-3, "with_stats": True})
    np.testing.assert_array_equal(to_f32(y), to_f32(got))
    xf = to_f32(x)
    m = xf.mean(-1, keepdims=True)
    np.testing.assert_allclose(to_f32(mean), m, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_f32(inv), 1 / np.sqrt(((xf - m) ** 2).mean(-1, keepdims=True) + 1e-3),
                               rtol=tol * 4)
    with pytest.raises(Exception, match="gamma .* must have 16 elements"):
        run1("NpuLayerNorm", [x, gamma[:8], beta], dtype, x.shape, axis=-1, epsilon=1e-3)


GRADS = {"Relu": "ReluGrad", "Relu6": "Relu6Grad", "LeakyRelu": "LeakyReluGrad", "Elu": "EluGrad",
         "Sigmoid": "SigmoidGrad", "Tanh": "TanhGrad"}


@pytest.mark.parametrize("act", list(GRADS))
@pytest.mark.parametrize("shape,fmt", [((64, 10), "NHWC"), ((2, 5, 5, 6), "NHWC"),
                                       ((2, 6, 5, 5), "NCHW")])
def test_activation_grad_bias_add_grad_kernel(act, shape, fmt):
    g = random(shape, seed=4)
    f = random(shape, seed=5, low=-1, high=7) if act != "Sigmoid" else random(shape, seed=5, low=0, high=1)
    if act in ("Sigmoid", "Tanh"):
        dx = tf_cpu(GRADS[act], y=f, dy=g)
    elif act == "Elu":
        dx = tf_cpu(GRADS[act], gradients=g, outputs=f)
    else:
        dx = tf_cpu(GRADS[act], gradients=g, features=f, **({"alpha": 0.3} if act == "LeakyRelu" else {}))
    db = tf_cpu("BiasAddGrad", out_backprop=dx, data_format=fmt)
    attrs = {"activation": act, "alpha": 0.3, "data_format": fmt}
    got = run_kernel("NpuFusedActivationGradBiasAddGrad", [g, f],
                     [(np.float32, shape), (np.float32, db.shape)], attrs)
    assert_float_close(got[0], dx, np.float32)
    assert_float_close(got[1], db, np.float32, grad=True)
    ref = ops.evaluate(ops.get("NpuFusedActivationGradBiasAddGrad"), [g, f], attrs, [1, 1])
    np.testing.assert_allclose(ref[0], dx, rtol=1e-6)
    np.testing.assert_allclose(ref[1], db, rtol=1e-4, atol=1e-4)


def test_activation_grad_bias_add_grad_float16():
    g, f = random((32, 24), np.float16, seed=1), random((32, 24), np.float16, seed=2)
    dx = to_f32(g) * (to_f32(f) > 0)
    got = run_kernel("NpuFusedActivationGradBiasAddGrad", [g, f],
                     [(np.float16, (32, 24)), (np.float16, (24,))], {"activation": "Relu"})
    assert_float_close(got[0], dx, np.float16)
    np.testing.assert_allclose(to_f32(got[1]), dx.sum(0), rtol=1e-2, atol=1e-2)
