"""End to end: every op of the issue list, in a tf.function on the NPU, against TF on CPU.

Each case runs through the whole stack: TF places the ops on the NPU, the Grappler plugin hands
the graph to the graph engine, the NpuGraphOp kernel compiles the cluster and the simulated NPU
runs it. The NPU side goes through npu_device.explain, which tells which ops landed in NPU
clusters; the runtime's counters prove the sim executed them.

Tolerances: float32 forward rtol 1e-5, gradients rtol 1e-4 (longer chains of float32 ops whose
summation order differs from TF's). float16/bfloat16: the NPU reads the narrow inputs, computes in
float32 and rounds the result once, so it is compared with a float32 CPU reference on the same
(widened) inputs at one unit in the last place of the narrow type: 2**-10 for float16,
2**-7 for bfloat16 (round-to-nearest is within half of that).
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf

from npu_device.explain import explain

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
FWD, GRAD = dict(rtol=1e-5, atol=1e-6), dict(rtol=1e-4, atol=1e-5)
NARROW = {tf.float16: 2.0 ** -10, tf.bfloat16: 2.0 ** -7}
# Op types that compute; none of them may stay on CPU in these graphs.
MATH = {"MatMul", "BiasAdd", "BiasAddGrad", "Conv2D", "Conv2DBackpropInput",
        "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad", "Relu",
        "ReluGrad", "Relu6", "Relu6Grad", "Sigmoid", "SigmoidGrad", "Tanh", "TanhGrad", "Softmax",
        "LogSoftmax", "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
        "Mean", "Sum", "Max", "ArgMax", "AddV2", "Sub", "Mul", "RealDiv", "Cast", "Select",
        "SelectV2", "Sqrt", "Rsqrt", "Square", "Pow", "Exp", "Log", "Maximum", "Minimum"}


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    # The default precision mode (allow_fp32_to_fp16) computes float32 matrix ops in float16;
    # these comparisons are about float32 numerics.
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    yield
    npu_device.set_npu_config(precision_mode=None)


def rand(seed, *shape, lo=-1.0, hi=1.0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def on_device(device, fn):
    """fn with every op it creates placed on `device` (the tf.function's own ops included)."""
    @tf.autograph.experimental.do_not_convert   # plain Python: nothing for AutoGraph to do
    def body(*xs):
        with tf.device(device):
            return fn(*xs)
    body.__name__ = getattr(fn, "__name__", "case")
    return body


def to_device(device, arrays):
    with tf.device(device):
        return [tf.identity(tf.constant(a)) for a in arrays]


def flat_numpy(outputs):
    return [np.asarray(o) for o in tf.nest.flatten(outputs)]


def run_npu(fn, arrays, signature=None):
    """Runs fn on the NPU through explain; returns (outputs, explanation, counter deltas)."""
    before = npu_device.counters()
    target = on_device(NPU, fn)
    if signature is not None:
        target = tf.function(target, input_signature=signature)
    e = explain(target, *to_device(NPU, arrays))
    after = npu_device.counters()
    return flat_numpy(e.outputs), e, {k: after[k] - before[k] for k in after}


def run_cpu(fn, arrays):
    return flat_numpy(tf.function(on_device(CPU, fn))(*to_device(CPU, arrays)))


def check_ran_on_npu(e, delta, ops):
    on_npu = e.ops_on("npu")
    missing = [op for op in ops if op not in on_npu]
    assert not missing, f"{missing} not in an NPU cluster:\n{e}"
    on_cpu = set(e.ops_on("cpu")) & MATH
    assert not on_cpu, f"math ops {on_cpu} stayed on CPU:\n{e}"
    # The compiler may fold or fuse, so the count of kernels need not match the ops.
    assert delta["models_run"] >= 1 and delta["kernels_executed"] >= 1, delta


def assert_matches(npu, cpu, tol):
    assert len(npu) == len(cpu)
    for i, (a, b) in enumerate(zip(npu, cpu)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(a, b, err_msg=f"output {i}", **tol)


# ---- forward cases: name -> (fn, inputs, op types that must run in an NPU cluster) ----------
x4 = rand(1, 2, 6, 6, 3)
w33 = rand(2, 3, 3, 3, 4)
a_b = [rand(3, 4, 1, 3), rand(4, 5, 1)]          # broadcast to (4, 5, 3)
ints_as_floats = [np.round(rand(5, 4, 1, 3, lo=-2, hi=2)), np.round(rand(6, 5, 1, lo=-2, hi=2))]
labels = np.eye(10, dtype=np.float32)[np.random.default_rng(7).integers(0, 10, 6)]

FORWARD = {
    "matmul": (lambda a, b: tf.matmul(a, b), [rand(1, 4, 5), rand(2, 5, 3)], ["MatMul"]),
    "matmul_transposed": (lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
                          [rand(1, 5, 4), rand(2, 3, 5)], ["MatMul"]),
    "bias_add": (lambda x, b: tf.nn.bias_add(x, b), [x4, rand(3, 3)], ["BiasAdd"]),
    "conv2d_same_s1": (lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), [x4, w33], ["Conv2D"]),
    "conv2d_valid_s2": (lambda x, w: tf.nn.conv2d(x, w, 2, "VALID"), [x4, w33], ["Conv2D"]),
    "max_pool": (lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), [x4], ["MaxPool"]),
    "avg_pool": (lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), [x4], ["AvgPool"]),
    "relu": (tf.nn.relu, [rand(1, 3, 7)], ["Relu"]),
    "relu6": (tf.nn.relu6, [rand(1, 3, 7, lo=-9, hi=9)], ["Relu6"]),
    "sigmoid": (tf.sigmoid, [rand(1, 3, 7, lo=-6, hi=6)], ["Sigmoid"]),
    "tanh": (tf.tanh, [rand(1, 3, 7, lo=-4, hi=4)], ["Tanh"]),
    "softmax": (tf.nn.softmax, [rand(1, 6, 10, lo=-5, hi=5)], ["Softmax"]),
    "log_softmax": (tf.nn.log_softmax, [rand(1, 6, 10, lo=-5, hi=5)], ["LogSoftmax"]),
    "softmax_xent": (lambda l, x: tf.nn.softmax_cross_entropy_with_logits(l, x),
                     [labels, rand(2, 6, 10, lo=-3, hi=3)], ["SoftmaxCrossEntropyWithLogits"]),
    "sparse_softmax_xent": (
        lambda l, x: tf.nn.sparse_softmax_cross_entropy_with_logits(l, x),
        [np.array([0, 3, 9, 2, 2, 7], np.int32), rand(2, 6, 10, lo=-3, hi=3)],
        ["SparseSoftmaxCrossEntropyWithLogits"]),
    "mean": (lambda x: tf.reduce_mean(x, axis=1), [rand(1, 4, 5, 3)], ["Mean"]),
    "sum_keepdims": (lambda x: tf.reduce_sum(x, axis=[0, 2], keepdims=True), [rand(1, 4, 5, 3)],
                     ["Sum"]),
    "max": (lambda x: tf.reduce_max(x, axis=-1), [rand(1, 4, 5, 3)], ["Max"]),
    "argmax": (lambda x: tf.argmax(x, axis=1), [rand(1, 4, 7)], ["ArgMax"]),
    "arithmetic_broadcast": (
        lambda a, b: [a + b, a - b, a * b, a / (tf.abs(b) + 0.5), tf.maximum(a, b),
                      tf.minimum(a, b), tf.math.squared_difference(a, b),
                      tf.pow(tf.abs(a) + 0.1, b)],
        a_b, ["AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference",
              "Pow"]),
    "unary_math": (lambda x: [-x, tf.exp(x), tf.math.log(tf.abs(x) + 0.1), tf.sqrt(tf.abs(x)),
                              tf.math.rsqrt(tf.abs(x) + 0.1), tf.square(x)],
                   [rand(8, 3, 4)], ["Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Square"]),
    "comparisons_broadcast": (
        lambda a, b: [a > b, a >= b, a < b, a <= b, tf.equal(a, b), tf.not_equal(a, b)],
        ints_as_floats,
        ["Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual"]),
    "cast": (lambda x, i: [tf.cast(x, tf.int32), tf.cast(i, tf.float32) * 0.5,
                           tf.cast(x, tf.bool), tf.cast(x, tf.float16), tf.cast(i, tf.int64)],
             [rand(9, 3, 4, lo=-5, hi=5), np.arange(-6, 6, dtype=np.int32).reshape(3, 4)],
             ["Cast"]),
    "reshape_transpose": (lambda x: [tf.reshape(x, [3, -1]) * 2.0,
                                     tf.transpose(x, [2, 0, 1]) + 1.0],
                          [rand(1, 2, 3, 4)], ["Reshape", "Transpose"]),
    "concat_pack": (lambda a, b: [tf.concat([a, b], axis=1) * 2.0, tf.stack([a, b], 0) + 1.0],
                    [rand(1, 3, 4), rand(2, 3, 4)], ["ConcatV2", "Pack"]),
    "slice_strided": (lambda x: [tf.slice(x, [1, 0, 1], [2, 2, 2]) * 2.0,
                                 x[1:, ::2, -1] + 1.0, x[::-1, 1:3] * 3.0],
                      [rand(1, 3, 4, 5)], ["Slice", "StridedSlice"]),
    "select": (lambda c, a, b: [tf.where(c, a, b), tf.raw_ops.Select(condition=c, x=a, y=b)],
               [rand(1, 3, 4) > 0, rand(2, 3, 4), rand(3, 3, 4)], ["SelectV2", "Select"]),
    # a scalar condition picks all of x or all of y (pfor's Select, in GradientTape.jacobian)
    "select_scalar_condition": (
        lambda c, a, b: [tf.raw_ops.Select(condition=c, x=a * 2.0, y=b),
                         tf.raw_ops.Select(condition=tf.logical_not(c), x=a * 2.0, y=b)],
        [np.array(True), rand(2, 3, 4), rand(3, 3, 4)], ["Select"]),
    "bincount_of_empty_inputs": (
        lambda a, b, c: [tf.math.bincount(a, minlength=3) + c[0],
                         tf.math.bincount(b, minlength=2, axis=-1) + c[:2]],
        [np.zeros(0, np.int32), np.zeros((3, 0), np.int32), np.arange(3, dtype=np.int32)],
        ["DenseBincount"]),
}


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_matches_cpu(name):
    fn, arrays, ops = FORWARD[name]
    npu, e, delta = run_npu(fn, arrays)
    assert_matches(npu, run_cpu(fn, arrays), FWD)
    check_ran_on_npu(e, delta, ops)


def test_fill_and_shape_of_dynamic_input():
    # Unknown dims at trace time keep Shape and Fill in the graph (nothing to constant-fold);
    # the cluster compiles for the shape the call brings.
    fn = lambda x: tf.fill(tf.shape(x), 3.0) * x  # noqa: E731
    sig = [tf.TensorSpec([None, 4], tf.float32)]
    arrays = [rand(1, 5, 4)]
    npu, e, delta = run_npu(fn, arrays, signature=sig)
    assert_matches(npu, run_cpu(fn, arrays), FWD)
    check_ran_on_npu(e, delta, ["Fill", "Mul"])
    assert "Shape" in e.ops_on("npu") or "Shape" in e.ops_on("npu_unclustered"), str(e)


# ---- gradient cases: loss = sum(w * fn(*xs)**2), gradients with respect to every input ------
# (squared, so the incoming gradient depends on the inputs and Grappler cannot fold the
# gradient ops of linear ops such as AvgPool into constants)
def gradients_of(fn):
    def grads(*xs):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = fn(*xs)
            weights = tf.cast(tf.reshape(tf.range(tf.size(y)) % 7 - 3, tf.shape(y)), y.dtype)
            loss = tf.reduce_sum(y * y * weights)
        return tape.gradient(loss, xs)
    return grads


GRADIENT = {
    "dense_relu": (lambda x, w, b: tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b)),
                   [rand(1, 4, 5), rand(2, 5, 3), rand(3, 3)],
                   ["MatMul", "BiasAddGrad", "ReluGrad"]),
    "conv2d": (lambda x, w: tf.nn.conv2d(x, w, 2, "SAME"), [x4, w33],
               ["Conv2DBackpropInput", "Conv2DBackpropFilter"]),
    "max_pool": (lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), [x4], ["MaxPoolGrad"]),
    "avg_pool": (lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), [x4], ["AvgPoolGrad"]),
    "relu6": (tf.nn.relu6, [rand(4, 3, 7, lo=-9, hi=9)], ["Relu6Grad"]),
    "sigmoid": (tf.sigmoid, [rand(5, 3, 7, lo=-6, hi=6)], ["SigmoidGrad"]),
    "tanh": (tf.tanh, [rand(6, 3, 7, lo=-4, hi=4)], ["TanhGrad"]),
    "softmax_log_softmax": (lambda x: tf.nn.softmax(x) + tf.nn.log_softmax(x),
                            [rand(7, 6, 10, lo=-3, hi=3)], ["Softmax", "LogSoftmax"]),
    "softmax_xent": (lambda x: tf.nn.softmax_cross_entropy_with_logits(labels, x),
                     [rand(8, 6, 10, lo=-3, hi=3)], ["SoftmaxCrossEntropyWithLogits"]),
    "sparse_softmax_xent": (
        lambda x: tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.constant([0, 3, 9, 2, 2, 7]), x),
        [rand(9, 6, 10, lo=-3, hi=3)], ["SparseSoftmaxCrossEntropyWithLogits"]),
    "mean_max": (lambda x: tf.reduce_mean(x, axis=1) + tf.reduce_max(x, axis=1),
                 [rand(10, 4, 5, 3)], ["Mean"]),
}


@pytest.mark.parametrize("name", sorted(GRADIENT))
def test_gradients_match_cpu(name):
    fn, arrays, ops = GRADIENT[name]
    npu, e, delta = run_npu(gradients_of(fn), arrays)
    assert_matches(npu, run_cpu(gradients_of(fn), arrays), GRAD)
    check_ran_on_npu(e, delta, ops)


# ---- optimizer updates: Keras SGD (momentum) and Adam, two steps on a variable ----------------
@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    lambda: keras.optimizers.Adam(0.01),
], ids=["sgd_momentum", "adam"])
def test_optimizer_update_matches_cpu(make_optimizer):
    start, grad = rand(11, 4, 3), rand(12, 4, 3)

    def train(device):
        with tf.device(device):
            var = tf.Variable(start)
            opt = make_optimizer()
            opt.build([var])
        step = on_device(device, lambda g: opt.apply_gradients([(g, var)]))
        g = to_device(device, [grad])[0]
        if device == NPU:
            before = npu_device.counters()
            e = explain(step, g)
            tf.function(step)(g)
            delta = npu_device.counters()["models_run"] - before["models_run"]
            return var.numpy(), e, delta
        tf.function(step)(g)
        tf.function(step)(g)
        return var.numpy(), None, None

    got, e, runs = train(NPU)
    want, _, _ = train(CPU)
    np.testing.assert_allclose(got, want, **FWD)
    assert not set(e.ops_on("cpu")) & MATH, str(e)
    assert {"Mul", "Sub"} & set(e.ops_on("npu")) or {"Mul", "AddV2"} & set(e.ops_on("npu")), str(e)
    assert runs >= 2


# ---- float16 / bfloat16 -----------------------------------------------------------------------
NARROW_CASES = {
    "matmul": (lambda a, b: tf.matmul(a, b), [rand(1, 8, 16), rand(2, 16, 5)]),
    "conv2d": (lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), [x4, w33]),
    "bias_add_relu": (lambda x, b: tf.nn.relu(tf.nn.bias_add(x, b)), [x4, rand(3, 3)]),
    "softmax": (tf.nn.softmax, [rand(4, 6, 10, lo=-4, hi=4)]),
    "mean": (lambda x: tf.reduce_mean(x, axis=[1, 2]), [x4]),
    "mul_broadcast": (lambda a, b: a * b, a_b),
}


@pytest.mark.parametrize("dtype", list(NARROW), ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(NARROW_CASES))
def test_narrow_float_within_one_ulp(name, dtype):
    fn, arrays = NARROW_CASES[name]
    narrow = [tf.cast(a, dtype).numpy() for a in arrays]
    npu, e, delta = run_npu(fn, narrow)
    # float32 reference on the same values, computed on CPU
    want = run_cpu(fn, [a.astype(np.float32) for a in narrow])
    ulp = NARROW[dtype]
    for got, ref in zip(npu, want):
        assert got.dtype == dtype.as_numpy_dtype
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=ulp, atol=1e-5)
    assert delta["models_run"] >= 1 and not set(e.ops_on("cpu")) & MATH, str(e)


def test_jacobian_of_a_function_matches_cpu():
    # GradientTape.jacobian vectorizes the backward pass (pfor), which emits Select (v1) with a
    # scalar condition; the NPU compiled it as a wrong-shaped condition before.
    x = rand(1, 2, 3)

    def jacobian(device):
        with tf.device(device):
            w = tf.Variable(rand(2, 3, 2))
            f = tf.function(lambda x: tf.tanh(tf.matmul(x, w)))
            with tf.GradientTape() as tape:
                y = f(tf.constant(x))
            return tape.jacobian(y, w).numpy()

    np.testing.assert_allclose(jacobian(NPU), jacobian(CPU), **GRAD)
