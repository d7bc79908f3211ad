"""The pattern-fusion passes (graph_engine/compiler/passes/fusion/) on graphs traced from
tf.functions and Keras layers: what each matches, what it must leave alone, and results equal
with fusion on and off (compiled clusters run on the native executor)."""
import numpy as np
import pytest
import tensorflow as tf
import keras
from tensorflow.core.framework import graph_pb2
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from graph_engine.compiler import model_format
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.compile import compilation_for
from graph_engine.compiler.pipeline import PassManager
from graph_engine.compiler.pipeline import PASSES, REQUIRED
from graph_engine.compiler.devtools import cluster_request, place
from test_kernels_harness import C

FUSION_PASSES = {"fuse_gelu", "fuse_layer_norm", "fuse_softmax", "fold_batch_norm",
                 "fuse_contraction_epilogue", "fuse_activation_grad_bias_add_grad"}
EPILOGUE_OPS = {"BiasAdd", "Relu", "Relu6", "Elu", "LeakyRelu", "Sigmoid", "Tanh", "NpuGelu"}


def pipeline(fusion=True, upto=None):
    """The compile pipeline with or without the fusion passes. `upto`: stop after the first
    pass of that name; "pre_fusion": stop before the pattern fusions (the graph they see)."""
    passes = [p for p in PASSES if fusion or p[0] not in FUSION_PASSES]
    names = [p[0] for p in passes]
    if upto == "pre_fusion":
        passes = passes[:min(names.index(n) for n in FUSION_PASSES | {"fuse_elementwise"}
                             if n in names)]
    elif upto:
        passes = passes[:names.index(upto) + 1]
    return PassManager(passes, REQUIRED)


def cluster(fn, *arrays, frozen=True):
    """(NpuGraphOp request, its input arrays) of the single cluster of tf.function `fn` on
    `arrays`; `frozen` turns variables into constants (an inference/serving graph)."""
    cf = tf.function(fn).get_concrete_function(*[tf.TensorSpec(a.shape, a.dtype) for a in arrays])
    if frozen:
        cf = convert_variables_to_constants_v2(cf)
    fetches = [t.op.name for t in cf.outputs]
    gd = graph_pb2.GraphDef.FromString(partition_graph(place(cf.graph.as_graph_def(),
                                                             fetches=fetches).SerializeToString()))
    clusters = [n for n in gd.node if n.op == "NpuGraphOp"]
    assert len(clusters) == 1, [n.name for n in clusters]
    feeds = dict(zip([t.op.name + ":0" for t in cf.inputs], arrays))
    handles = {internal.op.name: external for external, internal in cf.graph.captures}
    inputs = []
    for ref in clusters[0].input:
        if ref.startswith("^"):
            continue
        ref = ref if ":" in ref else ref + ":0"
        if ref not in feeds:        # a variable's value, read outside the cluster
            op = cf.graph.get_tensor_by_name(ref).op
            assert op.type == "ReadVariableOp", ref
            feeds[ref] = tf.raw_ops.ReadVariableOp(resource=handles[op.inputs[0].op.name],
                                                   dtype=op.get_attr("dtype")).numpy()
        inputs.append(feeds[ref])
    return cluster_request(clusters[0], inputs), inputs


def compile_cluster(request, fusion=True, upto=None):
    return pipeline(fusion, upto).run(compilation_for(request.SerializeToString(), {}))


def ops_of(c):
    """The compiled graph's computing ops (layout conversions aside)."""
    return sorted(n.op for n in c.graph if n.op not in ("Const", "_Arg", "_Retval", "TransData"))


def stats(c, name):
    return next(e.get("stats", {}) for e in c.log if e["pass"] == name)


def run_both(fn, *arrays, frozen=True):
    """Compiled with fusion on and off, run on the native executor: (on, off, compilation on)."""
    req, inputs = cluster(fn, *arrays, frozen=frozen)
    results = []
    for fusion in (True, False):
        c = compile_cluster(req, fusion)
        results.append(C.load_model(model_format.serialize(c.model)).run(inputs))
        if fusion:
            on = c
    return results[0], results[1], on


def assert_no_standalone_epilogue(c):
    """No BiasAdd/activation left reading a contraction's output (the issue's target)."""
    for n in c.graph:
        if n.op in EPILOGUE_OPS:
            assert n.inputs[0].node.op not in ("Conv2D", "DepthwiseConv2dNative", "MatMul",
                                               "BatchMatMulV2"), n


# ---- contraction + epilogue ------------------------------------------------------------------

@pytest.mark.parametrize("act", ["relu", "relu6", "elu", "sigmoid", "tanh", "gelu", "swish",
                                 "silu", "leaky_relu"])
def test_dense_activation_fuses_into_matmul(act):
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(6, activation=act)
    x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    layer.build(x.shape)
    on, off, c = run_both(lambda v: layer(v), x)
    assert ops_of(c) == ["NpuFusedMatMul"], ops_of(c)
    np.testing.assert_allclose(on[0], off[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(on[0], np.asarray(layer(x)), rtol=1e-5, atol=1e-5)


def test_conv_bias_residual_relu_is_one_kernel():
    w = np.random.default_rng(1).normal(size=(3, 3, 4, 4)).astype(np.float32)
    b = np.arange(4, dtype=np.float32)

    def block(x):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b) + x)
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 4)).astype(np.float32)
    on, off, c = run_both(block, x)
    assert ops_of(c) == ["NpuFusedConv2D"]
    fused = next(n for n in c.graph if n.op == "NpuFusedConv2D")
    assert fused.python_attrs()["has_residual"] and fused.python_attrs()["activation"] == "Relu"
    np.testing.assert_allclose(on[0], off[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(on[0], block(x).numpy(), rtol=1e-5, atol=1e-5)


def test_recurrent_cell_sum_then_bias_is_one_kernel():
    """Keras' RNN cells compute x @ W + h @ U, then add the bias: the bias follows the
    residual (the other product) and still joins the epilogue."""
    rng = np.random.default_rng(2)
    w, u = (rng.normal(size=s).astype(np.float32) for s in ((5, 8), (3, 8)))
    b = rng.normal(size=8).astype(np.float32)

    def cell(x, h):
        return tf.sigmoid(tf.nn.bias_add(tf.matmul(x, w) + tf.matmul(h, u), b))
    x, h = rng.normal(size=(4, 5)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    on, off, c = run_both(cell, x, h)
    assert sorted(ops_of(c)) == ["MatMul", "NpuFusedMatMul"], ops_of(c)
    attrs = next(n for n in c.graph if n.op == "NpuFusedMatMul").python_attrs()
    assert attrs["has_bias"] and attrs["has_residual"] and attrs["activation"] == "Sigmoid"
    np.testing.assert_allclose(on[0], off[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(on[0], cell(x, h).numpy(), rtol=1e-5, atol=1e-6)


def test_pre_activation_with_a_second_consumer_is_kept():
    """The BiasAdd output also feeds an output: bias still fuses (it is the value the
    consumer reads), the Relu stays a node of its own."""
    w = np.ones((5, 3), np.float32)
    b = np.ones(3, np.float32)

    def fn(x):
        pre = tf.nn.bias_add(tf.matmul(x, w), b)
        return tf.nn.relu(pre), pre * 2.0
    x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    on, off, c = run_both(fn, x)
    fused = next(n for n in c.graph if n.op == "NpuFusedMatMul")
    assert fused.python_attrs()["activation"] == "" and fused.python_attrs()["has_bias"]
    for a, b_ in zip(on, off):
        np.testing.assert_allclose(a, b_, rtol=1e-6)
    # and the MatMul output itself read twice: nothing fuses into it
    c2 = compile_cluster(cluster(lambda x: (tf.nn.relu(tf.matmul(x, w)), tf.matmul(x, w) + 1.0),
                                 x)[0], upto="fuse_contraction_epilogue")
    assert "Relu" in ops_of(c2) and stats(c2, "fuse_contraction_epilogue")["fused"] <= 1


def test_mixed_dtypes_end_the_chain():
    w = np.ones((5, 3), np.float32)

    def fn(x):
        return tf.nn.relu(tf.cast(tf.matmul(x, w), tf.float16))
    x = np.ones((2, 5), np.float32)
    c = compile_cluster(cluster(fn, x)[0], upto="fuse_contraction_epilogue")
    assert stats(c, "fuse_contraction_epilogue") == {"fused": 0}


# ---- batch-norm folding ------------------------------------------------------------------------

def cnn():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(4, 3, use_bias=False), keras.layers.BatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.DepthwiseConv2D(3, padding="same"), keras.layers.BatchNormalization(),
        keras.layers.ReLU(6.0),
        keras.layers.Flatten(), keras.layers.Dense(5), keras.layers.BatchNormalization()])
    rng = np.random.default_rng(0)
    for layer in m.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for v in (layer.moving_mean, layer.moving_variance, layer.gamma, layer.beta):
                v.assign(rng.uniform(0.5, 1.5, v.shape))
    return m


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "variables"])
def test_conv_bn_relu_inference_folds(frozen):
    m = cnn()
    x = np.random.default_rng(1).normal(size=(2, 8, 8, 3)).astype(np.float32)
    on, off, c = run_both(lambda v: m(v, training=False), x, frozen=frozen)
    assert stats(c, "fold_batch_norm") == {"folded": 3}
    assert {"NpuFusedConv2D", "NpuFusedDepthwiseConv2D", "NpuFusedMatMul"} <= set(ops_of(c))
    assert_no_standalone_epilogue(c)
    if frozen:   # folded weights are constants: no per-step weight arithmetic
        assert not {"Mul", "AddV2", "Rsqrt"} & set(ops_of(c)), ops_of(c)
    want = np.asarray(m(x, training=False))
    np.testing.assert_allclose(on[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(on[0], off[0], rtol=1e-4, atol=1e-5)


def test_training_batch_norm_is_not_folded():
    m = cnn()
    x = np.random.default_rng(1).normal(size=(2, 8, 8, 3)).astype(np.float32)
    req, _ = cluster(lambda v: m(v, training=True), x, frozen=False)
    c = compile_cluster(req, upto="fuse_contraction_epilogue")
    assert stats(c, "fold_batch_norm") == {"folded": 0}


# ---- Gelu, LayerNorm, Softmax ------------------------------------------------------------------

@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("source", ["keras", "tf"])
def test_gelu_subgraph(approximate, source):
    fn = (lambda v: keras.activations.gelu(v, approximate=approximate)) if source == "keras" \
        else (lambda v: tf.nn.gelu(v, approximate=approximate))
    x = np.linspace(-4, 4, 24, dtype=np.float32).reshape(3, 8)
    on, off, c = run_both(fn, x)
    assert ops_of(c) == ["NpuGelu"]
    assert next(n for n in c.graph if n.op == "NpuGelu").attr("approximate") == approximate
    np.testing.assert_allclose(on[0], off[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, tf.bfloat16.as_numpy_dtype], ids=["f16", "bf16"])
def test_gelu_in_narrow_types_is_matched(dtype):
    """Gelu's constants are rounded to the storage type; the pattern still matches."""
    x = np.linspace(-4, 4, 24).reshape(3, 8).astype(dtype)
    on, off, c = run_both(lambda v: tf.nn.gelu(v, approximate=True), x)
    assert ops_of(c) == ["NpuGelu"]
    eps = float(np.finfo(np.float16).eps) if dtype == np.float16 else 2 ** -7
    np.testing.assert_allclose(on[0].astype(np.float32), off[0].astype(np.float32), rtol=4 * eps,
                               atol=4 * eps)


def test_gelu_with_a_shared_inner_value_is_not_matched():
    def fn(x):
        half = 0.5 * x
        return half * tf.math.erfc(-x * 0.7071067811865476), half
    c = compile_cluster(cluster(fn, np.ones((2, 3), np.float32))[0], upto="fuse_gelu")
    assert stats(c, "fuse_gelu") == {"fused": 0}


def transformer_block(dim=16):
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, dim))
    h = keras.layers.LayerNormalization()(inp)
    h = keras.layers.Dense(32, activation="gelu")(h)
    h = keras.layers.Dense(dim)(h)
    out = keras.layers.LayerNormalization()(keras.layers.Add()([inp, h]))
    att = keras.layers.Softmax()(keras.layers.Dense(6)(out))
    return keras.Model(inp, [out, att])


def test_transformer_block_fuses_and_matches():
    m = transformer_block()
    for layer in m.layers:
        if isinstance(layer, keras.layers.LayerNormalization):
            layer.gamma.assign(np.random.default_rng(2).uniform(0.5, 1.5, layer.gamma.shape))
            layer.beta.assign(np.random.default_rng(3).normal(size=layer.beta.shape))
    x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
    on, off, c = run_both(lambda v: m(v), x)
    assert stats(c, "fuse_layer_norm") == {"fused": 2}
    assert "NpuFusedBatchMatMul" in ops_of(c) or "NpuFusedMatMul" in ops_of(c)
    assert_no_standalone_epilogue(c)
    want = [np.asarray(t) for t in m(x)]
    for a, b, w in zip(on, off, want):
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_training_layer_norm_fuses_with_its_statistics():
    """The gradient reads mean, -mean, rsqrt and the scale: the fused kernel also outputs mean
    and rsqrt, and every gradient matches the unfused graph."""
    layer = keras.layers.LayerNormalization()
    layer.build((4, 8))
    layer.gamma.assign(np.linspace(0.5, 1.5, 8))
    layer.beta.assign(np.linspace(-1, 1, 8))

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(layer(x) ** 2 * tf.range(8, dtype=tf.float32))
        return [y] + tape.gradient(y, [x] + layer.trainable_variables)
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    on, off, c = run_both(step, x, frozen=False)
    ln = next(n for n in c.graph if n.op == "NpuLayerNorm")
    assert ln.attr("with_stats") and "SquaredDifference" not in ops_of(c)
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_layer_norm_with_an_inner_value_read_elsewhere_is_kept():
    gamma, beta = np.linspace(0.5, 1.5, 8, dtype=np.float32), np.ones(8, np.float32)

    def layer_norm(x, also_variance):
        mean = tf.reduce_mean(x, -1, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), -1, keepdims=True)
        scale = tf.math.rsqrt(var + 1e-3) * gamma
        y = x * scale + (-mean * scale + beta)
        return (y, var * 2.0) if also_variance else y
    x = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
    on, off, c = run_both(lambda v: layer_norm(v, False), x)
    assert ops_of(c) == ["NpuLayerNorm"]
    np.testing.assert_allclose(on[0], off[0], rtol=1e-5, atol=1e-5)
    c = compile_cluster(cluster(lambda v: layer_norm(v, True), x)[0], upto="fuse_layer_norm")
    assert stats(c, "fuse_layer_norm") == {"fused": 0}


def test_hand_written_softmax_becomes_softmax():
    def fn(x):
        e = tf.exp(x - tf.reduce_max(x, -1, keepdims=True))
        return e / tf.reduce_sum(e, -1, keepdims=True)
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32) * 10
    on, off, c = run_both(fn, x)
    assert ops_of(c) == ["Softmax"]
    np.testing.assert_allclose(on[0], tf.nn.softmax(x).numpy(), rtol=1e-5, atol=1e-7)

    def over_axis0(x):
        e = tf.exp(x - tf.reduce_max(x, 0, keepdims=True))
        return e / tf.reduce_sum(e, 0, keepdims=True)
    c = compile_cluster(cluster(over_axis0, x)[0], upto="fuse_softmax")
    assert stats(c, "fuse_softmax") == {"fused": 0}


# ---- training fusions --------------------------------------------------------------------------

def test_relu_grad_and_bias_add_grad_fuse_in_a_train_step():
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(6, activation="relu")
    layer.build((4, 5))
    head = tf.constant(np.random.default_rng(0).normal(size=(6, 1)).astype(np.float32))

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(layer(x), head))
        return tape.gradient(loss, layer.trainable_variables)
    x = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    on, off, c = run_both(step, x, frozen=False)
    assert stats(c, "fuse_activation_grad_bias_add_grad") == {"fused": 1}
    assert "ReluGrad" not in ops_of(c) and "BiasAddGrad" not in ops_of(c)
    # the forward relu still fused with its bias: ReluGrad reads the relu's output only
    assert any(n.op == "NpuFusedMatMul" and n.attr("activation") == "Relu" for n in c.graph)
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
