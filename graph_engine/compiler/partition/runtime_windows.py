"""A window of fixed size at a start known only at run time (random crops: `tf.slice(x, offset,
size)`, `tf.image.random_crop`, Keras' RandomCrop `x[:, h:h + H, w:w + W, :]`) as gathers.

Slice's begin and StridedSlice's begin/end are compile-time-constant inputs: a cluster would
compile once per value (rewrite.compile_time_values), up to max_value_specializations, and then
run on the CPU. Where the window's size cannot depend on those values, the slice is one
GatherV2 per axis with the indices `start + range(size)` as ordinary data, so the cluster
compiles once:
* Slice with a size that folds at compile time and no -1 (to the end) at a run-time start;
* StridedSlice with stride 1, no ellipsis, new or shrunk axes, whose begin and end are Packs
  (Python slicing; a one-element one may be an ExpandDims) where each axis is whole (begin and
  end mask), constant (`x[:, 1:5]`, `x[-3:]`), or ends at `begin + c` for a constant c >= 0
  (`AddV2(b, c)`, either operand order) with the same begin element b.
The constant axes are cut first by one slice of the same op with constant inputs (TF's checks,
and StridedSlice's clamping, apply as before); each run-time start is then a gather. A Slice
reaching past its axis is an error there, as TF's is. TF's StridedSlice clamps its window to
the axis (a loop's ragged last chunk `x[i:i + 4]`): int32 ops that TF runs in host memory,
outside the cluster, compute the clamped start and length (_host_window), and the length is the
cluster's one compile-time value: a compile per length, not per start. A start whose range
the graph shows fits the axis (a random crop's `int(uniform * (H - h + 1))`, a modulo: _bounds)
needs none of that (host ops reading a value the cluster computes would split the cluster).

The gradients place dy at the start of a zero tensor, by a gather of dy with a zero slice in
front: StridedSliceGrad of stride 1, and TF's Slice gradient, a Pad of dy by the begin in front
and by a constant (the input's shape less the slice's, folded) less the begin behind.
"""
import functools

import numpy as np

from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.partition import candidates, runtime_slices, static_shapes
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


def _scalar(v):
    c = None if v is None else _constant(v)
    return int(c) if c is not None and c.ndim == 0 else None


def _slice_windows(n):
    """Slice: ([(axis, start Value or None (element `axis` of begin), size)] of its run-time
    starts, {axis: (start, size)} of its constant ones), or None."""
    size = _constant(n.inputs[2])
    if size is None or size.ndim != 1:
        return None
    starts = _elements(n.inputs[1]) or [None] * size.shape[0]
    windows, constants = [], {}
    for d, (start, s) in enumerate(zip(starts, size)):
        if _scalar(start) is not None:
            constants[d] = (_scalar(start), int(s))     # -1 (to the end) is TF's to check
        elif s < 0:
            return None                                 # its size depends on the start
        else:
            windows.append((d, start, int(s)))
    return windows, constants


def _strided_slice_windows(n):
    """StridedSlice: ([(axis, begin element Value, size)] of its windowed axes, {axis: (begin,
    end)} of its constant ones (None where masked)), or None."""
    if n.attr("ellipsis_mask", 0) or n.attr("new_axis_mask", 0) or n.attr("shrink_axis_mask", 0):
        return None
    begin, end, strides = _elements(n.inputs[1]), _elements(n.inputs[2]), _constant(n.inputs[3])
    if strides is None or strides.ndim != 1 or not np.all(strides == 1) or begin is None or \
            end is None:
        return None
    if n.attr("Index") != dt.DT_INT32:         # its clamped size is computed by TF's int32
        return None                               # host kernels (_host_window)
    k = strides.shape[0]
    masks = zip(bits(n.attr("begin_mask", 0), k), bits(n.attr("end_mask", 0), k))
    windows, constants = [], {}
    for d, ((whole_begin, whole_end), b, e) in enumerate(zip(masks, begin, end)):
        if whole_begin and whole_end:
            continue
        first = None if whole_begin else _scalar(b)
        last = None if whole_end else _scalar(e)
        if (whole_begin or first is not None) and (whole_end or last is not None):
            constants[d] = (first, last)         # TF's clamping applies: a constant slice
            continue
        if whole_begin or whole_end or e.node.op != "AddV2":
            return None
        x, y = e.node.inputs
        other = y if x is b else x if y is b else None
        c = _scalar(other)
        if c is None or c < 0:
            return None
        windows.append((d, b, c))
    return windows, constants


def _window_spec(n):
    if candidates.device_type(n.device) != "NPU" or candidates.PRESERVE_ATTR in n.attrs:
        return None
    if n.op == "Slice":
        windows = _slice_windows(n)
    elif n.op == "StridedSlice":
        windows = _strided_slice_windows(n)
    elif n.op == "StridedSliceGrad":
        windows = _grad_axes(n)
    else:
        return None
    if windows is None or not windows[0] or folds_at_compile_time(n.inputs[1]):
        return None
    return windows


def _constant_slice(b, n, y, constants, rank):
    """The slice's constant axes first, with constant inputs (and TF's own checks or clamping):
    a Slice of (start, size), or a StridedSlice of (begin, end), the other axes whole."""
    index_type, t = n.attr("Index"), n.attr("T")
    if n.op == "Slice":
        starts = [constants[d][0] if d in constants else 0 for d in range(rank)]
        sizes = [constants[d][1] if d in constants else -1 for d in range(rank)]
        return b.node("Slice", [y, b.const(starts, index_type), b.const(sizes, index_type)], t,
                      T=("type", t), Index=("type", index_type))
    first = [constants.get(d, (None, None))[0] for d in range(rank)]
    last = [constants.get(d, (None, None))[1] for d in range(rank)]
    mask = lambda values: sum(1 << d for d, v in enumerate(values) if v is None)  # noqa: E731
    return b.node("StridedSlice", [y, b.const([v or 0 for v in first], index_type),
                                   b.const([v or 0 for v in last], index_type),
                                   b.const([1] * rank, index_type)], t,
                  T=("type", t), Index=("type", index_type), begin_mask=mask(first),
                  end_mask=mask(last), ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)


def _host(b, op, inputs, **attrs):
    """An int32 node that TF runs in host memory outside the clusters (candidates.HOST_ATTR)."""
    v = b.node(op, inputs, dt.DT_INT32, **{"T": ("type", dt.DT_INT32), **attrs})
    v.node.attrs[candidates.HOST_ATTR] = attr_util.make(True)
    return v


def _clamped(node, i, dim, zero):
    """Index i as a stride-1 StridedSlice takes a begin or an end: counted from the end when
    negative (i - dim * min(sign(i), 0): TF has no host kernel for Select), then clamped to
    [0, dim]. node(op, inputs) makes an integer node."""
    negative = node("Minimum", [node("Sign", [i]), zero])
    wrapped = node("Sub", [i, node("Mul", [dim, negative])])
    return node("Maximum", [node("Minimum", [wrapped, dim]), zero])


def _host_window(b, x, d, dim, start, size):
    """(first index, length) of StridedSlice's window [start, start + size) along axis d of x
    (`dim` long when the graph fixes it, else None), clamped as TF clamps it, by int32 ops TF
    runs in host memory outside the clusters: the length is the cluster's compile-time value (a
    ragged last chunk of a loop compiles once more), the first index its data."""
    zero = b.const(0, dt.DT_INT32)
    host = functools.partial(_host, b)
    if dim is not None:
        dim = b.const(dim, dt.DT_INT32)
    else:                              # x's shape, read where x is (no copy)
        shape = _host(b, "Shape", [x], T=("type", x.dtype), out_type=("type", dt.DT_INT32))
        dim = _host(b, "Reshape", [
            _host(b, "Slice", [shape, b.const([d], dt.DT_INT32), b.const([1], dt.DT_INT32)],
                  Index=("type", dt.DT_INT32)),
            b.const([], dt.DT_INT32)], Tshape=("type", dt.DT_INT32))
    first = _clamped(host, start, dim, zero)
    end = _clamped(host, _host(b, "AddV2", [start, b.const(size, dt.DT_INT32)]), dim, zero)
    return first, _host(b, "Maximum", [_host(b, "Sub", [end, first]), zero])


_UNIFORM = ("StatelessRandomUniform", "StatelessRandomUniformV2", "RandomUniform")


def _bounds(v, depth=0):
    """(lo, hi, hi excluded) that Value v's elements lie in, from how it is computed (a random
    crop's `int(uniform * k)`, a modulo), else None."""
    n = v.node
    c = _constant(v)
    if c is not None:
        return (float(c.min()), float(c.max()), False) if c.size else None
    if depth > 8:
        return None
    if n.op in _UNIFORM:
        return 0.0, 1.0, True
    if n.op in ("Mul", "AddV2", "Sub", "FloorMod", "Minimum", "Maximum"):
        k = _constant(n.inputs[1])
        if k is None or k.size != 1:
            return None
        x, k = _bounds(n.inputs[0], depth + 1), float(k.reshape(()))
        if x is None:
            return None
        lo, hi, open_ = x
        if n.op == "Mul" and k > 0:      # k * (1 - 2**-24) rounds below k: still excluded
            return lo * k, hi * k, open_
        if n.op in ("AddV2", "Sub"):     # a sum may round up to its bound
            k = k if n.op == "AddV2" else -k
            return lo + k, hi + k, open_ and k == 0
        if n.op == "FloorMod" and k > 0:
            return 0.0, k, True
        if n.op == "Minimum":
            return min(lo, k), min(hi, k), open_ and hi <= k
        if n.op == "Maximum":
            return max(lo, k), max(hi, k), open_ and hi > k
        return None
    if n.op == "Identity":
        return _bounds(n.inputs[0], depth + 1)
    if n.op in ("Cast", "Floor"):
        x = _bounds(n.inputs[0], depth + 1)
        if x is None or x[0] < 0:        # truncation toward zero is floor from 0 up
            return None
        return float(np.floor(x[0])), _largest_integer(x), False
    return None


def _largest_integer(bounds):
    lo, hi, excluded = bounds
    return float(np.ceil(hi) - 1 if excluded else np.floor(hi))


def _always_inside(dim, start, size):
    """Whether the window [start, start + size) of an axis `dim` long (None: not fixed)
    provably fits it."""
    bounds = _bounds(start)
    return dim is not None and bounds is not None and bounds[0] >= 0 and \
        _largest_integer(bounds) + size <= dim


def _rewrite(g, n, spec):
    (windows, constants), (x, begin) = spec, n.inputs[:2]
    index_type, t = n.attr("Index"), n.attr("T")
    b = Builder(g, n, constant_input=2 if n.op == "Slice" else 3)
    rank = len(_constant(n.inputs[2 if n.op == "Slice" else 3]))
    g.remove(n)                                      # its name goes to the last gather
    y = _constant_slice(b, n, x, constants, rank) if constants else x
    for j, (d, start, size) in enumerate(windows):
        if start is None:
            start = b.element(begin, d, index_type)
        dim = static_shapes.static_dim(x, d)
        if n.op == "StridedSlice" and not _always_inside(dim, start, size):
            start, size = _host_window(b, x, d, dim, start, size)
            positions = b.node("Range", [b.const(0, index_type), size, b.const(1, index_type)],
                               index_type, Tidx=("type", index_type))
        else:                          # TF's Slice does not clamp (an overrun is an error)
            positions = b.const(np.arange(size), index_type)
        indices = b.node("AddV2", [positions, start], index_type, T=("type", index_type))
        last = j == len(windows) - 1
        y = b.node("GatherV2", [y, indices, b.const(d, dt.DT_INT32)], t,
                   name=n.name if last else None, Tparams=("type", t),
                   Tindices=("type", index_type), Taxis=("type", dt.DT_INT32), batch_dims=0)
    y.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], y


def _grad_axes(n):
    """StridedSliceGrad of stride 1 without ellipsis, new or shrunk axes: ([(axis, begin
    masked)] of the axes not taken whole, {}), or None. Its begin is often a value the forward
    loop pushed (no Pack to read), but it needs none: dy's shape is the window's size."""
    if n.attr("ellipsis_mask", 0) or n.attr("new_axis_mask", 0) or n.attr("shrink_axis_mask", 0):
        return None
    strides = _constant(n.inputs[3])
    if strides is None or strides.ndim != 1 or not np.all(strides == 1):
        return None
    k = strides.shape[0]
    masks = zip(bits(n.attr("begin_mask", 0), k), bits(n.attr("end_mask", 0), k))
    return [(d, whole_begin) for d, (whole_begin, whole_end) in enumerate(masks)
            if not (whole_begin and whole_end)], {}


def _place(b, y, d, dim, start, size, name=None):
    """y placed along axis d at `start` of a zero tensor `dim` long there: y with a zero slice
    in front along d (a ZerosLike of its first slice, concatenated), gathered at
    `position - start + 1` inside the window and at 0 outside (exact zeros, as TF's kernels;
    y's rank may exceed the slice spec's: no Pad)."""
    index_type, t = start.dtype, y.dtype
    zero, one = b.const(0, index_type), b.const(1, index_type)
    first = b.node("StridedSlice", [y, b.const([0] * (d + 1), index_type),
                                    b.const([0] * d + [1], index_type),
                                    b.const([1] * (d + 1), index_type)], t,
                   T=("type", t), Index=("type", index_type), begin_mask=(1 << d + 1) - 1,
                   end_mask=(1 << d) - 1, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
    zeros = b.node("ZerosLike", [first], t, T=("type", t))
    y = b.node("ConcatV2", [zeros, y, b.const(d, dt.DT_INT32)], t, T=("type", t),
               Tidx=("type", dt.DT_INT32), N=2)
    positions = b.node("Range", [zero, dim, one], index_type, Tidx=("type", index_type))
    shifted = b.node("AddV2", [b.node("Sub", [positions, start], index_type,
                                      T=("type", index_type)), one],
                     index_type, T=("type", index_type))
    inside = b.node("LogicalAnd", [
        b.node("GreaterEqual", [shifted, one], dt.DT_BOOL, T=("type", index_type)),
        b.node("LessEqual", [shifted, size], dt.DT_BOOL, T=("type", index_type))], dt.DT_BOOL)
    indices = b.node("SelectV2", [inside, shifted, zero], index_type, T=("type", index_type))
    return b.node("GatherV2", [y, indices, b.const(d, dt.DT_INT32)], t, name=name,
                  Tparams=("type", t), Tindices=("type", index_type),
                  Taxis=("type", dt.DT_INT32), batch_dims=0)


def _rewrite_grad(g, n, spec):
    """StridedSliceGrad(shape, begin, end, strides, dy) of stride 1: per axis not taken whole,
    dy placed at its start (_place). The start is begin as TF's kernel takes it (negative
    wraps, then clamped to the axis; 0 where begin-masked), the size dy's: exact even where the
    forward slice was clamped."""
    axes, (shape, begin, dy) = spec[0], (n.inputs[0], n.inputs[1], n.inputs[4])
    index_type = n.attr("Index")
    b = Builder(g, n)
    g.remove(n)
    sizes = b.node("Shape", [dy], index_type, T=("type", n.attr("T")),
                   out_type=("type", index_type))
    y, zero = dy, b.const(0, index_type)
    for j, (d, whole_begin) in enumerate(axes):
        dim = b.element(shape, d, index_type)
        if whole_begin:
            start = zero
        else:
            start = _clamped(lambda op, inputs: b.node(op, inputs, index_type,
                                                       T=("type", index_type)),
                             b.element(begin, d, index_type), dim, zero)
        y = _place(b, y, d, dim, start, b.element(sizes, d, index_type),
                   name=n.name if j == len(axes) - 1 else None)
    y.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], y


def _pad_spec(n):
    """Pad(x, ConcatV2([Reshape(b), Reshape(Sub(c, b))], axis 1)): TF's Slice gradient at a
    run-time begin b, c (the input's shape less the slice's) a constant, so the result's shape
    does not depend on b. (begin b, c) or None."""
    if candidates.device_type(n.device) != "NPU" or candidates.PRESERVE_ATTR in n.attrs:
        return None
    p = n.inputs[1].node
    if p.op != "ConcatV2" or p.attr("N") != 2 or _scalar(p.inputs[2]) not in (1, -1):
        return None
    before, after = (v.node for v in p.inputs[:2])
    if before.op != "Reshape" or after.op != "Reshape" or after.inputs[0].node.op != "Sub":
        return None
    begin, (c, subtracted) = before.inputs[0], after.inputs[0].node.inputs
    c = _constant(c)
    if subtracted is not begin or c is None or c.ndim != 1 or folds_at_compile_time(begin):
        return None
    return begin, c


def _rewrite_pad(g, n, spec):
    """Per axis c pads: x placed at begin's element (_place) along a dim of x's size plus c."""
    (begin, c), x = spec, n.inputs[0]
    index_type = n.attr("Tpaddings")
    b = Builder(g, n.inputs[1].node, constant_input=2)     # the concat's axis: in n's frame
    g.remove(n)
    sizes = b.node("Shape", [x], index_type, T=("type", n.attr("T")),
                   out_type=("type", index_type))
    y, axes = x, [d for d in range(len(c)) if c[d]]
    for j, d in enumerate(axes):
        size = b.element(sizes, d, index_type)
        dim = b.node("AddV2", [size, b.const(c[d], index_type)], index_type,
                     T=("type", index_type))
        y = _place(b, y, d, dim, b.element(begin, d, index_type), size,
                   name=n.name if j == len(axes) - 1 else None)
    if not axes:                                      # nothing pads: x itself
        y = b.node("Identity", [x], n.attr("T"), name=n.name, T=("type", n.attr("T")))
    y.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], y


def rewrite(g):
    """Rewrites qualifying slices in Graph g in place; returns how many."""
    rewrites = {"StridedSliceGrad": _rewrite_grad, "Pad": _rewrite_pad}
    todo = [(n, w) for n in g
            for w in [_pad_spec(n) if n.op == "Pad" else _window_spec(n)] if w]
    return runtime_slices.apply(g, todo, lambda n, spec: rewrites.get(n.op, _rewrite)(g, n,
                                                                                      spec))
