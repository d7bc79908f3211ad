"""Elementwise chain fusion (passes/fuse_elementwise.py) and its NpuElementwise kernel: which
chains fuse (and which must not), the C++ kernel against the numpy reference (broadcasting,
float16/bfloat16, bool), compiled graphs giving the same bits with the pass on and off on the
native runtime, and a Keras fit with Adam giving the same losses and weights either way."""
import json
import sys

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from graph_engine import ops
from graph_engine.compiler import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.compile import compilation_for
from graph_engine.compiler.pipeline import pipeline
from graph_engine.compiler.testing import cluster_request, place
from graph_engine.ops.fused_elementwise import ARITY
from tensorflow.core.framework import graph_pb2

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from conftest import run_python  # noqa: E402
from test_kernels_harness import C, run_kernel  # noqa: E402

OFF = {"fusion_switch_file": {"fuse_elementwise": "off"}}
R = np.random.default_rng(5)


def compile_both(fn, args):
    """(inputs, routes, {"on": Compilation, "off": Compilation}) for fn's single cluster."""
    cf = tf.function(fn).get_concrete_function(*[tf.TensorSpec(a.shape, a.dtype) for a in args])
    fetches = [t.op.name for t in cf.outputs]
    gd = place(cf.graph.as_graph_def(), fetches=fetches)
    out = graph_pb2.GraphDef.FromString(partition_graph(gd.SerializeToString()))
    (cluster,) = [n for n in out.node if n.op == "NpuGraphOp"]
    placeholders = [n.name for n in gd.node if n.op == "Placeholder"]
    inputs = [args[placeholders.index(ref)] for ref in cluster.input]
    by_name = {n.name: n for n in out.node}
    routes = [int(r.split(":")[1]) if ":" in r else 0
              for r in (by_name[f].input[0] for f in fetches)]
    request = cluster_request(cluster, inputs).SerializeToString()
    runs = {}
    for name, opts in (("on", {}), ("off", OFF)):
        c = compilation_for(request)
        c.options = {**c.options, **opts}       # the request carries its options: extend them
        runs[name] = pipeline().run(c)
    return inputs, routes, runs


def native(c, inputs):
    return C.load_model(mf.serialize(c.model)).run(inputs)


def kernels(c):
    return [k.kernel for k in c.program.kernels]


def assert_within_ulp(actual, expected, dtype, ulps=1):
    actual, expected = np.asarray(actual), np.asarray(expected)
    if dtype == np.bool_:
        np.testing.assert_array_equal(actual, expected)
        return
    a, e = actual.astype(np.float32), expected.astype(np.float32)
    eps = float(ml_dtypes.finfo(dtype).eps)
    tiny = float(ml_dtypes.finfo(dtype).tiny)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    close = np.abs(a - e) <= ulps * eps * np.maximum(np.abs(e), tiny)
    assert (same | close).all(), (a[~(same | close)][:5], e[~(same | close)][:5])


# --- which chains fuse ----------------------------------------------------------------------

def test_optimizer_update_is_one_kernel_with_its_results_as_outputs():
    w, g, m, v = (R.standard_normal((16, 8)).astype(np.float32) for _ in range(4))
    v = np.abs(v)

    def adam(w, g, m, v):
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * tf.square(g)
        return w - 0.01 * m2 / (tf.sqrt(v2) + 1e-7), m2, v2

    inputs, routes, runs = compile_both(adam, [w, g, m, v])
    assert kernels(runs["on"]) == ["NpuElementwise"]
    assert len(kernels(runs["off"])) >= 10
    k = runs["on"].program.kernels[0]
    assert len(k.outputs) == 3 and len(k.attrs["constants"]) >= 6   # scalars are immediates
    on, off = native(runs["on"], inputs), native(runs["off"], inputs)
    for a, b in zip(on, off):
        assert_within_ulp(a, b, np.float32)


def test_keras_style_updates_fuse_per_shape_with_a_shared_scalar_chain():
    # Keras computes alpha = lr * sqrt(1 - b2^t) / (1 - b1^t) per variable, then each
    # variable's update: one fused kernel per chain, none left over.
    t = np.float32(3.0)
    shapes = [(16, 8), (8,), (4, 4, 2)]
    args = [t] + [R.standard_normal(s).astype(np.float32) for s in shapes for _ in range(3)]
    args = [np.abs(a) if i % 3 == 0 and i else a for i, a in enumerate(args)]

    def step(t, *vars_):
        outs = []
        for i in range(len(shapes)):
            m, v, w = vars_[3 * i: 3 * i + 3]
            alpha = 0.01 * tf.sqrt(1.0 - tf.pow(0.999, t)) / (1.0 - tf.pow(0.9, t))
            outs.append(w - m * alpha / (tf.sqrt(v) + 1e-7))
        return outs

    inputs, routes, runs = compile_both(step, args)
    assert set(kernels(runs["on"])) == {"NpuElementwise"}
    assert len(kernels(runs["on"])) <= 2 * len(shapes)
    for a, b in zip(native(runs["on"], inputs), native(runs["off"], inputs)):
        assert_within_ulp(a, b, np.float32)


def test_value_read_by_a_non_elementwise_op_becomes_an_extra_output():
    x = R.standard_normal((4, 8)).astype(np.float32)
    w = R.standard_normal((8, 8)).astype(np.float32)

    def f(x, w):
        y = tf.exp(x * 0.5)                 # read by the MatMul below and by the chain
        return tf.matmul(y, w), tf.tanh(y) - 1.0

    inputs, routes, runs = compile_both(f, [x, w])
    (fused,) = [k for k in runs["on"].program.kernels if k.kernel == "NpuElementwise"]
    assert fused.attrs["program"].split(";")[0].startswith("Mul")
    assert len(fused.outputs) == 2          # y for the MatMul, the chain's result
    on, off = native(runs["on"], inputs), native(runs["off"], inputs)
    for a, b in zip(on, off):
        assert_within_ulp(a, b, np.float32)


def test_no_fusion_through_a_path_that_leaves_the_chain():
    # y -> Sum -> z and y -> z: fusing y and z would make the fused node feed its own input.
    x = R.standard_normal((4, 8)).astype(np.float32)

    def f(x):
        y = x * 2.0
        return tf.nn.relu(y - tf.reduce_sum(y, axis=1, keepdims=True))

    inputs, routes, runs = compile_both(f, [x])
    c = runs["on"]
    order = kernels(c)
    assert "Sum" in order and order.index("Sum") > 0          # topologically valid, ran
    for k in c.program.kernels:                                # no kernel reads a later one
        produced_later = {v for k2 in c.program.kernels[c.program.kernels.index(k):] for v in k2.outputs}
        assert not set(k.inputs) & produced_later
    np.testing.assert_allclose(native(c, inputs)[routes[0]], f(tf.constant(x)).numpy(), rtol=1e-6)


def test_single_ops_and_different_shapes_stay_as_they_are():
    x = R.standard_normal((4, 8)).astype(np.float32)

    def f(x):
        s = tf.reduce_sum(x, axis=1)         # [4]
        return tf.nn.relu(x), tf.exp(s) * 2.0

    _, _, runs = compile_both(f, [x])
    on = kernels(runs["on"])
    assert "Relu" in on                       # alone: not worth a fused kernel
    assert on.count("NpuElementwise") == 1    # Exp*2 on [4]


# --- the kernel against its numpy reference ------------------------------------------------

def run_fused(xs, program, dtypes, outputs, constants=(), out_shape=None):
    attrs = {"program": program, "dtypes": [int(d) for d in dtypes], "results": list(outputs)}
    if constants:
        attrs["constants"] = [float(c) for c in constants]
    op = ops.get("NpuElementwise")
    out_shape = out_shape or np.broadcast_shapes(*[x.shape for x in xs])
    n_in = len(xs)
    out_dtypes = [dtypes[r - n_in] for r in outputs]
    got = run_kernel("NpuElementwise", xs, [(dt.numpy_dtype(t), out_shape) for t in out_dtypes], attrs)
    want = ops.evaluate(op, xs, attrs, out_dtypes)
    return got, want


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("shapes", [[(3, 5, 7)] * 3, [(3, 1, 7), (5, 1), (1,)],
                                    [(2, 3, 300), (300,), (2, 1, 1)], [(), (1000,), (1, 1000)]])
def test_kernel_matches_reference_with_broadcasting(dtype, shapes):
    rng = np.random.default_rng(len(shapes[0]))
    xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    T = dt.from_numpy(np.dtype(dtype))
    program = "Mul r0 r1;AddV2 r3 k0;Sigmoid r4;Sub r5 r2;SquaredDifference r6 r0;Maximum r7 k1"
    got, want = run_fused(xs, program, [T] * 6, [5, 8], constants=[0.25, 0.1])
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(dtype)
        if dtype == np.float32:    # Eigen's sigmoid vs numpy's differ in the last bits
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:   # every intermediate is rounded: a last-bit difference in float32 (sigmoid) can
                # flip one rounding and carry through the chain; fused vs unfused is exact below
            eps = float(ml_dtypes.finfo(dtype).eps)
            w32 = w.astype(np.float32)
            np.testing.assert_allclose(g.astype(np.float32), w32, rtol=4 * eps,
                                       atol=4 * eps * float(np.abs(w32).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_fused_graph_gives_the_unfused_bits(dtype):
    # Broadcast bias and scale, a Cast to float32 and back, float16/bfloat16 intermediates.
    x = R.standard_normal((4, 6, 10)).astype(dtype)
    b = R.standard_normal((10,)).astype(dtype)
    s = R.standard_normal((6, 1)).astype(dtype)

    def f(x, b, s):
        h = tf.nn.sigmoid(x * s + b)
        wide = tf.cast(h, tf.float32) * 3.0 - 1.0
        return tf.cast(tf.nn.relu(wide), x.dtype) * h, tf.maximum(h, tf.cast(0.5, x.dtype))

    inputs, routes, runs = compile_both(f, [x, b, s])
    assert kernels(runs["on"]) == ["NpuElementwise"]
    for a, e in zip(native(runs["on"], inputs), native(runs["off"], inputs)):
        assert_within_ulp(a, e, dtype)


def test_kernel_rounds_float16_intermediates_and_handles_bool_and_select():
    x = (R.standard_normal((64,)) * 10).astype(np.float16)
    y = R.standard_normal((64,)).astype(np.float32)
    F32, F16, B = dt.DT_FLOAT, dt.DT_HALF, dt.DT_BOOL
    # r2 = x*x (half, rounded), r3 = cast to float, r4 = r3 > y, r5 = select(r4, r3, y), r6 = not r4
    program = "Mul r0 r0;Cast r2;Greater r3 r1;SelectV2 r4 r3 r1;LogicalNot r4"
    got, want = run_fused([x, y], program, [F16, F32, B, F32, B], [2, 5, 6])
    assert [g.dtype for g in got] == [np.float16, np.float32, np.bool_]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def test_kernel_covers_activation_gradients_and_addn():
    g, y = R.standard_normal((2, 129)).astype(np.float32), R.uniform(-0.9, 0.9, (2, 129)).astype(np.float32)
    T = dt.DT_FLOAT
    program = ("ReluGrad r0 r1;SigmoidGrad r1 r0;TanhGrad r1 r0;Relu6Grad r0 r1;"
               "AddN r2 r3 r4 r5;EluGrad r6 r1;Softplus r7;Elu r0;Rsqrt k0")
    got, want = run_fused([g, y], program, [T] * 9, [6, 7, 8, 9, 10], constants=[4.0])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("attrs,message", [
    ({"program": "Frobnicate r0", "dtypes": [1], "results": [1]}, "unknown instruction 'Frobnicate'"),
    ({"program": "Add r0 r5", "dtypes": [1], "results": [1]}, "bad operand 'r5'"),
    ({"program": "Add r0 k0", "dtypes": [1], "results": [1]}, "bad operand 'k0'"),
    ({"program": "Neg r0", "dtypes": [1, 1], "results": [1]}, "one dtype per instruction"),
    ({"program": "Neg r0", "dtypes": [1], "results": [0]}, "which no instruction writes"),
])
def test_kernel_rejects_bad_programs(attrs, message):
    with pytest.raises(Exception, match=message):
        run_kernel("NpuElementwise", [np.ones(4, np.float32)], [(np.float32, (4,))], attrs)


def test_in_place_output_over_its_input_is_safe():
    # The planner lets the fused output take the dying input's bytes; the native result must
    # match the unfused one.
    x = R.standard_normal((3, 1000)).astype(np.float32)
    w = R.standard_normal((1000, 1000)).astype(np.float32) * 0.01

    def f(x, w):
        h = tf.matmul(x, w)
        return tf.matmul(tf.nn.relu(h * 2.0 + 1.0), w)

    inputs, routes, runs = compile_both(f, [x, w])
    assert runs["on"].plan.inplace >= 1
    assert_within_ulp(native(runs["on"], inputs)[0], native(runs["off"], inputs)[0], np.float32)


# --- Keras: the same training with the pass on and off -------------------------------------

KERAS_FIT = """
import json, os
import npu_device
import keras, numpy as np, tensorflow as tf
npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 12)).astype(np.float32)
y = rng.integers(0, 4, 128).astype(np.int32)
keras.utils.set_random_seed(0)
with tf.device("/device:NPU:0"):
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
from graph_engine.compiler.compile import recent_compiles
kinds = [k for r in recent_compiles() for k in r["kernels"]]
print(json.dumps({"loss": h.history["loss"], "weights": [w.tolist() for w in model.get_weights()],
                  "fused": kinds.count("NpuElementwise")}))
"""


def test_keras_adam_fit_is_unchanged_by_the_pass():
    results = {}
    for name, env in (("on", {}), ("off", {"NPU_FUSION_SWITCH_FILE": json.dumps(OFF["fusion_switch_file"])})):
        r = run_python(KERAS_FIT, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        results[name] = json.loads(r.stdout.strip().splitlines()[-1])
    assert results["on"]["fused"] > 0 and results["off"]["fused"] == 0
    np.testing.assert_allclose(results["on"]["loss"], results["off"]["loss"], rtol=1e-5)
    for a, b in zip(results["on"]["weights"], results["off"]["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


SINGLE = sorted(op for op, n in ARITY.items() if n in (1, 2) and op not in ("Cast", "BiasAdd"))
BOOL_RESULT = ("Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual")


@pytest.mark.parametrize("op", SINGLE)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_each_instruction_gives_its_own_kernels_bits(op, dtype):
    rng = np.random.default_rng(7)
    logic = op.startswith("Logical")
    xs = [rng.random((3, 70)) < 0.5 if logic else (rng.standard_normal((3, 70)) * 3).astype(dtype)
          for _ in range(ARITY[op])]
    if op in ("Log", "Sqrt", "Rsqrt", "Log1p", "Pow"):
        xs[0] = np.abs(xs[0])
    out_dtype = np.bool_ if logic or op in BOOL_RESULT else xs[0].dtype
    attrs = {"program": f"{op} " + " ".join(f"r{i}" for i in range(len(xs))),
             "dtypes": [dt.from_numpy(np.dtype(out_dtype))], "results": [len(xs)]}
    fused = run_kernel("NpuElementwise", xs, [(out_dtype, (3, 70))], attrs)[0]
    own = run_kernel(op, xs, [(out_dtype, (3, 70))])[0]
    np.testing.assert_array_equal(fused.view(np.uint8), own.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("case", ["SelectV2", "Select", "AddN", "Cast", "BiasAdd"])
def test_multi_input_and_cast_instructions_give_their_own_kernels_bits(case, dtype):
    rng = np.random.default_rng(8)
    a, b, c = ((rng.standard_normal((4, 33)) * 3).astype(dtype) for _ in range(3))
    T = dt.from_numpy(np.dtype(dtype))
    cond = rng.random((4, 33)) < 0.5
    xs, attrs, own = {
        "SelectV2": ([cond, a, b], {}, "SelectV2"),
        "Select": ([cond, a, b], {}, "Select"),
        "AddN": ([a, b, c], {"N": 3}, "AddN"),
        "Cast": ([a], {"SrcT": T, "DstT": dt.DT_FLOAT}, "Cast"),
        "BiasAdd": ([a, b[0]], {"data_format": "NHWC"}, "BiasAdd"),
    }[case]
    out_dtype = np.float32 if case == "Cast" else np.dtype(dtype)
    fused_attrs = {"program": f"{case} " + " ".join(f"r{i}" for i in range(len(xs))),
                   "dtypes": [dt.from_numpy(np.dtype(out_dtype))], "results": [len(xs)]}
    fused = run_kernel("NpuElementwise", xs, [(out_dtype, (4, 33))], fused_attrs)[0]
    want = run_kernel(own, xs, [(out_dtype, (4, 33))], attrs)[0]
    np.testing.assert_array_equal(fused.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_integer_inputs_only_through_a_cast_to_float32(itype):
    step = np.array([1, 7, 2**25 + 1, -3], itype)
    x = R.standard_normal(4).astype(np.float32)
    attrs = {"program": "Cast r0;Mul r2 r1", "dtypes": [dt.DT_FLOAT, dt.DT_FLOAT], "results": [3]}
    got = run_kernel("NpuElementwise", [step, x], [(np.float32, (4,))], attrs)[0]
    np.testing.assert_array_equal(got, step.astype(np.float32) * x)
    bad = dict(attrs, program="Neg r0;Mul r2 r1")
    with pytest.raises(Exception, match="integers may only be Cast to float32"):
        run_kernel("NpuElementwise", [step, x], [(np.float32, (4,))], bad)


def test_groups_that_would_feed_each_other_are_not_both_fused():
    # A = {a, c} and B = {z, y} pass the node-level check one by one, but A feeds B through Y
    # and B feeds A through X: fusing both would be a cycle between the fused nodes.
    from types import SimpleNamespace
    from graph_engine.compiler.graph import Graph
    from graph_engine.compiler.node import Node
    from graph_engine.compiler.passes import fuse_elementwise

    g = Graph()

    def node(name, op, *inputs):
        n = g.add(Node(name, op, inputs=[i.outputs[0] for i in inputs], output_dtypes=[dt.DT_FLOAT]))
        n.outputs[0].shape = (4, 4)
        return n

    x1, x2 = node("x1", "_Arg"), node("x2", "_Arg")
    a = node("a", "Exp", x1)
    z = node("z", "Neg", x2)
    X = node("X", "MatMul", z, z)
    c = node("c", "AddV2", a, X)
    Y = node("Y", "MatMul", a, a)
    y = node("y", "Mul", z, Y)
    node("r1", "_Retval", c)
    node("r2", "_Retval", y)
    stats = fuse_elementwise.run(SimpleNamespace(graph=g))
    assert stats["fused_groups"] == 1
    g.topo_order()                                   # raises on a cycle
