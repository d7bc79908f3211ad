"""Grouped Conv2D on the NPU (Keras Conv2D(groups=g), ConvNeXt's 7x7 per-channel convolutions)
and tf.function(jit_compile=True) placed on the NPU, which Keras routes grouped convolutions
through (docs/options.md, "Keras and XLA"; docs/architecture.md, "Grouped convolution").

TF's CPU kernels compute no gradient of a grouped convolution (and not every build its forward),
so every reference here is made of plain TF ops on the CPU: the input channels split per group,
one ungrouped tf.nn.conv2d each, the results concatenated; gradients by tf.GradientTape through
that.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from graph_engine import ops
from graph_engine.compiler import model_format as mf
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.compile import compilation_for
from graph_engine.compiler.devtools import cluster_request, place
from graph_engine.compiler.pipeline import pipeline
from npu_device.explain import explain
from npu_device.tools.op_cases import tf_cpu_op
from tests.conftest import run_python
from test_kernels_harness import C

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
RTOL = 1e-4            # float32 on both sides; atol is RTOL times the reference's largest value


def split_conv(x, f, **attrs):
    """Grouped Conv2D (raw op attrs) from ungrouped TF ops: groups = input channels / filter
    depth; each group's convolution by op_cases.tf_cpu_op (dilations and NCHW in forms every
    CPU build of TF computes)."""
    attrs = conv_attrs(**attrs)
    axis = 1 if attrs["data_format"] == "NCHW" else 3
    groups = x.shape[axis] // f.shape[2]
    return tf.concat([tf_cpu_op("Conv2D", {"input": a, "filter": b}, attrs)
                      for a, b in zip(tf.split(x, groups, axis), tf.split(f, groups, 3))], axis)


def conv_attrs(strides=(1, 1, 1, 1), padding="SAME", dilations=(1, 1, 1, 1), data_format="NHWC"):
    return {"strides": list(strides), "padding": padding, "dilations": list(dilations),
            "data_format": data_format}


def conv_and_grads(device, conv, x, f, w):
    """conv(x, f), and d(sum(conv * w))/d(x, f), on `device`."""
    with tf.device(device):
        x, f = tf.constant(x), tf.constant(f)
        with tf.GradientTape() as tape:
            tape.watch([x, f])
            y = conv(x, f)
            loss = tf.reduce_sum(y * w)
        dx, df = tape.gradient(loss, [x, f])
    return [t.numpy() for t in (y, dx, df)]


def assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * float(np.max(np.abs(want))))


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


# (input, filter, Conv2D attrs): the general kernel (several input channels per group), the
# depthwise form (one per group: multiplier 2 and ConvNeXt's 1), a grouped 1x1, strides and
# dilations, NCHW, and enough pixels x taps for the GEMM kernel to work in several row blocks.
CASES = {
    "g3": ((2, 7, 7, 6), (3, 3, 2, 9), {}),
    "depthwise_m2": ((2, 6, 6, 4), (3, 3, 1, 8), {}),
    "convnext_7x7": ((2, 9, 9, 8), (7, 7, 1, 8), {}),
    "pointwise_g2": ((2, 5, 5, 4), (1, 1, 2, 6), {"padding": "VALID"}),
    "strided_dilated": ((2, 9, 8, 8), (3, 2, 4, 6), {"strides": [1, 2, 1, 1], "padding": "VALID",
                                                     "dilations": [1, 1, 2, 1]}),
    "nchw": ((2, 6, 7, 5), (3, 3, 3, 4), {"strides": [1, 1, 2, 2], "data_format": "NCHW"}),
    "nchw_depthwise_form": ((2, 4, 6, 6), (3, 3, 1, 4), {"data_format": "NCHW"}),
    "many_row_blocks": ((2, 20, 20, 128), (3, 3, 64, 32), {}),   # im2col in several blocks
}


@pytest.mark.parametrize("case", CASES)
def test_numpy_references_match_split_tf(case):
    # The registry's numpy references (constant folding, the reference executor) of all three ops.
    xs, fs, kw = CASES[case]
    x, f = rand(*xs), rand(*fs, seed=1)
    conv = lambda a, b: split_conv(a, b, **kw)  # noqa: E731
    y = conv(x, f).numpy()
    w = rand(*y.shape, seed=2)
    want_y, want_dx, want_df = conv_and_grads(CPU, conv, x, f, w)
    attrs = conv_attrs(**kw)
    assert_close(ops.get("Conv2D").compute([x, f], attrs), want_y)
    assert_close(ops.get("Conv2DBackpropInput").compute(
        [f, w], {**attrs, "input_sizes": list(xs)}), want_dx)
    assert_close(ops.get("Conv2DBackpropFilter").compute(
        [x, w], {**attrs, "filter_sizes": list(fs)}), want_df)


@pytest.mark.parametrize("case", CASES)
def test_npu_forward_and_gradients_match_split_reference(case, no_soft_placement):
    # Eagerly on the NPU: Conv2D and its gradient's Conv2DBackpropInput and Conv2DBackpropFilter,
    # all grouped, against the split reference on the CPU.
    xs, fs, kw = CASES[case]
    x, f = rand(*xs), rand(*fs, seed=1)
    y_shape = split_conv(x, f, **kw).shape
    w = rand(*y_shape, seed=2)
    got = conv_and_grads(NPU, lambda a, b: tf.raw_ops.Conv2D(input=a, filter=b, **conv_attrs(**kw)),
                         x, f, w)
    want = conv_and_grads(CPU, lambda a, b: split_conv(a, b, **kw), x, f, w)
    for g, r in zip(got, want):
        assert_close(g, r)


def test_invalid_grouping_is_rejected_like_tf():
    with tf.device(NPU):
        with pytest.raises(tf.errors.InvalidArgumentError, match="evenly divisible by filter depth"):
            tf.nn.conv2d(rand(1, 4, 4, 6), rand(3, 3, 4, 6), 1, "SAME")
        with pytest.raises(tf.errors.InvalidArgumentError, match="number of groups"):
            tf.nn.conv2d(rand(1, 4, 4, 6), rand(3, 3, 2, 4), 1, "SAME")


@pytest.mark.parametrize("depth", [2, 1], ids=["grouped", "depthwise_form"])
def test_fused_grouped_conv_with_bias_activation_and_residual(depth):
    # In a graph the contraction-epilogue fusion makes NpuFusedConv2D of the grouped Conv2D.
    x, r = rand(2, 8, 8, 6), rand(2, 8, 8, 6, seed=3)
    f, b = rand(3, 3, depth, 6, seed=1), rand(6, seed=2)

    def block(x, f, b, r):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, f, 1, "SAME"), b) + r)

    with tf.device(NPU):
        report = explain(block, tf.constant(x), tf.constant(f), tf.constant(b), tf.constant(r))
    kernels = [k for g in report.graphs for ms in g.models.values() for m in ms for k in m.kernels]
    assert "NpuFusedConv2D" in kernels, kernels
    with tf.device(CPU):
        want = tf.nn.relu(tf.nn.bias_add(split_conv(x, f), b) + r).numpy()
    assert_close(report.outputs.numpy(), want)


def test_grouped_conv_stays_nd_between_5hd_convolutions():
    # conv_5hd.cc contracts over all input channels, so the layout passes leave a grouped Conv2D
    # in ND while the plain convolutions around it run on NC1HWC0 (docs/layouts.md).
    x = rand(2, 10, 10, 8)
    f1, f2, f3 = rand(3, 3, 8, 16, seed=1), rand(3, 3, 4, 16, seed=2), rand(3, 3, 16, 8, seed=3)

    def body(t):
        t = tf.nn.relu(tf.nn.conv2d(t, f1, 1, "SAME"))
        t = tf.nn.relu(tf.nn.conv2d(t, f2, 1, "SAME"))          # 4 groups
        return tf.nn.conv2d(t, f3, 1, "SAME")

    fn = convert_variables_to_constants_v2(
        tf.function(body).get_concrete_function(tf.TensorSpec(x.shape, tf.float32)))
    fetches = [t.name.split(":")[0] for t in fn.outputs]
    placed = place(fn.graph.as_graph_def(), fetches=fetches)
    part = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    (cluster,) = [n for n in part.node if n.op == "NpuGraphOp"]
    req = cluster_request(cluster, [x])
    model = pipeline().run(compilation_for(req.SerializeToString())).model
    convs = [k for k in model.kernels if "Conv2D" in k.kernel]
    assert len(convs) == 3, [k.kernel for k in model.kernels]
    grouped = [k for k in convs if model.values[k.inputs[1]].dims[2] == 4]
    assert len(grouped) == 1
    assert model.values[grouped[0].inputs[0]].format == mf.Format.ND
    assert any(model.values[k.inputs[0]].format == mf.Format.NC1HWC0 for k in convs)
    with tf.device(CPU):
        t = tf.nn.relu(tf.nn.conv2d(x, f1, 1, "SAME"))
        want = tf.nn.conv2d(tf.nn.relu(split_conv(t, f2)), f3, 1, "SAME").numpy()
    assert_close(C.load_model(mf.serialize(model)).run([x])[0], want)


def test_jit_compile_functions_on_the_npu_run_through_the_graph_engine():
    # Eagerly, nested in a tf.function, and differentiated: no "No JIT device registered for
    # NPU"; one warning for the process, naming the first function.
    result = run_python("""
        import numpy as np
        import tensorflow as tf
        import npu_device

        @tf.function(jit_compile=True)
        def grouped(x, f):
            return tf.nn.conv2d(x, f, 1, "SAME")

        @tf.function(jit_compile=True)
        def affine(x):
            return x * 2.0 + 1.0

        rng = np.random.default_rng(0)
        x = tf.constant(rng.standard_normal((2, 6, 6, 4)).astype("float32"))
        f = tf.constant(rng.standard_normal((3, 3, 2, 6)).astype("float32"))
        with tf.device("/CPU:0"):
            want = tf.concat([tf.nn.conv2d(a, b, 1, "SAME") for a, b in
                              zip(tf.split(x, 2, 3), tf.split(f, 2, 3))], 3).numpy()
        runs = npu_device.counters()["models_run"]
        y = grouped(x, f)
        assert y.device.endswith("NPU:0"), y.device
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
        assert npu_device.counters()["models_run"] > runs        # the graph engine ran it

        @tf.function
        def outer(x, f):
            with tf.GradientTape() as tape:
                tape.watch(f)
                loss = tf.reduce_sum(affine(grouped(x, f)))
            return loss, tape.gradient(loss, f)

        with tf.device("/device:NPU:0"):
            loss, df = outer(x, f)
        np.testing.assert_allclose(loss.numpy(), (2 * want + 1).sum(), rtol=1e-4)
        assert df.shape == f.shape and np.isfinite(df.numpy()).all()
        print("OK")
        """, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-4000:]
    warnings = [line for line in result.stderr.splitlines() if "asks for XLA" in line]
    assert len(warnings) == 1 and "grouped" in warnings[0], warnings


class SplitConv2D(keras.layers.Layer):
    """Conv2D(groups=...) from ungrouped ops (the CPU reference): the same kernel [kh, kw, C/G,
    filters] and bias, applied by split_conv."""

    def __init__(self, filters, kernel_size, groups, activation=None):
        super().__init__()
        self.filters, self.k, self.groups = filters, kernel_size, groups
        self.activation = keras.activations.get(activation)

    def build(self, shape):
        self.kernel = self.add_weight(shape=(self.k, self.k, shape[-1] // self.groups,
                                             self.filters))
        self.bias = self.add_weight(shape=(self.filters,), initializer="zeros")

    def call(self, x):
        return self.activation(tf.nn.bias_add(split_conv(x, self.kernel), self.bias))


def grouped_model(conv):
    return keras.Sequential([
        keras.Input((8, 8, 4)),
        conv(8, 3, groups=2, activation="relu"),
        conv(8, 3, groups=8),                            # one channel per group
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(5)])


def keras_conv(filters, kernel_size, groups, activation=None):
    return keras.layers.Conv2D(filters, kernel_size, padding="same", groups=groups,
                               activation=activation)


def test_keras_grouped_conv_fit_matches_split_reference():
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")   # float32 vs float32
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((64, 8, 8, 4)).astype(np.float32)
        y = rng.integers(0, 5, 64).astype(np.int32)
        histories, weights = [], []
        keras.utils.set_random_seed(0)
        initial = grouped_model(keras_conv).get_weights()
        fallbacks = npu_device.compile_stats()["fallbacks"]     # earlier tests' count stays
        for device, conv in ((NPU, keras_conv), (CPU, SplitConv2D)):
            with tf.device(device):
                model = grouped_model(conv)
                model.set_weights(initial)
                model.compile(optimizer=keras.optimizers.Adam(1e-2),
                              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
                histories.append(model.fit(x, y, batch_size=16, epochs=3, shuffle=False,
                                           verbose=0).history["loss"])
                weights.append(model.get_weights())
        assert npu_device.compile_stats()["fallbacks"] == fallbacks
    finally:
        npu_device.set_npu_config(precision_mode=None)
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-4)
    assert histories[0][-1] < histories[0][0], histories[0]                 # it did learn
    for got, want in zip(*weights):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_keras_grouped_conv3d_fit_matches_the_cpu():
    # Keras' Conv3D(groups=G): TF's CPU computes it through XLA (Keras compiles grouped
    # convolutions), the NPU through its Conv3D kernels; 50 samples, batches of 16.
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")   # float32 vs float32
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((50, 4, 6, 6, 4)).astype(np.float32)
        y = rng.integers(0, 3, 50).astype(np.int32)
        histories, weights = [], []
        fallbacks = npu_device.compile_stats()["fallbacks"]     # earlier tests' count stays
        for device in (NPU, CPU):
            with tf.device(device):
                keras.utils.set_random_seed(0)
                model = keras.Sequential([
                    keras.Input((4, 6, 6, 4)),
                    keras.layers.Conv3D(6, 3, padding="same", groups=2, activation="relu"),
                    keras.layers.Conv3D(6, 2, strides=2, groups=6),     # one channel per group
                    keras.layers.GlobalAveragePooling3D(),
                    keras.layers.Dense(3)])
                model.compile(optimizer=keras.optimizers.Adam(1e-2),
                              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
                histories.append(model.fit(x, y, batch_size=16, epochs=3, shuffle=False,
                                           verbose=0).history["loss"])
                weights.append(model.get_weights())
            if device == NPU:
                assert npu_device.compile_stats()["fallbacks"] == fallbacks
    finally:
        npu_device.set_npu_config(precision_mode=None)
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-4)
    assert histories[0][-1] < histories[0][0], histories[0]                 # it did learn
    for got, want in zip(*weights):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_convnext_tiny_predict_and_fit_step():
    # keras.applications.ConvNeXtTiny: its 7x7 convolutions are Conv2D(groups=channels), which
    # Keras runs through tf.function(jit_compile=True); batch 2 to stay small.
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 64, 64, 3)).astype(np.float32)
    y = np.array([1, 7], np.int32)
    fallbacks = npu_device.compile_stats()["fallbacks"]         # earlier tests' count stays
    with tf.device(NPU):
        model = keras.applications.ConvNeXtTiny(weights=None, input_shape=(64, 64, 3),
                                                classes=10)
        probs = model.predict(x, batch_size=2, verbose=0)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        before = npu_device.counters()["models_run"]
        loss = model.fit(x, y, batch_size=2, epochs=1, verbose=0).history["loss"]
        ran = npu_device.counters()["models_run"] - before
    assert probs.shape == (2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert len(loss) == 1 and np.isfinite(loss[0]), loss
    assert ran > 0
    assert npu_device.compile_stats()["fallbacks"] == fallbacks
