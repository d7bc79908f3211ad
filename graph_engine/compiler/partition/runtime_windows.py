"""A window of fixed size at a start known only at run time (random crops: `tf.slice(x, offset,
size)`, `tf.image.random_crop`, Keras' RandomCrop `x[:, h:h + H, w:w + W, :]`) as gathers.

Slice's begin and StridedSlice's begin/end are compile-time-constant inputs: a cluster would
compile once per value (rewrite.compile_time_values), up to max_value_specializations, and then
run on the CPU. Where the window's size cannot depend on those values, the slice is one
GatherV2 per axis with the indices `start + range(size)` as ordinary data, so the cluster
compiles once:
* Slice with a size that folds at compile time and has no -1 (to the end: a size from begin);
* StridedSlice with stride 1, no ellipsis, new or shrunk axes, whose begin and end are Packs
  (Python slicing; a one-element one may be an ExpandDims) where each axis is whole (begin and end mask) or ends at `begin + c` for a
  constant c >= 0 (`AddV2(b, c)`, either operand order) with the same begin element b.
A window reaching past its axis (or a negative start) is an error here, as it is for TF's Slice;
TF's StridedSlice would clamp it to a smaller result instead, which a compiled shape cannot be
(Keras' RandomCrop never asks for one). A Slice's axes that start at a constant 0 (a Pack's
constant element) are cut by one Slice with constant inputs first, the others gathered.
"""
import numpy as np

from graph_engine.compiler.partition import candidates
from graph_engine.compiler.partition.runtime_slices import (Builder, bits, const_value,
                                                            folds_at_compile_time)
from graph_engine.ops import dtypes as dt


def _constant(v):
    """The value of Value v when it is a Const (through Identity) or a Pack of such scalars
    (Python slicing's strides before Grappler folds them), else None."""
    while v.node.op == "Identity":
        v = v.node.inputs[0]
    if v.node.op == "Pack" and v.node.attr("axis", 0) == 0:
        parts = [_constant(u) for u in v.node.inputs]
        return None if any(p is None or p.ndim for p in parts) else np.stack(parts)
    return const_value(v)


def _is_zero(v):
    c = None if v is None else _constant(v)
    return c is not None and c.ndim == 0 and c == 0


def _elements(v):
    """The scalar Values a vector Value v packs: a Pack's inputs, or an ExpandDims of a scalar at
    axis 0 (Grappler's form of a one-element Pack); else None."""
    n = v.node
    if n.op == "Pack" and n.attr("axis", 0) == 0:
        return list(n.inputs)
    if n.op == "ExpandDims" and _is_zero(n.inputs[1]):
        return [n.inputs[0]]
    return None


def _slice_windows(n):
    """Slice: [(axis, start Value or None (element `axis` of begin), size)] or None."""
    size = _constant(n.inputs[2])
    if size is None or size.ndim != 1 or np.any(size < 0):
        return None
    starts = _elements(n.inputs[1]) or [None] * size.shape[0]
    return [(d, start, int(s)) for d, (start, s) in enumerate(zip(starts, size))]


def _strided_slice_windows(n):
    """StridedSlice: [(axis, begin element Value, size)] for its windowed axes, or None."""
    if n.attr("ellipsis_mask", 0) or n.attr("new_axis_mask", 0) or n.attr("shrink_axis_mask", 0):
        return None
    begin, end, strides = _elements(n.inputs[1]), _elements(n.inputs[2]), _constant(n.inputs[3])
    if strides is None or strides.ndim != 1 or not np.all(strides == 1) or begin is None or \
            end is None:
        return None
    k = strides.shape[0]
    masks = zip(bits(n.attr("begin_mask", 0), k), bits(n.attr("end_mask", 0), k))
    windows = []
    for d, ((whole_begin, whole_end), b, e) in enumerate(zip(masks, begin, end)):
        if whole_begin and whole_end:
            continue
        if whole_begin or whole_end or e.node.op != "AddV2":
            return None
        first, second = e.node.inputs
        other = second if first is b else first if second is b else None
        c = None if other is None else _constant(other)
        if c is None or c.ndim != 0 or c < 0:
            return None
        windows.append((d, b, int(c)))
    return windows


def _window_spec(n):
    if candidates.device_type(n.device) != "NPU" or candidates.PRESERVE_ATTR in n.attrs:
        return None
    if n.op == "Slice":
        windows = _slice_windows(n)
    elif n.op == "StridedSlice":
        windows = _strided_slice_windows(n)
    else:
        return None
    if not windows or folds_at_compile_time(n.inputs[1]):
        return None
    return windows


def _rewrite(g, n, windows):
    x, begin = n.inputs[0], n.inputs[1]
    index_type, t = n.attr("Index"), n.attr("T")
    b = Builder(g, n, constant_input=2 if n.op == "Slice" else 3)
    g.remove(n)                                      # its name goes to the last node
    gathered = [(d, start, size) for d, start, size in windows if not _is_zero(start)]
    y = x
    if len(gathered) < len(windows):                 # a Slice's constant-0 starts
        sizes = [-1 if not _is_zero(start) else size for _, start, size in windows]
        y = b.node("Slice", [y, b.const([0] * len(windows), index_type),
                             b.const(sizes, index_type)], t,
                   name=None if gathered else n.name, T=("type", t),
                   Index=("type", index_type))
    for j, (d, start, size) in enumerate(gathered):
        if start is None:
            start = b.element(begin, d, index_type)
        positions = b.const(np.arange(size), index_type)
        indices = b.node("AddV2", [positions, start], index_type, T=("type", index_type))
        last = j == len(gathered) - 1
        y = b.node("GatherV2", [y, indices, b.const(d, dt.DT_INT32)], t,
                   name=n.name if last else None, Tparams=("type", t),
                   Tindices=("type", index_type), Taxis=("type", dt.DT_INT32), batch_dims=0)
    y.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], y


def rewrite(g):
    """Rewrites qualifying slices in Graph g in place; returns how many."""
    todo = [(n, w) for n in g for w in [_window_spec(n)] if w]
    if not todo:
        return 0
    users, control_users = g.data_consumers(), g.control_consumers()
    for n, windows in todo:
        old, new = _rewrite(g, n, windows)
        g.replace_uses(old, new, users)
        for c in control_users.get(n, ()):
            c.control_inputs = [new.node if p is n else p for p in c.control_inputs]
    return len(todo)
