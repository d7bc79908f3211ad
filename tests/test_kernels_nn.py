"""Matrix products, convolutions, pooling and softmax kernels against TensorFlow on the CPU.

TF's CPU kernels only take NHWC for convolution and pooling, so NCHW cases are checked
against the NHWC result transposed. Dilated convolution gradients and depthwise convolutions
with unequal strides, which only oneDNN builds of TF compute directly, come from
op_cases.tf_cpu_op: TF on the CPU in an equivalent form every build supports (a zero-dilated
filter; explicit padding, stride 1 and subsampling)."""
import numpy as np
import pytest

from npu_device.tools.op_cases import tf_cpu_op
from test_kernels_harness import (FLOAT_TYPES, assert_float_close, random, run1, run_kernel,
                                  tf_cpu, to_f32)

DTYPE_IDS = ["float32", "float16", "bfloat16"]
NHWC_TO_NCHW, NCHW_TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
# the plain products of whole vectors of columns run the direct strips (gemm.cc): over row
# chunks and column parts, 16-column groups, a one-long contraction; A B^T with few rows of A
# and k >= 128 the dot products (gemm_dot_impl.h): row and column tiles cut short, a contraction
# that ends inside a vector (15x133x17)
@pytest.mark.parametrize("m,k,n", [(7, 5, 3), (300, 200, 150), (1, 512, 700), (130, 1024, 48),
                                   (64, 784, 512), (3, 1, 32), (15, 133, 17)])
def test_matmul(m, k, n, ta, tb, dtype):
    a = random((k, m) if ta else (m, k), dtype, -1, 1, seed=1)
    b = random((n, k) if tb else (k, n), dtype, -1, 1, seed=2)
    got = run1("MatMul", [a, b], dtype, (m, n), transpose_a=ta, transpose_b=tb)
    ref = tf_cpu("MatMul", a=to_f32(a), b=to_f32(b), transpose_a=ta, transpose_b=tb)
    assert_float_close(got, ref, dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_matmul_is_exact(dtype):
    a, b = random((9, 13), dtype, -50, 50, seed=30), random((9, 6), dtype, -50, 50, seed=31)
    got = run1("MatMul", [a, b], dtype, (13, 6), transpose_a=True)
    np.testing.assert_array_equal(got, tf_cpu("MatMul", a=a, b=b, transpose_a=True))


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op,sa,sb,adj", [
    ("BatchMatMulV2", (2, 1, 4, 6), (3, 6, 5), (False, False)),
    ("BatchMatMulV2", (3, 6, 4), (6, 5), (True, False)),
    ("BatchMatMulV3", (2, 4, 6), (2, 5, 6), (False, True)),
    ("BatchMatMul", (4, 6, 3), (4, 6, 5), (True, False)),
])
def test_batch_matmul(op, sa, sb, adj, dtype):
    a, b = random(sa, dtype, -1, 1, seed=3), random(sb, dtype, -1, 1, seed=4)
    ref = tf_cpu("BatchMatMulV2", x=to_f32(a), y=to_f32(b), adj_x=adj[0], adj_y=adj[1])
    got = run1(op, [a, b], dtype, ref.shape, adj_x=adj[0], adj_y=adj[1])
    assert_float_close(got, ref, dtype)


def conv_attrs(strides, padding, dilations, data_format, explicit=None):
    """TF attributes for a 2-D window given per-spatial-axis values (in NHWC order)."""
    def per_axis(hw, neutral=1):
        return [neutral, neutral, *hw] if data_format == "NCHW" else [neutral, *hw, neutral]
    attrs = {"strides": per_axis(strides), "padding": padding, "data_format": data_format}
    if dilations is not None:
        attrs["dilations"] = per_axis(dilations)
    if padding == "EXPLICIT":
        pairs = [[0, 0], [0, 0], *explicit] if data_format == "NCHW" else [[0, 0], *explicit, [0, 0]]
        attrs["explicit_paddings"] = [p for pair in pairs for p in pair]
    return attrs


CONV_CASES = [  # input NHWC, filter HWIO, strides, padding, dilations, explicit paddings
    ((2, 9, 10, 3), (3, 3, 3, 8), (1, 1), "SAME", (1, 1), None),
    ((2, 9, 10, 3), (3, 2, 3, 4), (2, 3), "VALID", (1, 1), None),
    ((1, 11, 12, 4), (3, 3, 4, 5), (2, 2), "SAME", (1, 1), None),
    ((2, 10, 9, 3), (3, 3, 3, 4), (1, 1), "VALID", (2, 3), None),
    ((2, 7, 8, 3), (2, 3, 3, 4), (1, 2), "EXPLICIT", (1, 1), [[1, 2], [0, 3]]),
    ((2, 6, 7, 16), (1, 1, 16, 12), (1, 1), "VALID", (1, 1), None),
    ((4, 32, 32, 16), (3, 3, 16, 32), (1, 1), "SAME", (1, 1), None),
    # direct (whole vectors of output channels; the forward from 128 output pixels on): strided,
    # explicit padding with 16-channel groups, a 7x7/2 stem
    ((2, 9, 10, 3), (3, 3, 3, 16), (2, 1), "SAME", (1, 1), None),
    ((2, 7, 30, 3), (2, 3, 3, 48), (1, 2), "EXPLICIT", (1, 1), [[1, 2], [0, 3]]),
    ((1, 20, 33, 3), (7, 7, 3, 32), (2, 2), "SAME", (1, 1), None),
    # dx direct too (stride 1, whole vectors of input channels, >= 512 input pixels): VALID,
    # explicit padding
    ((2, 16, 17, 32), (3, 3, 32, 16), (1, 1), "VALID", (1, 1), None),
    ((2, 16, 18, 16), (3, 2, 16, 32), (1, 1), "EXPLICIT", (1, 1), [[2, 0], [1, 1]]),
    # rows dilated, columns not: the forward and dW direct
    ((2, 12, 11, 3), (3, 3, 3, 16), (1, 1), "SAME", (2, 1), None),
]
CONV_IDS = ["same", "valid-strided", "same-strided", "dilated", "explicit", "pointwise", "large",
            "direct-strided", "direct-explicit", "direct-stem", "direct-dx-valid",
            "direct-dx-explicit", "direct-row-dilated"]


def nhwc_conv_reference(x, f, strides, padding, dilations, explicit):
    attrs = conv_attrs(strides, padding, dilations, "NHWC", explicit)
    return tf_cpu("Conv2D", input=to_f32(x), filter=to_f32(f), **attrs)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", CONV_CASES, ids=CONV_IDS)
def test_conv2d_float32(case, data_format):
    xs, fs, strides, padding, dilations, explicit = case
    x, f = random(xs, np.float32, seed=5), random(fs, np.float32, seed=6)
    ref = nhwc_conv_reference(x, f, strides, padding, dilations, explicit)
    attrs = conv_attrs(strides, padding, dilations, data_format, explicit)
    if data_format == "NCHW":
        x, ref = x.transpose(NHWC_TO_NCHW), ref.transpose(NHWC_TO_NCHW)
    got = run1("Conv2D", [np.ascontiguousarray(x), f], np.float32, ref.shape, **attrs)
    assert_float_close(got, ref, np.float32)


@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:], ids=DTYPE_IDS[1:])
def test_conv2d_half_storage(dtype):
    x, f = random((2, 9, 10, 3), dtype, seed=7), random((3, 3, 3, 8), dtype, seed=8)
    ref = nhwc_conv_reference(x, f, (2, 1), "SAME", (1, 1), None)
    got = run1("Conv2D", [x, f], dtype, ref.shape, **conv_attrs((2, 1), "SAME", (1, 1), "NHWC"))
    assert_float_close(got, ref, dtype)


def conv_gradients_reference(x, f, dy, strides, padding, dilations, explicit):
    """dx and dW from TF's own autodiff of the NHWC convolution (dilated: of the convolution
    with the zero-dilated filter, mapped back to the real taps by the tape)."""
    import tensorflow as tf
    attrs = conv_attrs(strides, padding, dilations, "NHWC", explicit)
    with tf.device("/CPU:0"):
        xv, fv = tf.constant(to_f32(x)), tf.constant(to_f32(f))
        with tf.GradientTape() as tape:
            tape.watch([xv, fv])
            y = tf_cpu_op("Conv2D", {"input": xv, "filter": fv}, attrs)
        dx, dw = tape.gradient(y, [xv, fv], output_gradients=tf.constant(to_f32(dy)))
    return dx.numpy(), dw.numpy()


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", CONV_CASES, ids=CONV_IDS)
def test_conv2d_backprop(case, data_format):
    xs, fs, strides, padding, dilations, explicit = case
    x, f = random(xs, np.float32, seed=9), random(fs, np.float32, seed=10)
    y_shape = nhwc_conv_reference(x, f, strides, padding, dilations, explicit).shape
    dy = random(y_shape, np.float32, seed=11)
    dx_ref, dw_ref = conv_gradients_reference(x, f, dy, strides, padding, dilations, explicit)
    attrs = conv_attrs(strides, padding, dilations, data_format, explicit)
    if data_format == "NCHW":
        x, dy, dx_ref = (np.ascontiguousarray(a.transpose(NHWC_TO_NCHW)) for a in (x, dy, dx_ref))
    dx = run1("Conv2DBackpropInput", [f, dy], np.float32, x.shape, input_sizes=list(x.shape), **attrs)
    assert_float_close(dx, dx_ref, np.float32, grad=True)
    dw = run1("Conv2DBackpropFilter", [x, dy], np.float32, f.shape, filter_sizes=list(f.shape), **attrs)
    assert_float_close(dw, dw_ref, np.float32, grad=True)


@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:], ids=DTYPE_IDS[1:])
def test_conv2d_backprop_half_storage(dtype):
    x, f = random((2, 8, 9, 3), dtype, seed=12), random((3, 3, 3, 4), dtype, seed=13)
    dy = random((2, 8, 9, 4), dtype, seed=14)
    dx_ref, dw_ref = conv_gradients_reference(x, f, dy, (1, 1), "SAME", (1, 1), None)
    attrs = conv_attrs((1, 1), "SAME", (1, 1), "NHWC")
    dx = run1("Conv2DBackpropInput", [f, dy], dtype, x.shape, input_sizes=list(x.shape), **attrs)
    dw = run1("Conv2DBackpropFilter", [x, dy], dtype, f.shape, filter_sizes=list(f.shape), **attrs)
    assert_float_close(dx, dx_ref, dtype)
    assert_float_close(dw, dw_ref, dtype)


POOL_CASES = [  # input NHWC, window, strides, padding
    ((2, 9, 10, 3), (3, 3), (2, 2), "SAME"),
    ((2, 9, 10, 3), (2, 3), (2, 1), "VALID"),
    ((1, 8, 8, 130), (3, 3), (1, 1), "SAME"),
    ((2, 8, 10, 70), (2, 2), (2, 2), "VALID"),   # windows tile the input: dx written once
    ((1, 9, 8, 5), (2, 2), (2, 2), "VALID"),     # a row no window covers
]
POOL_IDS = ["same", "valid", "wide-channels", "tiling", "uncovered-row"]


def pool_reference(op, x, **attrs):
    return tf_cpu(op, **{"input" if op == "MaxPool" else "value": x}, **attrs)


def pool_attrs(window, strides, padding, data_format):
    def per_axis(hw):
        return [1, 1, *hw] if data_format == "NCHW" else [1, *hw, 1]
    return {"ksize": per_axis(window), "strides": per_axis(strides), "padding": padding,
            "data_format": data_format}


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("op", ["MaxPool", "AvgPool"])
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_pooling(case, op, data_format):
    xs, window, strides, padding = case
    x = random(xs, np.float32, seed=15)
    ref = pool_reference(op, x, **pool_attrs(window, strides, padding, "NHWC"))
    if data_format == "NCHW":
        x, ref = np.ascontiguousarray(x.transpose(NHWC_TO_NCHW)), ref.transpose(NHWC_TO_NCHW)
    got = run1(op, [x], np.float32, ref.shape, **pool_attrs(window, strides, padding, data_format))
    assert_float_close(got, ref, np.float32)


@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:], ids=DTYPE_IDS[1:])
@pytest.mark.parametrize("op", ["MaxPool", "AvgPool"])
def test_pooling_half_storage(op, dtype):
    x = random((2, 9, 10, 3), dtype, seed=16)
    attrs = pool_attrs((3, 3), (2, 2), "SAME", "NHWC")
    ref = pool_reference(op, to_f32(x), **attrs)
    assert_float_close(run1(op, [x], dtype, ref.shape, **attrs), ref, dtype)


@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_max_pool_grad_writes_every_element_of_a_reused_buffer(case):
    """dx goes to arena bytes an earlier kernel wrote: each element must be written, where a
    window covers it or not (the tiling case writes dx once instead of zeroing it first)."""
    from graph_engine.compiler import model_format as mf
    from test_kernels_harness import GraphBuilder
    xs, window, strides, padding = case
    x = random(xs, np.float32, 0, 2, seed=19).round()
    attrs = pool_attrs(window, strides, padding, "NHWC")
    y = pool_reference("MaxPool", x, **attrs)
    dy = random(y.shape, np.float32, seed=20)
    ref = tf_cpu("MaxPoolGrad", orig_input=x, orig_output=y, grad=dy, **attrs)
    g = GraphBuilder()
    ins = [g.input(np.float32, a.shape) for a in (x, y, dy, x)]
    old = g.arena_value(np.float32, xs)
    g.kernel("Neg", [ins[3]], [old])                          # old bytes: -x - 7
    dx = g._value(np.float32, xs, mf.Kind.ARENA, g.values[old].where)
    g.kernel("MaxPoolGrad", ins[:3], [dx], **attrs)
    g.add_output(dx)
    got = g.load().run([x, y, dy, x + 7])[0]
    assert_float_close(got, ref, np.float32, grad=True)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_max_pool_grad_ties_go_to_the_first_maximum(case, data_format):
    xs, window, strides, padding = case
    x = random(xs, np.float32, 0, 2, seed=17).round()   # many equal maxima per window
    nhwc = pool_attrs(window, strides, padding, "NHWC")
    y = pool_reference("MaxPool", x, **nhwc)
    dy = random(y.shape, np.float32, seed=18)
    ref = tf_cpu("MaxPoolGrad", orig_input=x, orig_output=y, grad=dy, **nhwc)
    if data_format == "NCHW":
        x, y, dy, ref = (np.ascontiguousarray(a.transpose(NHWC_TO_NCHW)) for a in (x, y, dy, ref))
    got = run1("MaxPoolGrad", [x, y, dy], np.float32, x.shape,
               **pool_attrs(window, strides, padding, data_format))
    assert_float_close(got, ref, np.float32, grad=True)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", POOL_CASES, ids=POOL_IDS)
def test_avg_pool_grad(case, data_format):
    xs, window, strides, padding = case
    nhwc = pool_attrs(window, strides, padding, "NHWC")
    y_shape = tf_cpu("AvgPool", value=np.zeros(xs, np.float32), **nhwc).shape
    dy = random(y_shape, np.float32, seed=19)
    ref = tf_cpu("AvgPoolGrad", orig_input_shape=list(xs), grad=dy, **nhwc)
    in_shape = xs
    if data_format == "NCHW":
        dy, ref = np.ascontiguousarray(dy.transpose(NHWC_TO_NCHW)), ref.transpose(NHWC_TO_NCHW)
        in_shape = tuple(xs[i] for i in NHWC_TO_NCHW)
    got = run1("AvgPoolGrad", [dy], np.float32, in_shape, orig_input_shape=list(in_shape),
               **pool_attrs(window, strides, padding, data_format))
    assert_float_close(got, ref, np.float32, grad=True)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 1000), (9,)])
def test_softmax(op, shape, dtype):
    x = random(shape, dtype, -20, 20, seed=20)
    assert_float_close(run1(op, [x], dtype, shape), tf_cpu(op, logits=to_f32(x)), dtype)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("label_shape", [(6, 10), (1, 10)], ids=["dense", "broadcast-labels"])
def test_softmax_cross_entropy(label_shape, dtype):
    logits = random((6, 10), dtype, -5, 5, seed=21)
    labels = random(label_shape, np.float32, 0, 1, seed=22)
    labels = (labels / labels.sum(-1, keepdims=True)).astype(dtype)
    loss, backprop = run_kernel("SoftmaxCrossEntropyWithLogits", [logits, labels],
                                [(dtype, (6,)), (dtype, (6, 10))])
    ref_loss, ref_backprop = tf_cpu("SoftmaxCrossEntropyWithLogits", features=to_f32(logits),
                                    labels=to_f32(labels))
    assert_float_close(loss, ref_loss, dtype)
    assert_float_close(backprop, ref_backprop, dtype, grad=True)


@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
def test_sparse_softmax_cross_entropy(dtype, label_dtype):
    logits = random((300, 17), dtype, -5, 5, seed=23)
    labels = random((300,), label_dtype, 0, 16, seed=24)
    loss, backprop = run_kernel("SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
                                [(dtype, (300,)), (dtype, (300, 17))])
    ref_loss, ref_backprop = tf_cpu("SparseSoftmaxCrossEntropyWithLogits", features=to_f32(logits),
                                    labels=labels)
    assert_float_close(loss, ref_loss, dtype)
    assert_float_close(backprop, ref_backprop, dtype, grad=True)


DEPTHWISE_CASES = [  # input NHWC, filter [KH, KW, C, M], strides, padding, dilations
    ((2, 9, 10, 3), (3, 3, 3, 1), (1, 1), "SAME", (1, 1)),
    ((2, 9, 10, 4), (3, 2, 4, 2), (2, 1), "VALID", (1, 1)),
    ((1, 12, 11, 19), (5, 5, 19, 1), (2, 2), "SAME", (1, 1)),
    ((2, 10, 9, 3), (3, 3, 3, 2), (1, 1), "VALID", (2, 2)),
    ((2, 11, 10, 33), (3, 3, 33, 1), (2, 2), "VALID", (1, 1)),
    ((1, 10, 9, 17), (3, 3, 17, 1), (1, 1), "SAME", (2, 2)),
]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=["same", "valid-multiplier", "wide", "dilated",
                                                 "strided-lanes", "dilated-lanes"])
def test_depthwise_conv2d_and_gradients(case, data_format):
    import tensorflow as tf
    xs, fs, strides, padding, dilations = case
    x, f = random(xs, np.float32, seed=32), random(fs, np.float32, seed=33)
    # TF's Eigen CPU kernels lack dilation and unequal strides here: tf_cpu_op computes the
    # same convolution in a form they support (zero-dilated filter; stride 1, subsampled).
    with tf.device("/CPU:0"):
        xv, fv = tf.constant(x), tf.constant(f)
        with tf.GradientTape() as tape:
            tape.watch([xv, fv])
            y = tf_cpu_op("DepthwiseConv2dNative", {"input": xv, "filter": fv},
                          conv_attrs(strides, padding, dilations, "NHWC"))
        dy = random(y.shape, np.float32, seed=34)
        dx_ref, dw_ref = (t.numpy() for t in tape.gradient(y, [xv, fv], output_gradients=tf.constant(dy)))
    y_ref = y.numpy()
    attrs = conv_attrs(strides, padding, dilations, data_format)
    if data_format == "NCHW":
        x, dy, y_ref, dx_ref = (np.ascontiguousarray(a.transpose(NHWC_TO_NCHW)) for a in (x, dy, y_ref, dx_ref))
    assert_float_close(run1("DepthwiseConv2dNative", [x, f], np.float32, y_ref.shape, **attrs), y_ref, np.float32)
    dx = run1("DepthwiseConv2dNativeBackpropInput", [f, dy], np.float32, x.shape, input_sizes=list(x.shape), **attrs)
    assert_float_close(dx, dx_ref, np.float32, grad=True)
    dw = run1("DepthwiseConv2dNativeBackpropFilter", [x, dy], np.float32, f.shape, filter_sizes=list(f.shape), **attrs)
    assert_float_close(dw, dw_ref, np.float32, grad=True)


@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:], ids=DTYPE_IDS[1:])
def test_depthwise_conv2d_half_storage(dtype):
    x, f = random((2, 9, 10, 6), dtype, seed=35), random((3, 3, 6, 2), dtype, seed=36)
    attrs = conv_attrs((1, 1), "SAME", (1, 1), "NHWC")
    ref = tf_cpu("DepthwiseConv2dNative", input=to_f32(x), filter=to_f32(f), **attrs)
    assert_float_close(run1("DepthwiseConv2dNative", [x, f], dtype, ref.shape, **attrs), ref, dtype)
