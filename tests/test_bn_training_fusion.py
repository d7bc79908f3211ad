"""Batch-norm training fusion (graph_engine/compiler/passes/fusion/batch_norm_training.py,
docs/fusion.md): the NpuMoments and NpuBatchNormGradSums kernels against their numpy references
and TensorFlow on the CPU (float32/float16/bfloat16, channels last and first, edge cases); the
pass on traced Keras BatchNormalization training steps (what it fuses, no Tile left, results
equal with the pass switched off); Keras models with BatchNormalization trained a few steps on
the NPU against the CPU (float32 with a partial last batch, and allow_mix_precision).

Tolerances: kernels as tests/test_kernels_harness.assert_float_close (float32 rtol 1e-5,
float16/bfloat16 one ULP of the storage type); the compiled step against the same step compiled
without the pass, rtol 1e-4 relative to each output's largest value (float32 summation order
only); training on the NPU against the CPU: losses rtol 1e-4 and weights atol 1e-4 in float32;
allow_mix_precision runs the convolutions in float16, so there losses agree to 2e-2 and the
moving statistics to 2e-2 of their scale.
"""
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
import keras
from tensorflow.core.framework import graph_pb2

import npu_device
from graph_engine import ops
from graph_engine.compiler import model_format as mf
from graph_engine.compiler.compile import compilation_for
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.devtools import cluster_request, place
from graph_engine.compiler.pipeline import pipeline
from npu_device.explain import explain
from test_kernels_harness import C, FLOAT_TYPES, assert_float_close, random, run_kernel, to_f32

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
PASS = "fuse_batch_norm_training"


def stat_shape(shape, axis, keep=True):
    axis %= len(shape)
    return tuple(d if a == axis else 1 for a, d in enumerate(shape)) if keep else (shape[axis],)


def tf_moments(x, axis):
    axes = [a for a in range(x.ndim) if a != axis % x.ndim]
    with tf.device(CPU):
        mean, var = tf.nn.moments(tf.constant(x), axes, keepdims=True)
    return mean.numpy(), var.numpy()


def tf_grad_sums(dy, x, axis):
    axes = [a for a in range(x.ndim) if a != axis % x.ndim]
    with tf.device(CPU):
        dy, x = tf.constant(dy), tf.constant(x)
        return (tf.reduce_sum(dy, axes, keepdims=True).numpy(),
                tf.reduce_sum(dy * x, axes, keepdims=True).numpy())


# ---- kernels -----------------------------------------------------------------------------------

SHAPES = [((4, 6, 5, 7), -1),          # NHWC, fewer channels than a vector
          ((2, 9, 9, 32), 3),          # several row segments, 8-wide channel blocks
          ((3, 300), -1),              # Dense + BN: two channel blocks (256 + 44)
          ((16, 64, 3), -1),           # 1024 rows of 3 channels: many segments
          ((3, 6, 5, 4), 1),           # NCHW: runs of H*W per channel
          ((2, 3, 4100), 1)]           # NCW: a run longer than one segment


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis", SHAPES, ids=[f"{s}-axis{a}" for s, a in SHAPES])
def test_moments_kernel_matches_tf_and_reference(shape, axis, dtype):
    # an offset of 10 standard deviations: a one-pass E[x^2] - E[x]^2 would lose digits here
    x = random(shape, dtype, low=9.0, high=11.0, seed=1)
    mean, var = run_kernel("NpuMoments", [x], [(dtype, stat_shape(shape, axis))] * 2,
                           {"axis": axis, "keep_dims": True})
    want_mean, want_var = tf_moments(to_f32(x), axis)
    assert_float_close(mean, want_mean, dtype)
    assert_float_close(var, want_var, dtype)
    ref = ops.evaluate(ops.get("NpuMoments"), [x], {"axis": axis, "keep_dims": True}, [1, 1])
    np.testing.assert_allclose(ref[0], want_mean, rtol=1e-5)   # TF's float32 sums
    np.testing.assert_allclose(ref[1], want_var, rtol=1e-4)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis", SHAPES, ids=[f"{s}-axis{a}" for s, a in SHAPES])
def test_grad_sums_kernel_matches_tf_and_reference(shape, axis, dtype):
    dy, x = random(shape, dtype, seed=2), random(shape, dtype, low=-1.0, high=3.0, seed=3)
    got = run_kernel("NpuBatchNormGradSums", [dy, x], [(dtype, stat_shape(shape, axis))] * 2,
                     {"axis": axis, "keep_dims": True})
    want = tf_grad_sums(to_f32(dy), to_f32(x), axis)
    for g, w in zip(got, want):
        assert_float_close(g, w, dtype, grad=True)
    ref = ops.evaluate(ops.get("NpuBatchNormGradSums"), [dy, x], {"axis": axis}, [1, 1])
    for r, w in zip(ref, want):
        assert_float_close(r, w, np.float32, grad=True)


def test_stats_kernels_edge_cases():
    # keep_dims false: [C]
    x = random((5, 4, 8), seed=4)
    mean, var = run_kernel("NpuMoments", [x], [(np.float32, (8,))] * 2, {"axis": -1, "keep_dims": False})
    want = tf_moments(x, -1)
    assert_float_close(mean, want[0].reshape(-1), np.float32)
    assert_float_close(var, want[1].reshape(-1), np.float32)
    # an empty batch: NaN moments and zero sums, as TF's Mean and Sum
    empty = np.zeros((0, 3, 3, 4), np.float32)
    mean, var = run_kernel("NpuMoments", [empty], [(np.float32, (1, 1, 1, 4))] * 2, {"axis": -1})
    want = tf_moments(empty, -1)
    assert np.isnan(mean).all() and np.isnan(var).all() and np.isnan(want[0]).all()
    sums = run_kernel("NpuBatchNormGradSums", [empty, empty], [(np.float32, (1, 1, 1, 4))] * 2, {"axis": -1})
    np.testing.assert_array_equal(np.concatenate(sums), np.zeros((2, 1, 1, 4)))
    # no channels
    none = np.zeros((2, 3, 0), np.float32)
    assert [o.size for o in run_kernel("NpuMoments", [none], [(np.float32, (1, 1, 0))] * 2,
                                       {"axis": -1})] == [0, 0]
    # inf and NaN: as TF (inf mean, NaN variance; NaN stays NaN); finite channels unaffected
    x = random((4, 3, 3, 3), seed=5)
    x[1, 1, 1, 0], x[2, 0, 1, 1] = np.inf, np.nan
    mean, var = run_kernel("NpuMoments", [x], [(np.float32, (1, 1, 1, 3))] * 2, {"axis": -1})
    want_mean, want_var = tf_moments(x, -1)
    np.testing.assert_array_equal(np.isnan(mean), np.isnan(want_mean))
    np.testing.assert_array_equal(np.isnan(var), np.isnan(want_var))
    assert mean[0, 0, 0, 0] == want_mean[0, 0, 0, 0] == np.inf
    assert_float_close(mean[..., 2], want_mean[..., 2], np.float32)
    assert_float_close(var[..., 2], want_var[..., 2], np.float32)


def test_stats_kernels_reject_what_they_do_not_compute():
    x = random((2, 3, 4), seed=6)
    with pytest.raises(Exception, match="keep_dims false needs the channel axis last"):
        run_kernel("NpuMoments", [x], [(np.float32, (3,))] * 2, {"axis": 1, "keep_dims": False})
    with pytest.raises(Exception, match="output 0"):
        run_kernel("NpuMoments", [x], [(np.float32, (1, 1, 3))] * 2, {"axis": -1})
    with pytest.raises(Exception, match="x"):
        run_kernel("NpuBatchNormGradSums", [x, x[:1]], [(np.float32, (1, 1, 4))] * 2, {"axis": -1})
    with pytest.raises(Exception, match="does not support"):
        run_kernel("NpuMoments", [x.astype(np.int32)], [(np.int32, (1, 1, 4))] * 2, {"axis": -1})
    with pytest.raises(ValueError, match="one shape"):
        ops.get("NpuBatchNormGradSums").shapes([(2, 3), (3, 2)], {"axis": -1})


@pytest.mark.parametrize("seed", range(12))
def test_stats_kernels_random_geometries(seed):
    """Random shapes, channel axes and value scales (a small fuzz of the two kernels and the
    kernel factory; tools/fuzz models mutates compiled models with them)."""
    rng = np.random.default_rng(100 + seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(0 if seed % 5 == 0 else 1, 12, rank))
    axis = int(rng.integers(-rank, rank))
    dtype = FLOAT_TYPES[seed % 3]
    scale, offset = 10.0 ** rng.uniform(-3, 3), rng.uniform(-100, 100)
    x = (rng.standard_normal(shape) * scale + offset).astype(np.float32).astype(dtype)
    dy = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    out = [(dtype, stat_shape(shape, axis))] * 2
    mean, var = run_kernel("NpuMoments", [x], out, {"axis": axis})
    sums = run_kernel("NpuBatchNormGradSums", [dy, x], out, {"axis": axis})
    xf, dyf = to_f32(x).astype(np.float64), to_f32(dy).astype(np.float64)
    axes = tuple(a for a in range(rank) if a != axis % rank)
    with np.errstate(all="ignore"):
        n = np.prod([shape[a] for a in axes])
        want_mean = xf.sum(axes, keepdims=True) / n
        want_var = np.square(xf - want_mean).sum(axes, keepdims=True) / n
    if n == 0:
        assert np.isnan(to_f32(mean)).all() and np.isnan(to_f32(var)).all()
        assert not np.concatenate([to_f32(s).reshape(-1) for s in sums]).any()
        return
    eps = float(ml_dtypes.finfo(dtype).eps) + 1e-5       # storage rounding + float32 sums
    np.testing.assert_allclose(to_f32(mean), want_mean, rtol=eps, atol=1e-6 * scale)
    np.testing.assert_allclose(to_f32(var), want_var, rtol=2 * eps, atol=1e-6 * scale ** 2)
    bound = np.abs(dyf).sum(axes, keepdims=True), np.abs(dyf * xf).sum(axes, keepdims=True)
    for got, want, b in zip(sums, (dyf.sum(axes, keepdims=True), (dyf * xf).sum(axes, keepdims=True)), bound):
        assert (np.abs(to_f32(got) - want) <= eps * np.abs(want) + 1e-6 * b + 1e-30).all()


# ---- the pass ----------------------------------------------------------------------------------

def conv_bn(channels_first=False, dense=False):
    """A step through Conv2D (or Dense) -> BatchNormalization -> ReLU with the loss's gradients
    for the input and every variable; returns (step, example input). No bias before the batch
    norm (as Keras models have it): its gradient would be zero plus rounding noise."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if dense:
        layer, x = keras.layers.Dense(12, use_bias=False), rng.normal(size=(6, 5))
        bn = keras.layers.BatchNormalization()
    elif channels_first:
        layer = keras.layers.Conv2D(8, 3, padding="same", use_bias=False,
                                    data_format="channels_first")
        x, bn = rng.normal(size=(3, 3, 6, 6)), keras.layers.BatchNormalization(axis=1)
    else:
        layer = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)
        x = rng.normal(size=(3, 6, 6, 3))
        bn = keras.layers.BatchNormalization()
    x = x.astype(np.float32)
    layer.build(x.shape)
    bn.build(layer.compute_output_shape(x.shape))
    bn.gamma.assign(rng.uniform(0.5, 1.5, bn.gamma.shape))
    bn.beta.assign(rng.uniform(-1, 1, bn.beta.shape))
    variables = layer.trainable_variables + bn.trainable_variables

    def step(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            h = tf.nn.relu(bn(layer(v), training=True))
            weights = tf.reshape(tf.cast(tf.range(tf.size(h)) % 7, h.dtype), tf.shape(h))
            loss = tf.reduce_sum(h * h * weights)
        return [loss] + tape.gradient(loss, [v] + variables)
    return step, x


def traced_cluster(fn, x):
    """(the NpuGraphOp request of tf.function `fn` on `x`, its input arrays (variables read
    now), [cluster output per fetch]); `fn` must form one cluster."""
    cf = tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, x.dtype))
    fetches = [t.op.name for t in cf.outputs]
    gd = graph_pb2.GraphDef.FromString(partition_graph(place(cf.graph.as_graph_def(),
                                                             fetches=fetches).SerializeToString()))
    (node,) = [n for n in gd.node if n.op == "NpuGraphOp"]
    handles = {internal.op.name: external for external, internal in cf.graph.captures}
    inputs = []
    for ref in node.input:
        ref = ref if ":" in ref else ref + ":0"
        op = cf.graph.get_tensor_by_name(ref).op
        if op.type == "Placeholder":
            inputs.append(x)
        else:                       # a variable's value, read outside the cluster
            assert op.type == "ReadVariableOp", ref
            inputs.append(tf.raw_ops.ReadVariableOp(resource=handles[op.inputs[0].op.name],
                                                    dtype=op.get_attr("dtype")).numpy())
    by_name = {n.name: n for n in gd.node}
    routes = [int((by_name[f].input[0].split(":") + ["0"])[1]) for f in fetches]
    return cluster_request(node, inputs), inputs, routes


def compile_step(step, x, options=None):
    """The step's single cluster compiled with and without the pass, run natively:
    (compilation with the pass, outputs with, outputs without)."""
    request, inputs, _ = traced_cluster(step, x)
    request = request.SerializeToString()
    results = []
    for off in (False, True):
        c = compilation_for(request)
        c.options = {**c.options, **(options or {}),
                     **({"fusion_switch_file": {PASS: "off"}} if off else {})}
        c = pipeline().run(c)
        results.append(C.load_model(mf.serialize(c.model)).run(inputs))
        if not off:
            on = c
    return on, results[0], results[1]


def pass_stats(c):
    return next(e["stats"] for e in c.log if e["pass"] == PASS)


def kernels(c):
    return [k.kernel for k in c.program.kernels]


def assert_outputs_close(a, b, rtol=1e-4):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=0, atol=rtol * max(float(np.abs(y).max()), 1e-30))


@pytest.mark.parametrize("kind", ["nhwc", "nchw", "dense"])
def test_training_batch_norm_fuses_and_matches_the_unfused_step(kind):
    step, x = conv_bn(channels_first=kind == "nchw", dense=kind == "dense")
    c, on, off = compile_step(step, x)
    assert pass_stats(c) == {"moments": 1, "grad_sums": 1, "tiles_removed": 2}, pass_stats(c)
    ks = kernels(c)
    assert ks.count("NpuMoments") == 1 and ks.count("NpuBatchNormGradSums") == 1, ks
    assert not {"Mean", "SquaredDifference", "Tile"} & set(ks), ks
    # the moments' gradient is one elementwise kernel: no [N,H,W,C] value of the Tiles' left
    assert_outputs_close(on, off)


def test_step_matches_tensorflow_on_cpu():
    step, x = conv_bn()
    c, on, _ = compile_step(step, x)
    routes = traced_cluster(step, x)[2]
    with tf.device(CPU):
        want = [t.numpy() for t in step(tf.constant(x))]
    assert_outputs_close([on[i] for i in routes], want)


def test_inner_values_read_elsewhere_keep_the_primitive_ops():
    """The squared differences or the product dy*x read by anything else: not fused."""
    x = np.random.default_rng(1).normal(size=(4, 3, 3, 5)).astype(np.float32)

    def moments_and_squares(v):
        mean = tf.reduce_mean(v, [0, 1, 2], keepdims=True)
        sq = tf.math.squared_difference(v, mean)
        return mean, tf.reduce_mean(sq, [0, 1, 2], keepdims=True), sq

    def sums_and_product(v):
        dy = tf.sin(v)
        p = v * dy
        return tf.reduce_sum(dy, [0, 1, 2], keepdims=True), tf.reduce_sum(p, [0, 1, 2], keepdims=True), p

    def other_axes(v):           # over H and W only: not every axis but one
        mean = tf.reduce_mean(v, [1, 2], keepdims=True)
        return tf.reduce_mean(tf.math.squared_difference(v, mean), [1, 2], keepdims=True)

    for fn in (moments_and_squares, sums_and_product, other_axes):
        c, on, off = compile_step(fn, x)
        assert pass_stats(c) == {"moments": 0, "grad_sums": 0, "tiles_removed": 0}, fn.__name__
        assert_outputs_close(on, off, rtol=0)


def test_plain_moments_and_sums_fuse_outside_keras():
    x = np.random.default_rng(2).normal(3.0, 2.0, size=(8, 10)).astype(np.float32)

    def fn(v):
        mean, var = tf.nn.moments(v, [0])
        dy = tf.cos(v)
        return mean, var, tf.reduce_sum(dy, 0), tf.reduce_sum(dy * v, 0)

    c, on, off = compile_step(fn, x)
    assert pass_stats(c) == {"moments": 1, "grad_sums": 1, "tiles_removed": 0}
    assert_outputs_close(on, off, rtol=1e-5)


def test_mixed_precision_step_still_fuses_and_matches():
    step, x = conv_bn()
    c, on, off = compile_step(step, x, {"precision": "allow_mix_precision_fp16"})
    assert "NpuMoments" in kernels(c), kernels(c)
    assert_outputs_close(on, off, rtol=1e-3)


# ---- Keras training, NPU against CPU -----------------------------------------------------------

def bn_model():
    L = keras.layers
    return keras.Sequential([
        keras.Input((12, 12, 3)),
        L.Conv2D(8, 3, padding="same", use_bias=False), L.BatchNormalization(), L.ReLU(),
        L.DepthwiseConv2D(3, strides=2, padding="same"), L.BatchNormalization(), L.ReLU(6.0),
        L.Conv2D(16, 1), L.BatchNormalization(),
        L.GlobalAveragePooling2D(), L.Dense(10), L.BatchNormalization(), L.Dense(4)])


def fit(device, x, y, batch_size):
    keras.utils.set_random_seed(0)
    with tf.device(device):
        model = bn_model()
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=batch_size, epochs=2, shuffle=False, verbose=0)
    return history.history["loss"], model.get_weights()


def data(n=20):
    rng = np.random.default_rng(3)
    return rng.normal(size=(n, 12, 12, 3)).astype(np.float32), rng.integers(0, 4, n).astype(np.int32)


def fused_kernels_of_a_step(x, y):
    """The kernels compiled for one train step of bn_model on the NPU."""
    keras.utils.set_random_seed(0)
    with tf.device(NPU):
        model = bn_model()
        opt = keras.optimizers.SGD(0.05)
        opt.build(model.trainable_variables)

        def step(a, b):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                    b, model(a, training=True), from_logits=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))
            return loss
        report = explain(step, x, y)
    return [k for g in report.graphs for ms in g.models.values() for m in ms for k in m.kernels]


@pytest.mark.timeout(600)
def test_keras_fit_float32_partial_last_batch_matches_cpu():
    x, y = data(20)            # batches of 8, 8 and 4: the last one compiles its own shapes
    loss_cpu, w_cpu = fit(CPU, x, y, 8)
    loss_npu, w_npu = fit(NPU, x, y, 8)
    np.testing.assert_allclose(loss_npu, loss_cpu, rtol=1e-4)
    for a, b in zip(w_npu, w_cpu):   # kernels, gammas/betas and the moving statistics
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    ks = fused_kernels_of_a_step(x[:8], y[:8])
    assert ks.count("NpuMoments") == 4 and ks.count("NpuBatchNormGradSums") == 4, ks
    # one Tile left: GlobalAveragePooling2D's gradient (a Mean over H, W; not a batch norm's)
    assert ks.count("Tile") == 1 and "SquaredDifference" not in ks, ks


@pytest.mark.timeout(600)
def test_keras_fit_allow_mix_precision_matches_cpu():
    x, y = data(16)
    loss_cpu, w_cpu = fit(CPU, x, y, 8)
    npu_device.set_npu_config(precision_mode="allow_mix_precision")
    try:
        loss_npu, w_npu = fit(NPU, x, y, 8)
        ks = fused_kernels_of_a_step(x[:8], y[:8])
    finally:
        npu_device.set_npu_config(precision_mode=None)
    np.testing.assert_allclose(loss_npu, loss_cpu, rtol=2e-2)
    for a, b in zip(w_npu, w_cpu):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-2 * max(float(np.abs(b).max()), 1.0))
    assert ks.count("NpuMoments") == 4 and ks.count("NpuBatchNormGradSums") == 4, ks
