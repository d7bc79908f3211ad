"""Canonicalization passes on small IR graphs: common-subexpression elimination, algebraic
simplification, constant folding, identity and dead-code elimination. Every rewrite is checked
to be exact: the graph evaluated with the numpy references gives bit-identical results before
and after (NaN and inf inputs included), and deliberately unmatched cases stay unchanged."""
import numpy as np
import pytest

from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.graph import Graph
from graph_engine.compiler.kernel_attrs import kernel_attrs, split_inputs
from graph_engine.compiler.node import Node
from graph_engine.compiler.pass_manager import Compilation
from graph_engine.compiler.passes.fusion import contraction_epilogue
from graph_engine.compiler.passes import (eliminate_common_subexpressions, eliminate_dead_code,
                                          eliminate_identities, fold_constants, infer_shapes,
                                          simplify_algebra)

F32, I32 = dt.DT_FLOAT, dt.DT_INT32
TYPE_ATTRS = ("T", "Tshape", "Tperm", "Tidx", "Tpaddings", "Tmultiples", "SrcT", "DstT",
              "Index", "Tdim", "dtype")
# inputs with inf, nan and signed zeros: an inexact rewrite shows up as a bit difference
SPECIAL = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 3e38], np.float32)


class Builder:
    """A graph of _Arg -> ops -> _Retval nodes with TF attrs, for one pass at a time."""

    def __init__(self):
        self.g, self.shapes, self.feeds = Graph(), [], []

    def _add(self, op, inputs=(), out_dtypes=(), attrs=None, control=()):
        attrs = {k: attr_util.make(type=v) if k in TYPE_ATTRS else attr_util.make(v)
                 for k, v in (attrs or {}).items()}
        node = self.g.add(Node(self.g.unique_name(op.lower()), op, inputs=inputs,
                               output_dtypes=out_dtypes, attrs=attrs, control_inputs=control))
        return node

    def arg(self, value):
        value = np.asarray(value)
        dtype = dt.from_numpy(value.dtype)
        i = len(self.shapes)
        self.shapes.append(value.shape)
        self.feeds.append(value)
        return self._add("_Arg", out_dtypes=[dtype], attrs={"T": dtype, "index": i}).outputs[0]

    def const(self, value, dtype=F32):
        value = np.asarray(value, dt.numpy_dtype(dtype))
        node = self.g.add(Node(self.g.unique_name("const"), "Const", output_dtypes=[dtype],
                               attrs={"dtype": attr_util.make(type=dtype),
                                      "value": attr_util.make(
                                          tensor=attr_util.numpy_to_tensor(value, dtype))}))
        return node.outputs[0]

    def op(self, op, *inputs, out=None, control=(), n_out=1, **attrs):
        attrs.setdefault("T", inputs[0].dtype)
        attrs = {k: v for k, v in attrs.items() if v is not None}    # T=None: op has no T
        dtype = out if out is not None else inputs[0].dtype
        return self._add(op, list(inputs), [dtype] * n_out, attrs, control).outputs[0]

    def ret(self, *values):
        for i, v in enumerate(values):
            self._add("_Retval", [v], attrs={"T": v.dtype, "index": i})
        c = Compilation(name="test", graph=self.g, input_shapes=list(self.shapes))
        infer_shapes.run(c)
        return c


def evaluate(c, feeds):
    """The outputs of the IR graph, computed node by node with the numpy references."""
    env = {}
    for node in c.graph.topo_order():
        if node.op == "_Arg":
            env[node.outputs[0]] = feeds[node.attr("index")]
        elif node.op == "Const":
            env[node.outputs[0]] = node.attr("value")
        elif node.op not in ("_Retval", "NoOp"):
            op = ops.get(node.op)
            data = split_inputs(node, op)[0]
            outs = ops.evaluate(op, [env[v] for v in data], kernel_attrs(node, op),
                                [v.dtype for v in node.outputs])
            env.update(zip(node.outputs, outs))
    return [env[r.inputs[0]] for r in c.graph.retvals()]


def ops_in(c):
    return sorted(n.op for n in c.graph if n.op not in ("_Arg", "_Retval", "Const"))


def run_exact(c, feeds, *passes, zero_sign=True):
    """Runs the passes (then DCE), checks identical results (NaN where NaN was, the same sign
    of zero unless zero_sign=False) and returns the merged stats."""
    before = evaluate(c, feeds)
    stats = {}
    for p in passes + (eliminate_dead_code,):
        stats.update(p.run(c) or {})
    after = evaluate(c, feeds)
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(a, b)
        if zero_sign and a.dtype.kind == "f":
            zeros = a == 0                       # (NaN sign bits carry no meaning)
            np.testing.assert_array_equal(np.signbit(a[zeros]), np.signbit(b[zeros]))
    return stats


def simplify(c, feeds, zero_sign=True):
    """simplify_algebra's stats (the rules that fired)."""
    stats = run_exact(c, feeds, simplify_algebra, zero_sign=zero_sign)
    stats.pop("removed")
    return stats


# ---- algebraic simplification ------------------------------------------------------------

@pytest.mark.parametrize("op,neutral,const_first", [
    ("Mul", 1.0, False), ("Mul", 1.0, True), ("RealDiv", 1.0, False), ("Div", 1.0, False),
    ("AddV2", 0.0, False), ("Add", 0.0, True), ("Sub", 0.0, False)])
def test_neutral_elements_are_removed(op, neutral, const_first):
    b = Builder()
    x = b.arg(SPECIAL.reshape(2, 4))
    one = b.const(np.full((4,), neutral))             # broadcasts, but into x's own shape
    c = b.ret(b.op(op, one, x) if const_first else b.op(op, x, one))
    # -0 + 0 is +0 in IEEE; x + 0 -> x keeps -0 (equal values, as Grappler does)
    stats = simplify(c, b.feeds, zero_sign=op not in ("Add", "AddV2"))
    assert ops_in(c) == [] and sum(stats.values()) == 1


@pytest.mark.parametrize("op,neutral", [("AddV2", 0.0), ("Mul", 1.0), ("Sub", 0.0)])
def test_neutral_constant_that_broadcasts_the_result_stays(op, neutral):
    b = Builder()
    x = b.arg(SPECIAL[:4])
    c = b.ret(b.op(op, x, b.const(np.full((3, 4), neutral))))    # result [3, 4], x is [4]
    simplify(c, b.feeds)
    assert ops_in(c) == [op]


@pytest.mark.parametrize("op,value", [("Mul", 0.0), ("Sub", 0.0), ("RealDiv", 2.0),
                                      ("AddV2", 1.0), ("Mul", -1.0)])
def test_non_neutral_constants_stay(op, value):
    b = Builder()
    x = b.arg(SPECIAL)
    const = b.const(np.full((8,), value))
    # 0 - x is not Neg(x) (signed zero); x * 0 is not 0 (inf, NaN)
    c = b.ret(b.op(op, const, x) if op == "Sub" else b.op(op, x, const))
    simplify(c, b.feeds)
    assert ops_in(c) == [op]


def test_x_minus_x_and_x_times_zero_are_not_folded():
    b = Builder()
    x = b.arg(SPECIAL)
    c = b.ret(b.op("Sub", x, x), b.op("Mul", x, b.const(np.zeros(8))))
    simplify(c, b.feeds)
    assert ops_in(c) == ["Mul", "Sub"]


def test_integer_neutral_elements():
    b = Builder()
    x = b.arg(np.arange(-3, 3, dtype=np.int32))
    c = b.ret(b.op("Div", b.op("Mul", x, b.const([1], I32)), b.const(1, I32)))
    simplify(c, b.feeds)
    assert ops_in(c) == []


def test_involutions_and_negated_operands():
    b = Builder()
    x, y = b.arg(SPECIAL), b.arg(SPECIAL[::-1].copy())
    nn = b.op("Neg", b.op("Neg", x))
    c = b.ret(nn, b.op("AddV2", x, b.op("Neg", y)), b.op("Sub", x, b.op("Neg", y)),
              b.op("AddV2", b.op("Neg", y), x),
              b.op("LogicalNot", b.op("LogicalNot", b.arg(np.array([True, False])))))
    stats = simplify(c, b.feeds)
    assert ops_in(c) == ["AddV2", "Sub", "Sub"]
    assert stats["Neg(Neg(x))"] == 1 and stats["LogicalNot(LogicalNot(x))"] == 1


def test_squares():
    b = Builder()
    x = b.arg(SPECIAL)
    c = b.ret(b.op("Mul", x, x), b.op("Pow", x, b.const(2.0)), b.op("Pow", x, b.const(1.0)),
              b.op("Pow", x, b.const(0.5)))
    stats = simplify(c, b.feeds)
    assert ops_in(c) == ["Pow", "Square", "Square"]       # Pow(x, 0.5) is not Sqrt
    assert stats == {"Mul(x, x)": 1, "Pow(x, 2)": 1, "Pow(x, 1)": 1}


def test_addn_of_two_becomes_addv2_which_the_epilogue_fusion_takes_up():
    """A recurrent backward pass accumulates a weight's gradient as AddN(sum, MatMul(...))."""
    b = Builder()
    rng = np.random.default_rng(0)
    x, w, acc = (b.arg(rng.standard_normal(s).astype(np.float32)) for s in ((3, 4), (4, 5), (3, 5)))
    mm = b.op("MatMul", x, w, transpose_a=False, transpose_b=False)
    c = b.ret(b.op("AddN", acc, mm, N=2), b.op("AddN", acc, acc, acc, N=3))
    assert simplify(c, b.feeds) == {"AddN(x, y)": 1}
    assert ops_in(c) == ["AddN", "AddV2", "MatMul"]          # three inputs: stays AddN
    run_exact(c, b.feeds, contraction_epilogue)
    assert ops_in(c) == ["AddN", "NpuFusedMatMul"]


def test_pow_with_an_exponent_that_broadcasts_stays():
    b = Builder()
    x = b.arg(SPECIAL[:4])
    c = b.ret(b.op("Pow", x, b.const(np.ones((2, 4)))))
    simplify(c, b.feeds)
    assert ops_in(c) == ["Pow"]


def test_transposes_compose_and_cancel():
    b = Builder()
    x = b.arg(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    t1 = b.op("Transpose", x, b.const([1, 2, 0], I32), Tperm=I32)
    composed = b.op("Transpose", t1, b.const([0, 2, 1], I32), Tperm=I32)
    cancelled = b.op("Transpose", t1, b.const([2, 0, 1], I32), Tperm=I32)
    c = b.ret(composed, cancelled)
    stats = simplify(c, b.feeds)
    assert ops_in(c) == ["Transpose"]                    # the composed one reads x directly
    (t,) = [n for n in c.graph if n.op == "Transpose"]
    assert t.inputs[0] is x and list(t.inputs[1].const) == [1, 0, 2]
    assert stats["Transpose(Transpose(x))"] == 2 and stats["Transpose(x, identity)"] == 1


def test_transpose_that_keeps_the_shape_but_moves_data_stays():
    b = Builder()
    x = b.arg(np.arange(9, dtype=np.float32).reshape(3, 3))
    c = b.ret(b.op("Transpose", x, b.const([1, 0], I32), Tperm=I32))
    simplify(c, b.feeds)
    assert ops_in(c) == ["Transpose"]


def test_reshape_chains_collapse():
    b = Builder()
    x = b.arg(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    r1 = b.op("Reshape", x, b.const([6, 4], I32), Tshape=I32)
    e = b.op("ExpandDims", r1, b.const(0, I32), Tdim=I32)
    r2 = b.op("Reshape", e, b.const([4, 6], I32), Tshape=I32)
    back = b.op("Reshape", r1, b.const([2, 3, 4], I32), Tshape=I32)
    c = b.ret(r2, back)
    simplify(c, b.feeds)
    assert ops_in(c) == ["Reshape"]                      # r2 reads x; `back` is x itself
    (r,) = [n for n in c.graph if n.op == "Reshape"]
    assert r.inputs[0] is x


@pytest.mark.parametrize("make", [
    lambda b, x: b.op("Reshape", x, b.const([2, 4], I32), Tshape=I32),
    lambda b, x: b.op("Squeeze", x, squeeze_dims=[]),
    lambda b, x: b.op("Tile", x, b.const([1, 1], I32), Tmultiples=I32),
    lambda b, x: b.op("Pad", x, b.const([[0, 0], [0, 0]], I32), Tpaddings=I32),
    lambda b, x: b.op("PadV2", x, b.const([[0, 0], [0, 0]], I32), b.const(7.0),
                      Tpaddings=I32),
    lambda b, x: b.op("MirrorPad", x, b.const([[0, 0], [0, 0]], I32), Tpaddings=I32,
                      mode="REFLECT"),
    lambda b, x: b.op("Slice", x, b.const([0, 0], I32), b.const([2, -1], I32), Index=I32),
    lambda b, x: b.op("BroadcastTo", x, b.const([2, 4], I32), Tidx=I32),
    lambda b, x: b.op("ConcatV2", x, b.const(1, I32), N=1, Tidx=I32),
    lambda b, x: b.op("Cast", x, SrcT=F32, DstT=F32, T=None, Truncate=False),
    lambda b, x: b.op("AddN", x, N=1),
    lambda b, x: b.op("Sum", x, b.const([], I32), Tidx=I32, keep_dims=False),
    lambda b, x: b.op("Max", b.op("Reshape", x, b.const([2, 1, 4], I32), Tshape=I32),
                      b.const([1], I32), Tidx=I32, keep_dims=True),
], ids=["Reshape", "Squeeze", "Tile", "Pad", "PadV2", "MirrorPad", "Slice", "BroadcastTo",
        "ConcatV2", "Cast", "AddN", "Sum-no-axes", "Max-size-1-axis"])
def test_ops_that_do_nothing_become_their_input(make, request):
    b = Builder()
    x = b.arg(SPECIAL.reshape(2, 4))
    y = make(b, x)
    c = b.ret(y)
    # a reduction over no axes gives +0 for -0 (0 + -0); forwarding keeps -0
    simplify(c, b.feeds, zero_sign="Sum" not in request.node.callspec.id)
    assert y.node.op not in ops_in(c) and ops_in(c) in ([], ["Reshape"])


@pytest.mark.parametrize("make", [
    lambda b, x: b.op("Tile", x, b.const([2, 1], I32), Tmultiples=I32),
    lambda b, x: b.op("Pad", x, b.const([[0, 1], [0, 0]], I32), Tpaddings=I32),
    lambda b, x: b.op("Slice", x, b.const([1, 0], I32), b.const([1, -1], I32), Index=I32),
    lambda b, x: b.op("Cast", x, SrcT=F32, DstT=dt.DT_HALF, T=None, Truncate=False,
                      out=dt.DT_HALF),
    lambda b, x: b.op("AddN", x, x, N=2),
    lambda b, x: b.op("ConcatV2", x, x, b.const(0, I32), N=2, Tidx=I32),
    lambda b, x: b.op("Sum", x, b.const([1], I32), Tidx=I32, keep_dims=True),
], ids=["Tile", "Pad", "Slice", "Cast", "AddN", "ConcatV2", "Sum"])
def test_ops_that_do_something_stay(make):
    b = Builder()
    x = b.arg(SPECIAL.reshape(2, 4))
    c = b.ret(make(b, x))
    simplify(c, b.feeds)
    assert len(ops_in(c)) == 1


# ---- common-subexpression elimination ------------------------------------------------------

def test_cse_merges_identical_nodes_and_chains():
    b = Builder()
    x, y = b.arg(SPECIAL), b.arg(SPECIAL[::-1].copy())
    a1 = b.op("Exp", b.op("AddV2", x, y))
    a2 = b.op("Exp", b.op("AddV2", x, y))
    c = b.ret(b.op("Mul", a1, a2), b.op("AddV2", y, x))    # operand order matters
    stats = run_exact(c, b.feeds, eliminate_common_subexpressions)
    assert stats["merged"] == 2
    assert ops_in(c) == ["AddV2", "AddV2", "Exp", "Mul"]
    (mul,) = [n for n in c.graph if n.op == "Mul"]
    assert mul.inputs[0] is mul.inputs[1]


def test_cse_merges_equal_constants_only():
    b = Builder()
    x = b.arg(SPECIAL)
    c = b.ret(b.op("Mul", x, b.const(np.full(8, 2.0))), b.op("AddV2", x, b.const(np.full(8, 2.0))),
              b.op("Sub", x, b.const(np.full(8, 3.0))),
              b.op("Cast", b.const(np.full(8, 2), I32), SrcT=I32, DstT=F32, T=None, out=F32))
    consts_before = sum(n.op == "Const" for n in c.graph)
    stats = run_exact(c, b.feeds, eliminate_common_subexpressions)
    assert stats["merged"] == 1 and sum(n.op == "Const" for n in c.graph) == consts_before - 1


def test_cse_respects_attrs_and_control_inputs():
    b = Builder()
    x = b.arg(np.arange(12, dtype=np.float32).reshape(3, 4))
    axis = b.const([1], I32)
    s1 = b.op("Sum", x, axis, Tidx=I32, keep_dims=False)
    s2 = b.op("Sum", x, axis, Tidx=I32, keep_dims=True)            # other attr
    gate = b.op("Neg", x)
    s3 = b.op("Sum", x, axis, Tidx=I32, keep_dims=False, control=[gate.node])  # other control
    c = b.ret(s1, s2, s3, gate)
    stats = run_exact(c, b.feeds, eliminate_common_subexpressions)
    assert stats["merged"] == 0 and ops_in(c).count("Sum") == 3


def test_cse_redirects_control_consumers():
    b = Builder()
    x = b.arg(SPECIAL)
    n1, n2 = b.op("Neg", x), b.op("Neg", x)
    c = b.ret(n1, b.op("Exp", x, control=[n2.node]))
    eliminate_common_subexpressions.run(c)
    (exp,) = [n for n in c.graph if n.op == "Exp"]
    assert exp.control_inputs == [n1.node]


def test_cse_never_merges_random_or_stateful_ops():
    b = Builder()
    shape = b.const([4], I32)
    r1 = b._add("RandomUniform", [shape], [F32], {"T": I32, "dtype": F32, "seed": 1,
                                                  "seed2": 2}).outputs[0]
    r2 = b._add("RandomUniform", [shape], [F32], {"T": I32, "dtype": F32, "seed": 1,
                                                  "seed2": 2}).outputs[0]
    b.arg(SPECIAL)
    g = b.g
    for i, v in enumerate((r1, r2)):
        b._add("_Retval", [v], attrs={"T": F32, "index": i})
    c = Compilation(name="test", graph=g, input_shapes=list(b.shapes))
    stats = eliminate_common_subexpressions.run(c)    # no shape inference needed
    assert stats["merged"] == 0 and sum(n.op == "RandomUniform" for n in g) == 2
    assert eliminate_common_subexpressions._stateful("RandomUniform", None, {})
    assert not eliminate_common_subexpressions._stateful("StatelessRandomUniformV2", None, {})


def test_cse_keeps_graph_inputs_and_outputs():
    b = Builder()
    x = b.arg(SPECIAL)
    b.arg(SPECIAL)                         # an unused second input keeps its position
    c = b.ret(x, x)
    assert run_exact(c, b.feeds, eliminate_common_subexpressions)["merged"] == 0
    assert [n.attr("index") for n in c.graph.args()] == [0, 1]
    assert len(c.graph.retvals()) == 2


# ---- folding, identities, dead code -------------------------------------------------------

def test_fold_constants_folds_small_results_and_reports_them():
    b = Builder()
    x = b.arg(SPECIAL)
    k = b.op("Mul", b.const(np.full(8, 3.0)), b.const(np.full(8, 2.0)))
    c = b.ret(b.op("AddV2", x, k))
    stats = run_exact(c, b.feeds, fold_constants)
    assert stats["folded"] == 1 and ops_in(c) == ["AddV2"]


def test_fold_constants_does_not_materialize_huge_results():
    b = Builder()
    x = b.arg(np.float32(1.0))
    n = infer_shapes.FOLD_LIMIT_BYTES // 4 + 1024
    big = b.op("Fill", b.const([n], I32), b.const(1.5), index_type=I32, T=F32)
    c = b.ret(b.op("Mul", big, x))
    assert big.const is None                 # too big to know at compile time
    assert fold_constants.run(c)["folded"] == 0
    assert sum(n.op == "Fill" for n in c.graph) == 1


def test_fold_constants_folds_big_results_no_bigger_than_their_constant_input():
    b = Builder()
    x = b.arg(np.float32(1.0))
    n = infer_shapes.FOLD_LIMIT_BYTES // 4 + 1024
    weights = b.const(np.linspace(-1, 1, n, dtype=np.float32))
    scaled = b.op("Mul", weights, b.const(np.float32(0.5)))   # batch-norm folding's w * scale
    c = b.ret(b.op("Mul", scaled, x))
    assert scaled.const is not None
    np.testing.assert_array_equal(scaled.const, weights.const * np.float32(0.5))


def test_identities_and_dead_code_report_counts():
    b = Builder()
    x = b.arg(SPECIAL)
    dead = b.op("Exp", x)
    b.op("Neg", dead)
    c = b.ret(b.op("Identity", b.op("StopGradient", x)))
    stats = run_exact(c, b.feeds, eliminate_identities)
    assert stats["forwarded"] == 2 and stats["removed"] == 4 and ops_in(c) == []
