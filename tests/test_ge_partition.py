"""partition_graph on placed graphs: clusters, cycle avoidance, preserved nodes, control edges,
control-flow contexts, idempotence and the report. Partitioned graphs are also executed (TF on
CPU, clusters through the compiler and reference executor) and compared with the original."""
import json

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler import reports
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.graphdef import import_graph_def
from graph_engine.compiler.partition import HOST_REASON, TRIVIAL_REASON, dag
from graph_engine.compiler.partition.candidates import PRESERVE_ATTR
from graph_engine.compiler.devtools import CPU, NPU, place, run_graph

R = np.random.default_rng(1)


def traced(fn, *specs):
    cf = tf.function(fn).get_concrete_function(*specs)
    return cf.graph.as_graph_def(), [t.name for t in cf.outputs], cf


def partition(gd, fetches, **kw):
    placed = place(gd, fetches=[f.split(":")[0] for f in fetches], **kw)
    out = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    dag.order(import_graph_def(out))                 # raises if the rewrite made a cycle
    return out, reports.last()


def clusters(gd):
    return [n for n in gd.node if n.op == "NpuGraphOp"]


def body(cluster):
    return graph_pb2.GraphDef.FromString(cluster.attr["cluster"].s)


def members(cluster):
    """Names of the clustered nodes (without _Arg/_Retval and the Consts copied in)."""
    return {n.name for n in body(cluster).node if n.op not in ("_Arg", "_Retval", "Const")}


def check_runs_like_tf(gd_original, gd_partitioned, feeds, fetches):
    want, _ = run_graph(gd_original, feeds, fetches)
    got, _ = run_graph(gd_partitioned, feeds, fetches)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


X = tf.TensorSpec([4, 3])
W = tf.TensorSpec([3, 5])


def test_supported_chain_becomes_one_cluster():
    gd, fetches, _ = traced(lambda x, w: tf.tanh(tf.nn.relu(x @ w) + 1.0), X, W)
    out, report = partition(gd, fetches)
    (c,) = clusters(out)
    assert c.name == "npu_cluster_0" and c.device == NPU
    assert c.attr["cluster_name"].s == b"npu_cluster_0"
    assert list(c.input) == ["x", "w"]
    assert list(c.attr["Tin"].list.type) == [tf.float32.as_datatype_enum] * 2
    assert list(c.attr["Tout"].list.type) == [tf.float32.as_datatype_enum]
    assert isinstance(json.loads(c.attr["options"].s), dict)
    b = body(c)
    assert sorted(n.op for n in b.node if n.op in ("_Arg", "_Retval")) == ["_Arg", "_Arg", "_Retval"]
    assert {n.op for n in body(c).node} == {"_Arg", "_Retval", "Const", "MatMul", "Relu",
                                            "AddV2", "Tanh"}
    assert all(n.device == "" for n in b.node)
    fetch = next(n for n in out.node if n.name == fetches[0].split(":")[0])
    assert list(fetch.input) == ["npu_cluster_0"]
    assert set(report.clusters) == {"npu_cluster_0"}
    assert set(report.clusters["npu_cluster_0"]) == members(c)
    feeds = {"x": R.standard_normal((4, 3)).astype(np.float32),
             "w": R.standard_normal((3, 5)).astype(np.float32)}
    check_runs_like_tf(gd, out, feeds, fetches)



def test_equal_constants_are_copied_into_a_cluster_once():
    """TF's gradients and optimizers repeat constants (a quarter of DenseNet121's training
    cluster): the body holds one copy of each distinct value; others keep their own."""
    def fn(x):
        two, two_again, two_int = tf.constant(2.0), tf.constant(2.0), tf.constant([2])
        half = tf.constant(0.5)
        return tf.exp(x * two) + tf.tanh(x) * two_again + half * tf.cast(two_int, tf.float32)
    gd, fetches, _ = traced(fn, X)
    out, report = partition(gd, fetches)
    (c,) = clusters(out)
    consts = [n for n in body(c).node if n.op == "Const"]
    values = sorted((n.attr["dtype"].type, tf.make_ndarray(n.attr["value"].tensor).tolist())
                    for n in consts)
    assert values == sorted([(tf.float32.as_datatype_enum, 2.0), (tf.float32.as_datatype_enum, 0.5),
                             (tf.int32.as_datatype_enum, [2])])
    copied = [e for e in report.nodes if e.op == "Const"]
    assert len(copied) == 4 and all(e.cluster == "npu_cluster_0" for e in copied)
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, fetches)

def _no_npu_op(x):
    """An op with no NPU implementation (TF's CPU kernel computes it): Reverse (v1)."""
    return tf.raw_ops.Reverse(tensor=x, dims=[True, False])


def test_unsupported_op_in_the_middle_gives_two_clusters():
    gd, fetches, _ = traced(lambda x: tf.nn.relu(_no_npu_op(tf.exp(x) * 2.0)) - 1.0, X)
    out, report = partition(gd, fetches)
    assert len(clusters(out)) == 2
    entry = next(n for n in report.nodes if n.op == "Reverse")
    assert entry.placement == "npu_unclustered"
    assert entry.reason == "op Reverse has no NPU implementation"
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, fetches)


def test_cpu_placed_node_splits_and_is_reported():
    gd, fetches, _ = traced(lambda x: tf.exp(tf.tanh(tf.exp(x))), X)
    out, report = partition(gd, fetches, cpu_ops=("Tanh",))
    assert len(clusters(out)) == 2
    entry = next(n for n in report.nodes if n.op == "Tanh")
    assert (entry.placement, entry.reason) == ("cpu", "placed on CPU by TensorFlow/user")


def test_diamond_through_outside_node_is_not_merged():
    def f(x):
        a = tf.exp(x)
        return a + _no_npu_op(a)                   # a -> Reverse (TF) -> add, and a -> add
    gd, fetches, _ = traced(f, X)
    out, _ = partition(gd, fetches)
    (c1, c2) = clusters(out)
    assert members(c1) == {"Exp"} and members(c2) == {"add"}
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, fetches)


def test_cycle_through_control_edge_is_avoided():
    def f(x):
        a = tf.exp(x)
        s = _no_npu_op(a)
        with tf.control_dependencies([s]):
            c = a * 2.0
        return c, s
    gd, fetches, _ = traced(f, X)
    out, _ = partition(gd, fetches)
    by_members = {frozenset(members(c)): c for c in clusters(out)}
    assert frozenset({"Exp"}) in by_members and frozenset({"mul"}) in by_members
    mul_cluster = by_members[frozenset({"mul"})]
    assert "^Reverse" in mul_cluster.input
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, fetches)


def test_a_constant_ordered_after_a_member_orders_nothing_else():
    # Grappler's materialized shapes (tf.image.ssim_multiscale's checks): a Const with a control
    # input from one member and a control edge to another. The cluster node took the Const as
    # its control input while the Const waited for the cluster: a cycle, and TF ran the whole
    # function op by op. The Const's own control inputs order the member instead.
    def f(x):
        a = tf.exp(x)
        with tf.control_dependencies([a]):
            shape = tf.constant([4, 3])
        with tf.control_dependencies([shape]):
            c = a * 2.0
        return c, tf.raw_ops.Reverse(tensor=shape, dims=[True])     # no NPU kernel
    gd, fetches, _ = traced(f, X)
    out, _ = partition(gd, fetches)                  # (raises on a cycle)
    (c,) = clusters(out)
    assert sorted(members(c)) == ["Exp", "mul"]
    assert not [i for i in c.input if i.startswith("^")]
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, fetches)


def test_a_clamp_that_ignores_its_input_is_no_compile_time_value():
    # tf.math.bincount(minlength=16, maxlength=16) (Keras' CategoryEncoding multi_hot): the
    # size min(16, max(16, max(x) + 1)) is 16 whatever x holds; through it x itself was the
    # cluster's compile-time value, a compile per batch.
    def f(x):
        return tf.math.bincount(x, minlength=16, maxlength=16, axis=-1, binary_output=True)
    gd, fetches, _ = traced(f, tf.TensorSpec([5, 3], tf.int32))
    out, _ = partition(gd, fetches)
    assert all(not c.attr["Tvalues"].list.type for c in clusters(out))
    x = np.array([[1, 3, 3], [15, 0, 2], [4, 4, 4], [7, 8, 9], [0, 0, 15]], np.int32)
    check_runs_like_tf(gd, out, {"x": x}, fetches)


def test_control_edges_move_to_the_cluster_node():
    def f(x):
        s = _no_npu_op(x)
        with tf.control_dependencies([s]):
            y = tf.nn.relu(x) * 3.0
        with tf.control_dependencies([y]):
            z = _no_npu_op(x)
        return z, s
    gd, fetches, _ = traced(f, X)
    out, _ = partition(gd, fetches)
    (c,) = clusters(out)
    assert "^Reverse" in c.input
    axis = next(n for n in out.node if n.name == "Reverse_1/dims")   # had ^mul
    assert list(axis.input) == ["^" + c.name]
    assert all(not i.startswith("^") for n in body(c).node for i in n.input)


def test_preserved_node_keeps_its_name_and_stays_outside():
    gd, fetches, _ = traced(lambda x, w: tf.tanh(tf.nn.relu(x @ w) * 2.0), X, W)
    placed = place(gd, fetches=[f.split(":")[0] for f in fetches] + ["Relu"])
    out = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    relu = next(n for n in out.node if n.name == "Relu")
    assert relu.op == "Relu" and all("Relu" not in members(c) for c in clusters(out))
    assert all(PRESERVE_ATTR not in n.attr for n in out.node)
    assert len(clusters(out)) == 2
    entry = next(n for n in reports.last().nodes if n.node == "Relu")
    assert entry.reason == "kept by Grappler (fetch or preserved node)"


def test_partition_is_idempotent():
    gd, fetches, _ = traced(lambda x, w: tf.nn.relu(x @ w), X, W)
    once, _ = partition(gd, fetches)
    data = once.SerializeToString()
    assert partition_graph(data) == data


def test_identity_only_cluster_is_skipped():
    gd, fetches, _ = traced(lambda x: tf.identity(tf.identity(x)), X)
    out, report = partition(gd, fetches)
    assert not clusters(out)
    assert any(n.reason == TRIVIAL_REASON for n in report.nodes)


def test_resource_and_dtype_reasons():
    v = tf.Variable(np.ones((4, 3), np.float32))

    def f(x, d):
        return x + v, d + 1.0
    gd, fetches, _ = traced(f, X, tf.TensorSpec([2], tf.float64))
    _, report = partition(gd, fetches)
    reasons = {n.op: n.reason for n in report.nodes}
    assert reasons["ReadVariableOp"] == "resource op stays in TF"
    dbl = next(n for n in report.nodes if n.node == "add_1")
    assert dbl.reason.startswith("dtype float64 not supported for op AddV2 (attr T; allowed: ")
    assert len(report.clusters) == 1


def test_clusters_never_span_devices():
    gd, fetches, _ = traced(lambda x: tf.exp(tf.exp(x)), X)
    placed = place(gd, fetches=[f.split(":")[0] for f in fetches])
    next(n for n in placed.node if n.name == "Exp_1").device = NPU.replace("NPU:0", "NPU:1")
    out = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    assert sorted(c.device[-5:] for c in clusters(out)) == ["NPU:0", "NPU:1"]


def test_lowered_while_loop_keeps_contexts_apart():
    from tensorflow.python.ops import control_flow_v2_toggles
    control_flow_v2_toggles.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as g:
            x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
            y = tf.exp(x) * 0.5
            _, r = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.nn.relu(v @ y) - 0.1),
                                 (tf.constant(0), y), name="loop")
            out = tf.identity(tf.tanh(r) + 1.0, name="out")
        gd = g.as_graph_def()
    finally:
        control_flow_v2_toggles.enable_control_flow_v2()
    part, report = partition(gd, ["out"])
    groups = [members(c) for c in clusters(part)]
    inside = [m for m in groups if any(n.startswith("loop/") for n in m)]
    assert inside and all(all(n.startswith("loop/") for n in m) for m in inside)
    # one body cluster: its constants (control-dependent on the pivot) do not split it
    assert any({"loop/add", "loop/matmul", "loop/Relu", "loop/sub"} <= m for m in inside)
    assert any(m >= {"Exp", "mul"} for m in groups)
    assert {n.op for n in report.nodes if n.reason == "control-flow op stays in TF"} >= \
        {"Enter", "Merge", "Switch", "NextIteration", "Exit"}
    check_runs_like_tf(gd, part, {"x": R.standard_normal((3, 3)).astype(np.float32) / 3}, [out.name])


def _lowered(build):
    """GraphDef of what `build()` adds to a graph with TF's lowered (v1) control flow."""
    from tensorflow.python.ops import control_flow_v2_toggles
    control_flow_v2_toggles.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as g:
            build()
        return g.as_graph_def()
    finally:
        control_flow_v2_toggles.enable_control_flow_v2()


def _types(cluster, attr):
    return [tf.as_dtype(t).name for t in cluster.attr[attr].list.type]


def test_an_int32_loop_input_from_the_cpu_enters_the_loop_on_the_npu():
    # f(tf.constant(500)): the bound is a CPU _Arg, TF places its Enter beside it, and the
    # NPU's `i < n` read it across devices every iteration (5-15x TF-CPU per iteration).
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        tf.identity(tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tf.tanh(v @ x)),
                                  (tf.constant(0), x), name="loop")[1], name="out")
    gd = place(_lowered(build), fetches=["out"])
    on_cpu = {"n"} | {n.name for n in gd.node if n.op == "Enter" and n.input[0] == "n"}
    for n in gd.node:
        if n.name in on_cpu:
            n.device = CPU
    part = graph_pb2.GraphDef.FromString(partition_graph(gd.SerializeToString()))
    devices = {n.name: n.device for n in part.node}
    assert devices["n"] == CPU and all(devices[e] == NPU for e in on_cpu - {"n"})
    check_runs_like_tf(gd, part, {"x": R.standard_normal((3, 3)).astype(np.float32) / 3,
                                  "n": np.int32(4)}, ["out"])


def test_loop_control_values_cross_in_host_memory():
    """The loop counter (int32) and the condition (read by LoopCond) cross the cluster boundary
    as host_args / host_results: TF's loop-control ops keep them in host memory, so a device
    boundary would copy them every iteration."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        _, r = tf.while_loop(lambda i, v: (i < 3) & (tf.reduce_sum(v) < 1e6),
                             lambda i, v: (i + 1, tf.tanh(v @ x)), (tf.constant(0), x),
                             name="loop")
        tf.identity(r * 2.0, name="out")
    gd = _lowered(build)
    part, _ = partition(gd, ["out"])
    by_op = {op: c for c in clusters(part) for op in ("Less", "MatMul")
             if any(n.op == op for n in body(c).node)}
    cond, step = by_op["Less"], by_op["MatMul"]
    assert _types(cond, "Tout") == [] and _types(cond, "Thost_out") == ["bool"]
    assert _types(cond, "Thost_in") == ["int32"] and _types(cond, "Tin") == ["float32"]
    assert _types(step, "Tin") == ["float32"] * 2 and _types(step, "Thost_in") == ["int32"]
    assert _types(step, "Tout") == ["float32"] and _types(step, "Thost_out") == ["int32"]
    rets = {n.attr["index"].i: n.attr["T"].type for n in body(step).node if n.op == "_Retval"}
    assert [tf.as_dtype(rets[i]).name for i in sorted(rets)] == ["float32", "int32"]
    check_runs_like_tf(gd, part, {"x": R.standard_normal((3, 3)).astype(np.float32) / 3},
                       ["out:0"])


def test_int32_arithmetic_alone_is_left_to_tf_host_kernels():
    """A loop's counter and condition alone (int32 arithmetic, which TF runs in host memory on
    the NPU itself) form no cluster: a launch per iteration would cost more than the math.
    Mixed with float math, int32 ops still join a cluster."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        _, r = tf.while_loop(lambda i, v: i < n * 2 - 1,
                             lambda i, v: (i + 1, tf.tanh(v @ x)), (tf.constant(0), x),
                             name="loop")
        tf.identity(r * tf.cast(n, tf.float32), name="out")
    gd = _lowered(build)
    part, report = partition(gd, ["out"])
    host = {n.node for n in report.nodes if n.reason == HOST_REASON}
    assert {"loop/Less", "loop/mul", "loop/sub"} <= host, host
    clustered = set().union(*(members(c) for c in clusters(part)))
    assert not host & clustered and {"loop/matmul", "loop/add", "Cast"} <= clustered
    check_runs_like_tf(gd, part, {"x": R.standard_normal((3, 3)).astype(np.float32) / 3,
                                  "n": np.int32(2)}, ["out:0"])


def test_loop_condition_logic_runs_in_host_memory():
    """A loop condition joining int32 comparisons with LogicalAnd (maximum_iterations) forms no
    cluster: the LogicalAnd becomes NpuHostLogicalAnd, the plugin's host-memory form, next to
    TF's host kernels for the comparisons. A LogicalAnd of float comparisons stays clustered."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        _, r = tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tf.tanh(v @ x)),
                             (tf.constant(0), x), maximum_iterations=4, name="loop")
        both = tf.logical_and(r > 0.0, x < 0.5, name="both")
        tf.identity(tf.where(both, r, -r), name="out")
    gd = _lowered(build)
    part, report = partition(gd, ["out"])
    host_logic = [n for n in part.node if n.op == "NpuHostLogicalAnd"]
    assert [n.name for n in host_logic] == ["loop/LogicalAnd"], [n.op for n in part.node]
    assert {r.reason for r in report.nodes if r.node == "loop/LogicalAnd"} == {HOST_REASON}
    clustered = set().union(*(members(c) for c in clusters(part)))
    assert "both" in clustered and not any("LogicalAnd" in m for m in clustered - {"both"})
    for n_value in (2, 7):                      # the loop ends on its condition, then on the cap
        check_runs_like_tf(gd, part, {"x": R.standard_normal((3, 3)).astype(np.float32) / 3,
                                      "n": np.int32(n_value)}, ["out:0"])


def test_host_logical_ops_broadcast_like_tf():
    """NpuHostLogicalAnd/Or compute (TF's CPU kernels, broadcasting included) on the NPU."""
    a = R.random((2, 1, 3)) > 0.5
    b = R.random((4, 1)) > 0.5
    with tf.Graph().as_default() as g:
        with tf.device(NPU):
            x, y = tf.constant(a), tf.constant(b)
            got = [g._create_op_internal(op, [x, y], dtypes=[tf.bool]).outputs[0]
                   for op in ("NpuHostLogicalAnd", "NpuHostLogicalOr")]
        with tf.compat.v1.Session(graph=g) as sess:
            got_and, got_or = sess.run(got)
    np.testing.assert_array_equal(got_and, np.logical_and(a, b))
    np.testing.assert_array_equal(got_or, np.logical_or(a, b))


def test_int32_lists_move_to_the_cpu_with_their_plumbing():
    """A list of int32 elements (what a loop's gradient keeps of a TensorArray: its length
    and element shape) lives on the CPU, ops and plumbing: TF's list kernels for the NPU keep
    elements in device memory, so each push and pop would be a copy. A float list stays."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        sizes = tf.raw_ops.EmptyTensorList(element_shape=tf.constant([], tf.int32),
                                           max_num_elements=-1, element_dtype=tf.int32,
                                           name="sizes")
        rows = tf.raw_ops.EmptyTensorList(element_shape=[3], max_num_elements=-1,
                                          element_dtype=tf.float32, name="rows")

        def body(i, s, r):
            s = tf.raw_ops.TensorListPushBack(input_handle=s, tensor=i * 2, name="push_size")
            r = tf.raw_ops.TensorListPushBack(input_handle=r, tensor=tf.tanh(x[i]),
                                              name="push_row")
            return i + 1, s, r
        _, s, r = tf.while_loop(lambda i, s, r: i < 4, body, (tf.constant(0), sizes, rows),
                                name="loop")
        stacked = tf.raw_ops.TensorListStack(input_handle=s, element_dtype=tf.int32,
                                             element_shape=tf.constant([], tf.int32))
        rows = tf.raw_ops.TensorListStack(input_handle=r, element_dtype=tf.float32,
                                          element_shape=[3])
        tf.identity(rows * tf.cast(tf.reduce_sum(stacked), tf.float32), name="out")
    gd = _lowered(build)
    out = graph_pb2.GraphDef.FromString(
        partition_graph(place(gd, fetches=["out"]).SerializeToString()))
    nodes = {n.name: n for n in out.node}
    assert nodes["sizes"].device == CPU and nodes["loop/push_size"].device == CPU
    assert nodes["rows"].device == NPU and nodes["loop/push_row"].device == NPU

    def origin(n):                           # the list a plumbing node passes on
        while n.op not in ("EmptyTensorList", "TensorListPushBack"):
            n = nodes[n.input[0].split(":")[0].lstrip("^")]
        return n.name
    plumbing = [n for n in out.node if n.op in ("Enter", "Merge", "Switch", "NextIteration",
                                                "Exit")
                and n.attr["T"].type == tf.variant.as_datatype_enum]
    assert len(plumbing) == 10
    for n in plumbing:
        assert n.device == (CPU if "size" in origin(n) else NPU), n.name
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, ["out:0"])


def test_int32_accumulators_stay_on_the_npu_with_host_memory_elements():
    """An int32 list only pushed to and popped from (a loop gradient's accumulator of the time
    step) stays on the NPU: its pushes take the element in host memory and its pops give it
    back there, so no copy and no CPU share of either loop; the values come back in order."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        steps = tf.raw_ops.EmptyTensorList(element_shape=tf.constant([], tf.int32),
                                           max_num_elements=-1, element_dtype=tf.int32,
                                           name="steps")

        def forward(i, s, h):
            s = tf.raw_ops.TensorListPushBack(input_handle=s, tensor=i * 3, name="push")
            return i + 1, s, h + x[i]
        _, s, h = tf.while_loop(lambda i, s, h: i < 4, forward,
                                (tf.constant(0), steps, tf.zeros([3])), name="fwd")

        def backward(j, s, acc):
            s, t = tf.raw_ops.TensorListPopBack(input_handle=s, element_shape=tf.constant(
                [], tf.int32), element_dtype=tf.int32, name="pop")
            return j + 1, s, acc * 2.0 + tf.cast(tf.reshape(t, []), tf.float32) * h
        _, _, acc = tf.while_loop(lambda j, s, acc: j < 4, backward,
                                  (tf.constant(0), s, tf.zeros([3])), name="bwd")
        tf.identity(acc, name="out")
    gd = _lowered(build)
    out = graph_pb2.GraphDef.FromString(
        partition_graph(place(gd, fetches=["out"]).SerializeToString()))
    nodes = {n.name: n for n in out.node}
    assert not [n.name for n in out.node if n.device == CPU]
    assert list(nodes["fwd/push"].attr["_input_hostmem"].list.i) == [1]
    assert list(nodes["bwd/pop"].attr["_output_hostmem"].list.i) == [1]
    check_runs_like_tf(gd, out, {"x": R.standard_normal((4, 3)).astype(np.float32)}, ["out:0"])


def test_pass_through_with_int32_arithmetic_is_left_to_tf():
    """A loop value passed on unchanged (an Identity) next to the loop's int32 counter forms no
    cluster of its own: there is nothing for a launch to compute."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        _, kept = tf.while_loop(lambda i, k: i < 5,
                                lambda i, k: (i + 1, tf.identity(k, name="keep")),
                                (tf.constant(0), x * 2.0), name="loop")
        tf.identity(tf.tanh(kept @ x), name="out")
    gd = _lowered(build)
    part, report = partition(gd, ["out"])
    host = {n.node for n in report.nodes if n.reason == HOST_REASON}
    assert {"loop/keep", "loop/add"} <= host, host
    check_runs_like_tf(gd, part, {"x": R.standard_normal((3, 3)).astype(np.float32) / 3},
                       ["out:0"])


def test_plumbing_of_a_cpu_only_list_moves_to_the_cpu():
    """A list made and read on the CPU (as TF places bool lists without NPU kernels) keeps its
    loop plumbing on the CPU too, so it never crosses devices per iteration; a float list read
    by NPU ops keeps its plumbing on the NPU."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        mask = tf.compat.v1.placeholder(tf.bool, [4, 3], name="mask")
        masks = tf.raw_ops.TensorListFromTensor(tensor=mask, element_shape=[3], name="masks")
        xs = tf.raw_ops.TensorListFromTensor(tensor=x, element_shape=[3], name="xs")

        def body(i, h):
            m = tf.raw_ops.TensorListGetItem(input_handle=masks, index=i, element_shape=[3],
                                             element_dtype=tf.bool, name="m")
            v = tf.raw_ops.TensorListGetItem(input_handle=xs, index=i, element_shape=[3],
                                             element_dtype=tf.float32, name="v")
            return i + 1, tf.where(m, tf.tanh(h + v), h)
        _, h = tf.while_loop(lambda i, h: i < 4, body, (tf.constant(0), tf.zeros([3])),
                             name="loop")
        tf.identity(h, name="out")
    gd = _lowered(build)
    placed = place(gd, fetches=["out"])
    for n in placed.node:                    # the bool list's ops have no NPU kernel: CPU
        if n.name in ("masks", "loop/m"):
            n.device = CPU
    out = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    nodes = {n.name: n for n in out.node}
    plumbing_ops = ("Enter", "Merge", "Switch", "NextIteration", "Exit", "Identity")

    def origin(n):                           # the list a plumbing node passes on
        while n.op in plumbing_ops:
            n = nodes[n.input[0].split(":")[0]]
        return n.name
    plumbing = [n for n in out.node if n.op in plumbing_ops
                and n.attr["T"].type == tf.variant.as_datatype_enum]
    assert {origin(n) for n in plumbing} == {"masks", "xs"}
    for n in plumbing:
        assert n.device == (CPU if origin(n) == "masks" else NPU), n.name
    feeds = {"x": R.standard_normal((4, 3)).astype(np.float32),
             "mask": R.random((4, 3)) > 0.4}
    check_runs_like_tf(gd, out, feeds, ["out:0"])


def test_report_registry():
    gd, fetches, _ = traced(lambda x: tf.exp(x), X)
    partition(gd, fetches)
    r = reports.last()
    assert reports.recent(1) == [r] and r in reports.recent()
    assert len(reports.recent()) <= reports.MAX_REPORTS
    json.dumps(r.to_dict())
    assert "npu_cluster_0" in r.summary()
    assert {n.node for n in r.fallbacks()} == {"x", "Identity"}
