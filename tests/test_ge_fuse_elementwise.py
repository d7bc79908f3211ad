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
from graph_engine.ops import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.compiler.compile import compilation_for
from graph_engine.compiler.pipeline import pipeline
from graph_engine.compiler.devtools import cluster_request, single_cluster

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from conftest import run_python  # noqa: E402
from test_kernels_harness import C, run_kernel  # noqa: E402

OFF = {"fusion_switch_file": {"fuse_elementwise": "off"}}
R = np.random.default_rng(5)


def compile_both(fn, args):
    """(inputs, routes, {"on": Compilation, "off": Compilation}) for fn's single cluster."""
    cluster, inputs, routes = single_cluster(fn, args)
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


SINGLE = [op for op in ops.having("fusible")
          if ops.get(op).arity in (1, 2) and op not in ("Cast", "BiasAdd")]
BOOL_RESULT = ("Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual")


@pytest.mark.parametrize("op", SINGLE)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_each_instruction_gives_its_own_kernels_bits(op, dtype):
    rng = np.random.default_rng(7)
    logic = op.startswith("Logical")
    xs = [rng.random((3, 70)) < 0.5 if logic else (rng.standard_normal((3, 70)) * 3).astype(dtype)
          for _ in range(ops.get(op).arity)]
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


# --- the kernel's access paths and uniform registers -----------------------------------------

def run_unfused(xs, steps):
    """Runs each (op, operand indices, attrs) with the op's own kernel; registers as in a program."""
    regs = list(xs)
    for op, operands, attrs in steps:
        args = [regs[i] for i in operands]
        shape = np.broadcast_shapes(*[a.shape for a in args])
        out_dtype = attrs.pop("out", args[-1].dtype)
        regs.append(run_kernel(op, args, [(out_dtype, shape)], attrs)[0])
    return regs


# Input shapes for x * s + b over [3, 5, 700] (more than one tile; rows of 700 and 5 * 700 do
# not divide the tile): contiguous, per-channel row, scalar and strided inputs, float32 read in
# place or converted; then shapes whose rows are shorter than a tile.
ACCESS = {
    "contiguous": [(3, 5, 700)] * 3,
    "row": [(3, 5, 700), (700,), (1, 700)],
    "scalar": [(3, 5, 700), (), (1, 1, 1)],
    "strided": [(3, 5, 700), (3, 1, 700), (5, 1)],
    "mixed": [(3, 1, 700), (700,), ()],
    # rows shorter than a tile: tiles span rows, strided inputs gathered row by row
    "strided_short_rows": [(9, 11, 9), (9, 1, 9), (11, 1)],
    "row_and_column_short_rows": [(40, 13), (13,), (40, 1)],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("access", sorted(ACCESS))
def test_every_access_path_gives_the_unfused_kernels_bits(access, dtype):
    rng = np.random.default_rng(11)
    shapes = ACCESS[access]
    xs = [(rng.standard_normal(s) * 2).astype(dtype) for s in shapes]
    T = dt.from_numpy(np.dtype(dtype))
    program = "Mul r0 r1;AddV2 r3 r2;Tanh r4;Relu r4;Sub r5 r6;Cast r7"
    dtypes = [T] * 5 + [dt.DT_FLOAT]
    out_shape = np.broadcast_shapes(*shapes)
    got = run_kernel("NpuElementwise", xs, [(dtype, out_shape), (dtype, out_shape), (np.float32, out_shape)],
                     {"program": program, "dtypes": [int(d) for d in dtypes], "results": [4, 7, 8]})
    want = run_unfused(xs, [("Mul", [0, 1], {}), ("AddV2", [3, 2], {}), ("Tanh", [4], {}),
                            ("Relu", [4], {}), ("Sub", [5, 6], {}),
                            ("Cast", [7], {"SrcT": T, "DstT": dt.DT_FLOAT, "out": np.float32})])
    for g, w in zip(got, [want[4], want[7], want[8]]):
        np.testing.assert_array_equal(g.view(np.uint8), np.broadcast_to(w, out_shape).view(np.uint8))


def test_uniform_instructions_run_once_and_broadcast_including_as_outputs():
    # The bias correction of an optimizer: int64 step -> float scalar chain -> full update; the
    # scalar chain is also an output (broadcast) and a result is stored twice.
    step = np.array(7, np.int64)
    w, m = (R.standard_normal((9, 130)).astype(np.float32) for _ in range(2))
    F = dt.DT_FLOAT
    program = "Cast r0;Pow k0 r3;Sub k1 r4;Sqrt r5;Mul r2 r6;Sub r1 r7"
    attrs = {"program": program, "dtypes": [F] * 6, "results": [8, 6, 8], "constants": [0.999, 1.0]}
    got = run_kernel("NpuElementwise", [step, w, m], [(np.float32, (9, 130))] * 3, attrs)
    want = ops.evaluate(ops.get("NpuElementwise"), [step, w, m], attrs, [F] * 3)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-6)
    a = got[1][0, 0]
    np.testing.assert_array_equal(got[1], np.full((9, 130), a, np.float32))
    np.testing.assert_array_equal(got[0], w - m * a)
    np.testing.assert_array_equal(got[2], got[0])


# --- uniform (single-element) groups fold into their one consumer ----------------------------

def _alpha(t):
    return 0.01 * tf.sqrt(1.0 - tf.pow(0.999, t)) / (1.0 - tf.pow(0.9, t))


def test_scalar_chain_folds_into_its_only_consumer():
    t, w, m = np.float32(3.0), R.standard_normal((16, 8)).astype(np.float32), R.standard_normal((16, 8)).astype(np.float32)
    inputs, routes, runs = compile_both(lambda t, w, m: w - m * _alpha(t), [t, w, m])
    assert kernels(runs["on"]) == ["NpuElementwise"]
    (k,) = runs["on"].program.kernels
    assert "Pow" in k.attrs["program"] and len(k.outputs) == 1
    np.testing.assert_array_equal(native(runs["on"], inputs)[0], native(runs["off"], inputs)[0])


@pytest.mark.parametrize("case", ["two_consumers", "also_an_output"])
def test_scalar_chain_read_elsewhere_stays_one_kernel(case):
    # Folding into two consumers would compute it twice; a graph output needs it stored.
    t = np.float32(5.0)
    w, m = (R.standard_normal((16, 8)).astype(np.float32) for _ in range(2))
    b = R.standard_normal((8,)).astype(np.float32)
    if case == "two_consumers":
        def f(t, w, m, b):
            a = _alpha(t)
            return w - m * a, tf.exp(b) * a
    else:
        def f(t, w, m, b):
            a = _alpha(t)
            return w - m * a + b, a
    inputs, routes, runs = compile_both(f, [t, w, m, b])
    fused = [k for k in runs["on"].program.kernels if k.kernel == "NpuElementwise"]
    scalar = [k for k in fused if "Pow" in k.attrs["program"]]
    assert len(scalar) == 1 and len(fused) == (3 if case == "two_consumers" else 2)
    for a, e in zip(native(runs["on"], inputs), native(runs["off"], inputs)):
        np.testing.assert_array_equal(a, e)


# --- integer math: exact, single elements only -------------------------------------------------

@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_integer_instructions_wrap_exactly_at_the_extremes(itype):
    info = np.iinfo(itype)
    I, B, F = dt.from_numpy(np.dtype(itype)), dt.DT_BOOL, dt.DT_FLOAT
    for a, b in [(info.max, 1), (info.min, -1), (info.min, info.max), (2**24 + 1, 3), (-7, 0)]:
        xs = [np.array(a, itype), np.array(b, itype), np.zeros((2, 3), np.float32)]
        program = ("AddV2 r0 r1;Sub r0 r1;Mul r0 r1;Neg r0;Maximum r0 r1;Minimum r0 r1;Less r0 r1;"
                   "Cast r3;Cast r5;AddV2 r10 r2")
        dtypes = [I] * 6 + [B, F, dt.DT_INT32 if itype == np.int64 else dt.DT_INT64, F]
        results = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        attrs = {"program": program, "dtypes": [int(d) for d in dtypes], "results": results}
        out_dtypes = [dt.numpy_dtype(dtypes[r - 3]) for r in results]
        got = run_kernel("NpuElementwise", xs, [(t, (2, 3)) for t in out_dtypes], attrs)
        want = ops.evaluate(ops.get("NpuElementwise"), xs, attrs, [dtypes[r - 3] for r in results])
        own = [run_kernel(op, [xs[0], xs[1]], [(itype, ())])[0] for op in ("AddV2", "Sub", "Mul")]
        x, y = np.array(a, itype), np.array(b, itype)
        with np.errstate(over="ignore"):
            exact = [x + y, x - y, x * y, -x]          # numpy wraps as TF does
        for g, w, t in zip(got, want, out_dtypes):
            assert g.dtype == np.dtype(t)
            np.testing.assert_array_equal(g, np.broadcast_to(w, (2, 3)))
        for g, o in zip(got[:3], own):
            np.testing.assert_array_equal(g, np.broadcast_to(o, (2, 3)))
        for g, e in zip(got[:4], exact):
            np.testing.assert_array_equal(g, np.broadcast_to(e, (2, 3)))
        np.testing.assert_array_equal(got[7], np.full((2, 3), np.float32(exact[0])))   # exact Cast
        np.testing.assert_array_equal(got[9], got[7])


def test_integer_math_on_more_than_one_element_is_refused():
    attrs = {"program": "Neg r0", "dtypes": [dt.DT_INT64], "results": [1]}
    with pytest.raises(Exception, match="single-element operands"):
        run_kernel("NpuElementwise", [np.arange(4, dtype=np.int64)], [(np.int64, (4,))], attrs)
    bad = {"program": "Neg r0", "dtypes": [dt.DT_FLOAT], "results": [1]}
    with pytest.raises(Exception, match="integers may only be Cast to float32"):
        run_kernel("NpuElementwise", [np.array(3, np.int64)], [(np.float32, ())], bad)


def test_step_counter_increment_fuses_into_the_update():
    # Keras' Adam: local_step = cast(iterations + 1, float32) feeds the bias correction.
    it = np.array(41, np.int64)
    w, m = (R.standard_normal((16, 8)).astype(np.float32) for _ in range(2))
    counts = R.integers(0, 5, (16, 8)).astype(np.int64)

    def f(it, w, m, counts):
        t = tf.cast(it + 1, tf.float32)
        return w - m * _alpha(t), counts + 1       # per-element integer math is not fused

    inputs, routes, runs = compile_both(f, [it, w, m, counts])
    on = kernels(runs["on"])
    assert on.count("NpuElementwise") == 1 and on.count("AddV2") == 1
    for a, e in zip(native(runs["on"], inputs), native(runs["off"], inputs)):
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_scalar_integer_chain_is_one_kernel_with_an_integer_output(itype):
    it = np.array(np.iinfo(itype).max - 1, itype)        # wraps around like TF's own kernels

    w = np.float32(1.5)

    def f(it, w):      # w: int32 math alone stays in TF's host kernels (test_ge_partition.py)
        return tf.maximum((it + 1) * 3 - it, -it), w * tf.cast(it, tf.float32)

    inputs, routes, runs = compile_both(f, [it, w])
    assert kernels(runs["on"]) == ["NpuElementwise"]
    got = native(runs["on"], inputs)[routes[0]]
    assert got.dtype == itype
    np.testing.assert_array_equal(got, native(runs["off"], inputs)[routes[0]])
    np.testing.assert_array_equal(got, f(tf.constant(it), tf.constant(w))[0].numpy())


# --- sibling groups that read the same value ---------------------------------------------------

def test_sibling_chains_reading_one_gradient_become_one_kernel():
    # Adam's moment updates: (g - m) * 0.1 and (g^2 - v) * 0.001 both read g.
    g, m, v = (R.standard_normal((16, 8)).astype(np.float32) for _ in range(3))

    def f(g, m, v):
        return (g - m) * 0.1, (tf.square(g) - v) * 0.001

    inputs, routes, runs = compile_both(f, [g, m, v])
    assert kernels(runs["on"]) == ["NpuElementwise"]
    assert len(runs["on"].program.kernels[0].outputs) == 2
    for a, e in zip(native(runs["on"], inputs), native(runs["off"], inputs)):
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("case", ["dependent", "other_shape"])
def test_siblings_that_depend_on_each_other_or_differ_in_shape_stay_apart(case):
    g = R.standard_normal((16, 8)).astype(np.float32)
    if case == "dependent":     # the second chain reads the first through a Sum: no cycle allowed
        def f(g):
            a = tf.exp(g) * 2.0
            return a, tf.tanh(g) * 3.0 + tf.reduce_sum(a)
    else:                       # g also read by a chain of a broadcast shape
        def f(g):
            return tf.exp(g) * 2.0, tf.tanh(g * tf.constant(R.standard_normal((4, 1, 1)), tf.float32)) * 3.0
    inputs, routes, runs = compile_both(f, [g])
    assert kernels(runs["on"]).count("NpuElementwise") == 2
    for a, e in zip(native(runs["on"], inputs), native(runs["off"], inputs)):
        np.testing.assert_array_equal(a, e)


def test_float16_overflow_and_nan_intermediates_give_the_unfused_bits():
    # The fast float16 rounding hands tiles with infinities/NaNs to the storing path, which
    # raises the float status and saturates exactly as the op's own kernel does.
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((3, 333)) * 400).astype(np.float16)
    y = (rng.standard_normal((3, 333)) * 400).astype(np.float16)
    x[0, 5], x[2, 300] = np.nan, np.inf
    program = "Mul r0 r1;Sub r2 r2;Mul r2 r0"
    got = run_kernel("NpuElementwise", [x, y], [(np.float16, (3, 333))] * 3,
                     {"program": program, "dtypes": [dt.DT_HALF] * 3, "results": [2, 3, 4]})
    want = run_unfused([x, y], [("Mul", [0, 1], {}), ("Sub", [2, 2], {}), ("Mul", [2, 0], {})])
    big = np.abs(x.astype(np.float32) * y.astype(np.float32)) > 65504
    assert big.sum() > 10 and np.isnan(want[3].astype(np.float32)).any()   # overflowed (saturated or inf)
    for g, w in zip(got, want[2:]):
        np.testing.assert_array_equal(g.view(np.uint16), w.view(np.uint16))
