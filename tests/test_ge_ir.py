"""GE graph IR: GraphDef import/export round trip, signatures, attrs, structural checks."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.graph import Graph
from graph_engine.compiler.graphdef import export_graph_def, import_graph_def, parse_input
from graph_engine.compiler.node import Node
from graph_engine.compiler import gc_pause
from graph_engine.compiler.partition.cycles import GraphCycles
from graph_engine.compiler.signature import signature


def _function_graph():
    @tf.function
    def f(x, n):
        a, b = tf.split(x, 2, axis=1)
        parts = tf.unstack(a, axis=0)
        s0, s1 = tf.shape_n([a, b])
        with tf.control_dependencies([tf.debugging.assert_positive(n)]):
            y = tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 2.0), (0, b))[1]
        return tf.concat(parts, 0), y, s0 + s1
    return f.get_concrete_function(tf.TensorSpec([2, 4]), tf.TensorSpec([], tf.int32)).graph


def _lowered_loop_graph():
    """TF1 control flow: Enter/Merge/Switch/NextIteration/Exit, a cyclic GraphDef."""
    from tensorflow.python.ops import control_flow_v2_toggles
    control_flow_v2_toggles.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as g:
            x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
            tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.nn.relu(v @ x)),
                          (tf.constant(0), x), name="loop")
        return g.as_graph_def()
    finally:
        control_flow_v2_toggles.enable_control_flow_v2()


@pytest.mark.parametrize("make", [lambda: _function_graph().as_graph_def(), _lowered_loop_graph],
                         ids=["function", "lowered_while"])
def test_graphdef_round_trip_is_lossless(make):
    gd = make()
    back = export_graph_def(import_graph_def(gd.SerializeToString()))
    assert back == gd


def test_output_dtypes_follow_list_args():
    g = import_graph_def(_function_graph().as_graph_def())
    by_op = {n.op: n for n in g}
    assert [v.dtype for v in by_op["ShapeN"].outputs] == [dt.DT_INT32] * 2
    assert len(by_op["Unpack"].outputs) == 2
    assert [v.dtype for v in by_op["Split"].outputs] == [dt.DT_FLOAT] * 2
    while_types = [v.dtype for v in by_op["StatelessWhile"].outputs]    # counter, max, i, v, n
    assert while_types == [dt.DT_INT32] * 3 + [dt.DT_FLOAT, dt.DT_INT32]


def test_unknown_op_gets_outputs_from_references():
    gd = graph_pb2.GraphDef()
    gd.node.add(name="c", op="MyCustomOp")
    gd.node.add(name="use", op="Identity", input=["c:2", "^c"]).attr["T"].type = dt.DT_FLOAT
    g = import_graph_def(gd)
    assert len(g["c"].outputs) == 3 and g["c"].outputs[2].dtype is None
    assert g["use"].inputs[0].ref == "c:2" and g["use"].control_inputs == [g["c"]]


def test_bad_references_are_named():
    gd = graph_pb2.GraphDef()
    gd.node.add(name="use", op="Identity", input=["missing:1"])
    with pytest.raises(CompileError, match="'missing:1' names no node.*'use'|'use'.*missing:1"):
        import_graph_def(gd)
    with pytest.raises(CompileError, match="not a serialized tensorflow.GraphDef"):
        import_graph_def(b"\xff\xff\xff")


def test_parse_input():
    assert parse_input("a/b:3") == ("a/b", 3)
    assert parse_input("^a:b") == ("a:b", -1)
    assert parse_input("a") == ("a", 0)


def test_topo_order_rejects_cycles():
    g = import_graph_def(_lowered_loop_graph())
    with pytest.raises(CompileError, match="cycle"):
        g.topo_order()



def test_topo_order_becomes_the_graphs_order():
    """A node added after the nodes that read it: the sort reorders, and the graph keeps that
    order (the next pass's sort is a linear check), stable for independent nodes."""
    g = Graph()
    a = g.add(Node("a", "_Arg", output_dtypes=[dt.DT_FLOAT]))
    late = Node("late", "Exp", output_dtypes=[dt.DT_FLOAT])
    use = g.add(Node("use", "Neg", inputs=[late.outputs[0]], output_dtypes=[dt.DT_FLOAT]))
    other = g.add(Node("other", "Neg", inputs=[a.outputs[0]], output_dtypes=[dt.DT_FLOAT]))
    late.inputs.append(a.outputs[0])
    g.add(late)
    want = ["a", "other", "late", "use"]
    assert [n.name for n in g.topo_order()] == want
    assert list(g.nodes) == want and [n.name for n in g] == want
    assert [n.name for n in g.topo_order()] == want
    assert use.inputs[0].node is late and other.inputs[0].node is a

@pytest.mark.parametrize("value", [3, 2.5, True, "SAME", [1, 2], [0.5, 1.5]])
def test_attr_round_trip(value):
    assert attr_util.to_python(attr_util.make(value)) == value


def test_typed_attrs_and_tensors():
    assert attr_util.to_python(attr_util.make(type=dt.DT_HALF)) == dt.DT_HALF
    assert attr_util.to_python(attr_util.make(types=[1, 3])) == [1, 3]
    assert attr_util.to_python(attr_util.make(shape=[2, -1])) == [2, -1]
    assert attr_util.to_python(attr_util.make(shapes=[[2], []])) == [[2], []]
    for dtype in (dt.DT_BFLOAT16, dt.DT_HALF, dt.DT_INT64, dt.DT_BOOL):
        a = np.arange(6).reshape(2, 3).astype(dt.numpy_dtype(dtype))
        back = attr_util.to_python(attr_util.make(tensor=a))
        assert back.dtype == a.dtype and (back == a).all()


def test_graph_cycles_refuses_contraction_with_a_second_path():
    c = GraphCycles(4)                      # 0 -> 1 -> 2, 0 -> 2, 2 -> 3
    for a, b in [(0, 1), (1, 2), (0, 2), (2, 3)]:
        assert c.add_edge(a, b)
    assert c.contract(0, 2) is None         # 0 -> 1 -> 2 would become a cycle
    kept = c.contract(0, 1)
    assert kept in (0, 1)
    kept = c.contract(kept, 2)
    kept = c.contract(kept, 3)
    assert kept in (0, 1, 2, 3)
    assert all(c.out[x] == set() and c.inn[x] == set() for x in range(4))
    d = GraphCycles(3)
    assert d.add_edge(2, 0) and d.add_edge(0, 1)      # reorders ranks
    assert not d.add_edge(1, 2)                       # would close 2 -> 0 -> 1 -> 2
    assert d.reachable(2, 1) and not d.reachable(1, 2)


def _paths(edges, n):
    """Transitive closure of `edges` over nodes 0..n-1 (brute force)."""
    reach = [set() for _ in range(n)]
    for _ in range(n):
        for a, b in edges:
            reach[a] |= {b} | reach[b]
    return reach


@pytest.mark.parametrize("seed", range(20))
def test_graph_cycles_agrees_with_brute_force(seed):
    """Random edges, contractions and sibling merges: every answer of GraphCycles (the
    partitioner's two-sided reachability search) matches the closure of the edges it holds."""
    rng = np.random.default_rng(seed)
    n = 40
    c, alive = GraphCycles(n), set(range(n))
    for _ in range(300):
        if len(alive) < 2:
            break
        a, b = (int(x) for x in rng.choice(sorted(alive), 2, replace=False))
        edges = [(x, y) for x in alive for y in c.out[x]]
        reach = _paths(edges, n)
        assert c.reachable(a, b) == (b in reach[a])
        kind = rng.integers(3)
        if kind == 0:
            assert c.add_edge(a, b) == (a not in reach[b])
        elif kind == 1 and b in c.out[a]:
            others = _paths([e for e in edges if e != (a, b)], n)
            kept = c.contract(a, b)
            if kept is not None:
                assert b not in others[a] and kept in (a, b)
                alive.discard(b if kept == a else a)
            else:
                assert b in others[a]
        elif kind == 2:
            kept = c.merge(a, b)
            if kept is not None:
                assert b not in reach[a] and a not in reach[b] and kept in (a, b)
                alive.discard(b if kept == a else a)
            else:
                assert b in reach[a] or a in reach[b]
        for x in alive:                     # ranks stay a topological order
            assert all(c.rank[x] < c.rank[y] for y in c.out[x])


def test_signature_follows_the_attrs_that_size_its_args():
    def attrs(n, t):
        return {"N": attr_util.make(n), "T": attr_util.make(type=t),
                "Tidx": attr_util.make(type=dt.DT_INT32)}
    two, three = signature("ConcatV2", attrs(2, dt.DT_FLOAT)), signature("ConcatV2", attrs(3, dt.DT_HALF))
    assert two.input_names == ["values", "values", "axis"]
    assert two.input_dtypes == [dt.DT_FLOAT, dt.DT_FLOAT, dt.DT_INT32]
    assert three.input_dtypes == [dt.DT_HALF] * 3 + [dt.DT_INT32]
    assert signature("ConcatV2", attrs(2, dt.DT_FLOAT)) == two
    assert signature("NoSuchOpAnywhere", {}) is None


def test_disposed_graph_is_freed_without_the_cyclic_collector():
    import gc
    import weakref
    from graph_engine.compiler.graph import Graph
    from graph_engine.compiler.node import Node
    g = Graph()
    x = g.add(Node("x", "_Arg", output_dtypes=[dt.DT_FLOAT]))
    neg = g.add(Node("neg", "Neg", inputs=x.outputs, output_dtypes=[dt.DT_FLOAT]))
    g.add(Node("y", "_Retval", inputs=neg.outputs))
    g.remove(neg)                            # removed nodes are released too
    refs = [weakref.ref(n) for n in list(g) + [neg]]
    del x, neg
    gc.disable()
    try:
        g.dispose()
        assert not g.nodes
        del g
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_gc_pause_nests_and_restores_the_collector():
    import gc
    import threading
    assert gc.isenabled()
    inner_done, release = threading.Event(), threading.Event()

    def other():                             # a concurrent compile ends first
        with gc_pause.paused():
            inner_done.set()
            release.wait(30)

    with gc_pause.paused():
        t = threading.Thread(target=other)
        t.start()
        assert inner_done.wait(30) and not gc.isenabled()
        release.set()
        t.join(30)
        assert not gc.isenabled()            # still paused: this compile is running
    assert gc.isenabled()
    gc.disable()                             # a program that turned the collector off
    try:
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
