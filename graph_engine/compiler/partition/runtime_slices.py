"""`x[i]` with an `i` known only at run time (a loop counter, a function argument) as gathers,
and its gradient as a select under a one-hot mask.

A StridedSlice's begin/end are compile-time-constant inputs: a cluster would read them at run
time and compile once per value (rewrite.compile_time_values), which for a loop counter means a
compile per iteration. Where the slice's shape cannot depend on those values -- every sliced
dimension is either shrunk (`x[i]`) or taken whole (`x[:, i]`, stride 1), no ellipsis or new
axis -- the slice is the same as one GatherV2 per shrunk dimension with the index as ordinary
data, so the cluster compiles once. Negative indices wrap as StridedSlice's do; an index out of
range is an error in both (the NPU's gather kernel checks it).

Slices whose begin folds at compile time anyway (constants, values computed from shapes) are
left alone. The rewritten nodes keep the slice's device and, for the constants they add, its
control inputs (a constant inside a lowered loop must stay in the loop's frame).
"""
import numpy as np

from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.node import Node
from graph_engine.compiler.partition import candidates
from graph_engine.ops.base import Op


def bits(mask, n):
    return [bool(mask >> d & 1) for d in range(n)]


def const_value(v):
    return v.node.attr("value") if v.node.op == "Const" else None


def folds_at_compile_time(v, seen=None):
    """Whether Value v will be known when its cluster compiles: it comes from constants and
    shapes only, through ops the compiler can evaluate."""
    seen = set() if seen is None else seen
    if v.node in seen:
        return True
    seen.add(v.node)
    n = v.node
    if n.op == "Const":
        return True
    op = ops.get(n.op)
    if op is None or op.internal or not op.foldable:
        return False
    if type(op).value_from_shapes is not Op.value_from_shapes:
        return True                      # Shape, Size, Rank ...: from shapes alone
    return all(folds_at_compile_time(u, seen) for u in n.inputs)


def _shrunk_dims(n):
    """The dims a qualifying slice shrinks, else None."""
    if n.op not in ("StridedSlice", "StridedSliceGrad") or n.attr("ellipsis_mask", 0) or \
            n.attr("new_axis_mask", 0):
        return None
    strides = const_value(n.inputs[3])
    if strides is None or strides.ndim != 1 or not np.all(strides == 1):
        return None
    k = strides.shape[0]
    shrink = bits(n.attr("shrink_axis_mask", 0), k)
    whole = [b and e for b, e in zip(bits(n.attr("begin_mask", 0), k),
                                     bits(n.attr("end_mask", 0), k))]
    if not any(shrink) or not all(s or w for s, w in zip(shrink, whole)):
        return None
    return [d for d in range(k) if shrink[d]]


class Builder:
    """Adds nodes next to `anchor`: same device; constants also take its controls."""

    def __init__(self, g, anchor, constant_input=3):
        self.g, self.anchor = g, anchor
        # those of a constant input of the anchor (StridedSlice's strides): a constant inside a
        # lowered loop must stay in the loop's frame
        self.controls = list(anchor.inputs[constant_input].node.control_inputs)

    def node(self, op, inputs, out_dtype, name=None, **attrs):
        """attrs: ints as they are, DataTypes as ("type", dtype)."""
        values = {k: attr_util.make(type=v[1]) if isinstance(v, tuple) else attr_util.make(v)
                  for k, v in attrs.items()}
        n = Node(name or self.g.unique_name(f"{self.anchor.name}/runtime_index/{op}"), op,
                 device=self.anchor.device, inputs=inputs, output_dtypes=[out_dtype],
                 attrs=values)
        return self.g.add(n).outputs[0]

    def const(self, value, dtype):
        array = np.asarray(value, dt.numpy_dtype(dtype))
        n = Node(self.g.unique_name(f"{self.anchor.name}/runtime_index/Const"), "Const",
                 device=self.anchor.device, control_inputs=self.controls, output_dtypes=[dtype],
                 attrs={"dtype": attr_util.make(type=dtype),
                        "value": attr_util.make(tensor=array)})
        return self.g.add(n).outputs[0]

    def element(self, vector, d, dtype):
        """vector[d] as a scalar."""
        c = [self.const([d], dtype), self.const([d + 1], dtype), self.const([1], dtype)]
        return self.node("StridedSlice", [vector] + c, dtype, T=("type", dtype),
                         Index=("type", dtype), shrink_axis_mask=1, begin_mask=0, end_mask=0,
                         ellipsis_mask=0, new_axis_mask=0)


def _rewrite(g, n, dims):
    x, begin = n.inputs[0], n.inputs[1]
    index_type, t = n.attr("Index"), n.attr("T")
    b = Builder(g, n)
    shape = b.node("Shape", [x], index_type, T=("type", t), out_type=("type", index_type))
    y = x
    original_name = n.name
    g.remove(n)                                      # its name goes to the last gather
    for j, d in enumerate(reversed(dims)):           # last first: earlier axes keep numbers
        i = b.element(begin, d, index_type)
        size = b.element(shape, d, index_type)
        negative = b.node("Less", [i, b.const(0, index_type)], dt.DT_BOOL, T=("type", index_type))
        wrapped = b.node("AddV2", [i, size], index_type, T=("type", index_type))
        i = b.node("SelectV2", [negative, wrapped, i], index_type, T=("type", index_type))
        last = j == len(dims) - 1
        y = b.node("GatherV2", [y, i, b.const(d, dt.DT_INT32)], t,
                   name=original_name if last else None, Tparams=("type", t),
                   Tindices=("type", index_type), Taxis=("type", dt.DT_INT32), batch_dims=0)
    y.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], y


def _rewrite_grad(g, n, dims):
    """StridedSliceGrad(shape, begin, end, strides, dy): dy placed at the run-time indices of
    a zero tensor of `shape`, as a select under a one-hot mask (exact zeros elsewhere, like
    TF's kernel; a multiply would turn inf/nan in dy into nan everywhere)."""
    shape, begin, dy = n.inputs[0], n.inputs[1], n.inputs[4]
    index_type, t = n.attr("Index"), n.attr("T")
    b = Builder(g, n)
    i32 = dt.DT_INT32
    rank = b.node("Size", [shape], i32, T=("type", index_type), out_type=("type", i32))
    y, mask = dy, None
    for d in dims:                                   # ascending: y gains its axes in place
        y = b.node("ExpandDims", [y, b.const(d, i32)], t, T=("type", t), Tdim=("type", i32))
        i = b.element(begin, d, index_type)
        size = b.element(shape, d, index_type)
        negative = b.node("Less", [i, b.const(0, index_type)], dt.DT_BOOL, T=("type", index_type))
        wrapped = b.node("AddV2", [i, size], index_type, T=("type", index_type))
        i = b.node("SelectV2", [negative, wrapped, i], index_type, T=("type", index_type))
        positions = b.node("Range", [b.const(0, index_type), size, b.const(1, index_type)],
                           index_type, Tidx=("type", index_type))
        hot = b.node("Equal", [positions, i], dt.DT_BOOL, T=("type", index_type),
                     incompatible_shape_error=True)
        trailing = b.node("Sub", [rank, b.const(d + 1, i32)], i32, T=("type", i32))
        ones = b.node("Fill", [b.node("Reshape", [trailing, b.const([1], i32)], i32,
                                      T=("type", i32), Tshape=("type", i32)),
                               b.const(1, i32)], i32, T=("type", i32), index_type=("type", i32))
        target = b.node("ConcatV2", [b.const([1] * d + [-1], i32), ones, b.const(0, i32)], i32,
                        T=("type", i32), Tidx=("type", i32), N=2)
        hot = b.node("Reshape", [hot, target], dt.DT_BOOL, T=("type", dt.DT_BOOL),
                     Tshape=("type", i32))
        mask = hot if mask is None else b.node("LogicalAnd", [mask, hot], dt.DT_BOOL)
    g.remove(n)
    zero = b.const(0, t)
    out = b.node("SelectV2", [mask, y, zero], t, name=n.name, T=("type", t))
    out.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], out


def rewrite(g):
    """Rewrites qualifying slices in Graph g in place; returns how many."""
    todo = []
    for n in g:
        if candidates.device_type(n.device) != "NPU" or candidates.PRESERVE_ATTR in n.attrs:
            continue
        dims = _shrunk_dims(n)
        if dims is not None and not folds_at_compile_time(n.inputs[1]):
            todo.append((n, dims))
    return apply(g, todo, lambda n, dims: (_rewrite if n.op == "StridedSlice" else
                                           _rewrite_grad)(g, n, dims))


def apply(g, todo, rewrite_one):
    """Replaces each (node, spec) of `todo` by rewrite_one(node, spec) -> (old Value, new Value):
    its data and control users move to the new value's node; returns how many."""
    if not todo:
        return 0
    users, control_users = g.data_consumers(), g.control_consumers()
    for n, spec in todo:
        old, new = rewrite_one(n, spec)
        g.replace_uses(old, new, users)
        for c in control_users.get(n, ()):
            c.control_inputs = [new.node if p is n else p for p in c.control_inputs]
    return len(todo)
