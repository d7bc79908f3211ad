"""Lowered control flow never deadlocks (issue 12): the partitioner's clusters keep TF's
dataflow executor able to run every loop and cond.

An NpuGraphOp runs only when ALL its inputs are there. The partitioner once put the producer of
a loop input (an RNN's transposed input sequence, read in the body through an Enter) and a
consumer of a loop output (the Exit of the output accumulator) into one cluster: no DAG edge
links them once the NextIteration -> Merge back edges are set aside, but the Exit fires only in
the loop's last iteration, which needs that input. The cluster waited for itself: Keras
LSTM/GRU/SimpleRNN `fit` hung forever; single-device functions returned no value.

Unit tests check the rule on lowered (TF1-style) graphs: every cluster lies in one control-flow
context, and the partitioned graph stays acyclic with Enter -> frame -> Exit edges per loop; the
partitioned graphs also run like TF. Subprocess tests run the real programs (Keras recurrent
layers, while + cond, nested loops, TensorArray loops, gradients through loops) on the NPU with
a timeout and compare them with the same program on CPU.
"""
import contextlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.graphdef import import_graph_def
from graph_engine.compiler.partition import dag
from graph_engine.compiler.partition.contexts import control_contexts
from graph_engine.compiler.devtools import place

R = np.random.default_rng(12)
TIMEOUT = 120               # seconds per program; each takes 5-20 s when nothing hangs


# ------------------------------------------------------------------- unit tests: the rule

@contextlib.contextmanager
def v1_control_flow():
    """Graphs built inside use Enter/Merge/Switch/NextIteration/Exit: what TF's lowering of
    While/If hands the plugin at run time."""
    from tensorflow.python.ops import control_flow_v2_toggles
    control_flow_v2_toggles.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as g:
            yield g
    finally:
        control_flow_v2_toggles.enable_control_flow_v2()


def partitioned(gd, fetches):
    """(placed GraphDef, partitioned GraphDef, [set of member names per cluster])."""
    placed = place(gd, fetches=fetches)
    for n in placed.node:                 # colocation with clustered nodes: moot once placed
        n.attr.pop("_class", None)
    out = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    clusters = [n for n in out.node if n.op == "NpuGraphOp"]
    members = [{m.name for m in graph_pb2.GraphDef.FromString(c.attr["cluster"].s).node
                if m.op not in ("_Arg", "_Retval", "Const")} for c in clusters]
    return placed, out, members


def _loop_frames(gd):
    """{Enter or Exit name: frame name}. An Exit's frame is its Switch's Merge's Enter's."""
    by_name = {n.name: n for n in gd.node}

    def producer(ref):
        return by_name[ref.lstrip("^").split(":")[0]]
    frame = {n.name: n.attr["frame_name"].s.decode() for n in gd.node if n.op == "Enter"}
    for n in gd.node:
        if n.op == "Exit":
            switch = producer(n.input[0])
            merge = producer(switch.input[0])
            assert switch.op == "Switch" and merge.op == "Merge", n.name
            (frame[n.name],) = {frame[producer(i).name] for i in merge.input
                                if producer(i).op == "Enter"}
    return frame


def assert_no_wait_cycle(gd):
    """The graph with NextIteration -> Merge back edges dropped and Enter -> frame -> Exit edges
    added is acyclic: no node (NpuGraphOp included) waits, even through a loop, on itself."""
    frame = _loop_frames(gd)
    by_name = {n.name: n for n in gd.node}
    succ = {n.name: set() for n in gd.node}
    for n in gd.node:
        for ref in n.input:
            p = by_name[ref.lstrip("^").split(":")[0]]
            if not (p.op == "NextIteration" and n.op == "Merge"):
                succ[p.name].add(n.name)
        if n.op in ("Enter", "Exit"):
            f = "frame:" + frame[n.name]
            succ.setdefault(f, set())
            (succ[n.name] if n.op == "Enter" else succ[f]).add(f if n.op == "Enter" else n.name)
    indegree = dict.fromkeys(succ, 0)
    for targets in succ.values():
        for m in targets:
            indegree[m] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    stuck = sorted(n for n, d in indegree.items() if d > 0)
    assert done == len(succ), f"wait cycle through {stuck[:8]}"


def assert_one_context_per_cluster(placed, members):
    g = import_graph_def(placed.SerializeToString())
    ctx = control_contexts(g, dag.order(g))
    for m in members:
        contexts = {ctx[g.nodes[name]] for name in m}
        assert len(contexts) == 1 and None not in contexts, (sorted(m), contexts)


DEADLINE_MS = 60_000        # a graph that waits for itself fails the test instead of hanging it


def run(gd, feeds, fetches, device):
    """Runs GraphDef `gd` in a TF session under a deadline, every node on `device`. On CPU,
    NpuGraphOps run through compile_model and the reference executor (as in devtools.run_graph);
    with device "" TF places the graph (on the NPU) and the plugin partitions it for real."""
    from tensorflow.python.ops import script_ops

    from graph_engine.compiler.devtools import _cluster_as_py_func
    gd = graph_pb2.GraphDef.FromString(gd.SerializeToString())
    funcs, tokens = [], []      # the py-func registry holds weak references: keep them alive
    try:
        for n in gd.node:
            n.device = device
            n.attr.pop("_class", None)
            if n.op == "NpuGraphOp":
                funcs.append(_cluster_as_py_func(n))
                tokens.append(script_ops._py_funcs.insert(funcs[-1]))
                n.attr["token"].s = tokens[-1].encode()
        with tf.Graph().as_default() as graph:
            tf.graph_util.import_graph_def(gd, name="")
            with tf.compat.v1.Session(graph=graph) as sess:
                return sess.run([f + ":0" for f in fetches],
                                {k + ":0": v for k, v in feeds.items()},
                                options=tf.compat.v1.RunOptions(timeout_in_ms=DEADLINE_MS))
    finally:
        for token in tokens:
            script_ops._py_funcs.remove(token)


def check(gd, fetches, feeds):
    """Partitions `gd` and checks the rule; runs the partitioned graph (clusters through the
    reference executor) and the original graph on the NPU (through the plugin) and compares
    both with TF on CPU. A cluster that waits for itself would leave a fetch without a value
    or hit the deadline."""
    placed, out, members = partitioned(gd, fetches)
    assert members, "nothing was clustered: the test would prove nothing"
    assert_no_wait_cycle(out)
    assert_one_context_per_cluster(placed, members)
    want = run(gd, feeds, fetches, "/device:CPU:0")
    for got in (run(out, feeds, fetches, "/device:CPU:0"), run(gd, feeds, fetches, "")):
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return out, members


def _together(members, a, b):
    return any(a in m and b in m for m in members)


def _dag_reaches(gd, src, dst):
    g = import_graph_def(gd.SerializeToString())
    succ = {}
    for n in dag.order(g):
        for p, _ in dag.predecessors(n):
            succ.setdefault(p, []).append(n)
    seen, stack = set(), [g.nodes[src]]
    while stack:
        for s in succ.get(stack.pop(), ()):
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return g.nodes[dst] in seen


def test_loop_input_producer_and_loop_output_consumer_never_share_a_cluster():
    with v1_control_flow() as g:
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        a = tf.exp(x, name="a")                              # read in the body (an Enter)
        _, acc = tf.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc + a * 2.0),
                               (tf.constant(0), tf.zeros([3])), name="loop")
        tf.identity(tf.tanh(acc, name="t") * 3.0, name="out")
    # The case the frame edges exist for: with the back edges set aside no DAG path joins a
    # and t, so without them the two would merge as siblings.
    assert not _dag_reaches(place(g.as_graph_def()), "a", "t")
    _, members = check(g.as_graph_def(), ["out"], {"x": R.standard_normal(3).astype(np.float32)})
    assert not _together(members, "a", "t")
    assert any("loop/mul" in m for m in members)              # the body still is a cluster


def test_rnn_like_tensor_array_loop():
    """An RNN as Keras lowers it: the input sequence is unstacked into a TensorArray that the
    body reads, the outputs go to another TensorArray stacked after the loop."""
    with v1_control_flow() as g:
        x = tf.compat.v1.placeholder(tf.float32, [5, 2, 3], name="x")
        w = tf.constant(R.standard_normal((3, 3)).astype(np.float32) * 0.5)
        seq = tf.transpose(x, [1, 0, 2], name="seq") * 1.5
        inputs = tf.TensorArray(tf.float32, size=2).unstack(seq)
        outputs = tf.TensorArray(tf.float32, size=2)

        def body(t, h, ta):
            h = tf.tanh(inputs.read(t) + h @ w)
            return t + 1, h, ta.write(t, h)
        _, h, ta = tf.while_loop(lambda t, h, ta: t < 2, body,
                                 (tf.constant(0), tf.zeros([5, 3]), outputs), name="rnn")
        tf.identity(tf.reduce_mean(ta.stack(), axis=0, name="m") * 2.0 + h, name="out")
    _, members = check(g.as_graph_def(), ["out"],
                       {"x": R.standard_normal((5, 2, 3)).astype(np.float32)})
    assert not _together(members, "seq", "m")


def test_cond_inside_while_loop():
    with v1_control_flow() as g:
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        a = tf.exp(x, name="a") * 0.5

        def body(i, v):
            v = tf.cond(tf.reduce_sum(v) > 0.0, lambda: tf.tanh(v @ a) + 0.5,
                        lambda: v * 0.5 - a, name="branch")
            return i + 1, v
        _, r = tf.while_loop(lambda i, v: i < 5, body, (tf.constant(0), x), name="loop")
        tf.identity(tf.sigmoid(r, name="s") + 1.0, name="out")
    _, members = check(g.as_graph_def(), ["out"],
                       {"x": R.standard_normal((3, 3)).astype(np.float32)})
    assert not _together(members, "a", "s")
    assert any(any("branch/" in n for n in m) for m in members)
    for m in members:                                       # the two branches stay apart
        assert not (any("Tanh" in n for n in m) and any("branch/mul" in n for n in m)), m


def test_nested_loops():
    with v1_control_flow() as g:
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        a = tf.exp(x, name="a") * 0.5

        def outer(i, v):
            _, v = tf.while_loop(lambda j, u: j < i + 1,
                                 lambda j, u: (j + 1, tf.sin(u) + a * tf.cast(j, tf.float32)),
                                 (tf.constant(0), v), name="inner")
            return i + 1, tf.tanh(v @ a)
        _, r = tf.while_loop(lambda i, v: i < 3, outer, (tf.constant(0), x), name="outer")
        tf.identity(tf.sigmoid(r, name="s") * 2.0, name="out")
    _, members = check(g.as_graph_def(), ["out"],
                       {"x": R.standard_normal((3, 3)).astype(np.float32)})
    assert not _together(members, "a", "s")
    for m in members:                       # the inner loop's code stays in the inner frame
        inner = {n.startswith("outer/inner/") for n in m}
        assert len(inner) == 1, m


def test_gradient_through_while_loop():
    with v1_control_flow() as g:
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        w = tf.compat.v1.placeholder(tf.float32, [3, 3], name="w")
        w2 = w * 0.9
        _, v = tf.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tf.tanh(v @ w2)),
                             (tf.constant(0), x), name="loop")
        (dw,) = tf.gradients(tf.reduce_sum(v * v), [w])
        tf.identity(dw * 2.0, name="out")
    check(g.as_graph_def(), ["out"], {"x": R.standard_normal((3, 3)).astype(np.float32),
                                      "w": R.standard_normal((3, 3)).astype(np.float32) * 0.5})


def test_first_iteration_values_get_their_own_context():
    """A non-constant Enter's value exists in the loop's first iteration only (a loop Merge
    turns it into a per-iteration value): what reads it directly must not share a cluster
    with per-iteration code of the same frame. (Structure only: the edited graph is not one
    TF could run past its first iteration.)"""
    with v1_control_flow() as g:
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        a = tf.exp(x, name="a")
        tf.while_loop(lambda i, v: tf.logical_and(
                          i < 10.0, tf.reduce_sum(tf.sin(a, name="sa")) > -100.0),
                      lambda i, v: (i + 1.0, v * 2.0), (tf.constant(0.0), x), name="loop")
    gd = place(g.as_graph_def())
    enter = next(n for n in gd.node if n.op == "Enter" and n.input[0] == "a")
    enter.attr["is_constant"].b = False                 # as if `a` entered as a loop value
    gi = import_graph_def(gd.SerializeToString())
    ctx = control_contexts(gi, dag.order(gi))
    merge, sa, less = (ctx[gi.nodes[k]] for k in ("loop/Merge", "loop/sa", "loop/Less"))
    assert merge[-1][0] == "frame" and less == merge
    assert sa == merge + (("first", merge[-1][1]),)
    _, _, members = partitioned(gd, [])
    assert any("loop/sa" in m for m in members)
    assert not _together(members, "loop/sa", "loop/Less")


# ---------------------------------------------------------- the programs, on the NPU and CPU

PRELUDE = """
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import npu_device
import numpy as np, tensorflow as tf, keras
CPU, NPU = "/CPU:0", "/device:NPU:0"
R = np.random.RandomState(0)

def report(**kw):
    print("@@RESULT " + json.dumps(kw), flush=True)
"""

KERAS_FIT = PRELUDE + """
x = R.rand(32, 10, 4).astype("float32")
x[::2, 7:] = 0.0                       # padding that Masking turns into a mask
y = R.rand(32, 1).astype("float32")
LAYERS = {
    "lstm": lambda: [keras.layers.LSTM(8)],
    "gru": lambda: [keras.layers.GRU(8)],
    "simple_rnn": lambda: [keras.layers.SimpleRNN(8)],
    "bidirectional_masked": lambda: [keras.layers.Masking(0.0),
                                     keras.layers.Bidirectional(keras.layers.LSTM(8))],
}

def build():
    return keras.Sequential([keras.Input((10, 4)), *LAYERS[sys.argv[1]](), keras.layers.Dense(1)])

def fit(device, weights):
    with tf.device(device):
        m = build()
        m.set_weights(weights)
        m.compile(keras.optimizers.Adam(0.01), "mse")
        loss = m.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False).history["loss"][-1]
        return loss, m.predict(x, batch_size=8, verbose=0), m.get_weights()

with tf.device(CPU):
    keras.utils.set_random_seed(0)
    w0 = build().get_weights()
cpu = fit(CPU, w0)
npu_device.compile_stats(reset=True)
start = time.time()
npu = fit(NPU, w0)
stats = npu_device.compile_stats()
report(loss=[cpu[0], npu[0]], predict=float(np.abs(cpu[1] - npu[1]).max()),
       weights=max(float(np.abs(a - b).max()) for a, b in zip(cpu[2], npu[2])),
       scale=float(np.abs(cpu[1]).max()), compiles=stats["compiles"],
       fallbacks=stats.get("fallbacks", 0), seconds=time.time() - start)
"""

FUNCTIONS = PRELUDE + """
W = R.standard_normal((4, 4)).astype("float32") * 0.5
X = R.standard_normal((3, 4)).astype("float32")

# Each computes a value before the loop that the loop only reads (an Enter no DAG path joins
# to the loop's outputs) and post-processes a loop output: the pattern that deadlocked.
def while_cond(x):
    a = tf.exp(x) * 0.5
    def body(i, v):
        v = tf.cond(tf.reduce_sum(v) > 0.0, lambda: tf.tanh(v @ W) + a, lambda: v * 0.5 - a)
        return i + 1, v
    return tf.tanh(tf.while_loop(lambda i, v: i < 6, body, (tf.constant(0), x))[1]) + 1.0

def nested_loops(x):
    a = tf.exp(x) * 0.5
    def outer(i, v):
        def inner(j, u):
            return j + 1, tf.sin(u) + a * tf.cast(j, tf.float32)
        _, v = tf.while_loop(lambda j, u: j < i + 1, inner, (tf.constant(0), v))
        return i + 1, tf.tanh(v @ W)
    return tf.while_loop(lambda i, v: i < 3, outer, (tf.constant(0), x))[1] * 2.0 + 1.0

def tensor_array_loop(x):
    a = tf.exp(x) * 0.5
    n = tf.shape(x)[0]
    ta = tf.TensorArray(tf.float32, size=n)
    h = tf.zeros([4])
    for i in tf.range(n):
        h = tf.tanh(tf.linalg.matvec(W, h) + a[i])
        ta = ta.write(i, h * 2.0)
    return ta.stack() * 3.0 + 1.0

def gradient_through_loop(x):
    w = tf.constant(W)
    with tf.GradientTape() as tape:
        tape.watch(w)
        w2 = w * 0.9
        _, v = tf.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tf.tanh(v @ w2)),
                             (tf.constant(0), x))
        loss = tf.reduce_sum(v * v)
    return tape.gradient(loss, w) * 2.0

def loop_in_cond_one_iteration_at_a_time(x):
    a = tf.exp(x) * 0.5
    def loop():
        return tf.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tf.tanh(v @ W) + a),
                             (0, x), parallel_iterations=1)[1]
    return tf.cond(tf.reduce_sum(x) > 0.0, loop, lambda: x * 2.0) * 3.0 + tf.reduce_sum(a)

for fn in (while_cond, nested_loops, tensor_array_loop, gradient_through_loop,
           loop_in_cond_one_iteration_at_a_time):
    print("running", fn.__name__, flush=True)        # names the program that hangs, if one does
    out = {}
    for device in (CPU, NPU):
        with tf.device(device):
            f = tf.function(fn)
            for sign in (1.0, -1.0):
                out[device, sign] = f(tf.constant(X * sign)).numpy()
    report(name=fn.__name__, shapes=[list(out[NPU, s].shape) for s in (1.0, -1.0)],
           want_shapes=[list(out[CPU, s].shape) for s in (1.0, -1.0)],
           diff=max(float(np.abs(out[CPU, s] - out[NPU, s]).max()) for s in (1.0, -1.0)),
           scale=max(float(np.abs(out[CPU, s]).max()) for s in (1.0, -1.0)))
report(name="stats", **npu_device.compile_stats())
"""


def run_program(tmp_path, code, *args):
    """Runs `code` (from a file: autograph reads the source) in a fresh interpreter; returns
    its @@RESULT records. Fails, instead of waiting, when it runs past TIMEOUT."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        r = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True,
                           text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"hung for {TIMEOUT} s (deadlock?); its output: {out[-2000:]}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return [json.loads(line.split("@@RESULT ", 1)[1]) for line in r.stdout.splitlines()
            if line.startswith("@@RESULT ")]


@pytest.mark.parametrize("layer", ["lstm", "gru", "simple_rnn", "bidirectional_masked"])
def test_keras_recurrent_fit_finishes_and_matches_cpu(tmp_path, layer):
    (res,) = run_program(tmp_path, KERAS_FIT, layer)
    assert res["compiles"] > 0 and res["fallbacks"] == 0, res
    np.testing.assert_allclose(res["loss"][1], res["loss"][0], rtol=1e-4, atol=1e-6)
    assert res["predict"] <= 1e-4 * res["scale"] + 1e-5, res
    assert res["weights"] <= 1e-4, res


def test_loops_conds_tensor_arrays_and_gradients_finish_and_match_cpu(tmp_path):
    *programs, stats = run_program(tmp_path, FUNCTIONS)
    assert [p["name"] for p in programs] == [
        "while_cond", "nested_loops", "tensor_array_loop", "gradient_through_loop",
        "loop_in_cond_one_iteration_at_a_time"]
    assert stats["compiles"] > 0 and stats.get("fallbacks", 0) == 0, stats
    for p in programs:
        assert p["shapes"] == p["want_shapes"], p          # a cluster waiting on itself: no value
        assert p["diff"] <= 1e-5 * p["scale"] + 1e-5, p
