"""Keras 3 BatchNormalization in training: its per-channel statistics as one kernel each, and the
gradient's broadcasts without Tile (A = every axis of x but one, the channel axis):

forward, tf.nn.moments:
    mean = Mean(x, A, keep_dims);  var = Mean(SquaredDifference(x, mean), A, keep_dims)
    -> NpuMoments(x) -> (mean, var): one pass over memory instead of three and no [N,H,W,C]
       intermediate
gradient of x * scale + shift, the two reductions:
    Sum(dy, A, keep_dims), Sum(Mul(x, dy), A, keep_dims)
    -> NpuBatchNormGradSums(dy, x) -> (sum dy, sum dy*x): the product is never stored
gradient of the two Means (TF's _MeanGrad): Tile(per-channel g, x's shape) / count, read by
elementwise ops:
    -> g broadcast by those ops: elementwise ops between the Tile and a consumer that reads a
       value of x's shape move to the per-channel side (a [C]-sized op each), the consumer
       broadcasts, and an AddN reading the Tile becomes AddV2s (same order of additions). The
       input gradient then is one NpuElementwise chain instead of two plus two Tiles.

The values the rest of the graph reads (mean, var, the sums) keep their shapes; mean and var
may be read by anything (the moving-average updates, the gradient's x - mean). A Cast inside a
pattern stops it, as everywhere (docs/fusion.md).
"""
import math

import numpy as np

from graph_engine import ops
from graph_engine.compiler.passes.fusion.rewrite import Rewriter, internal_only, is_float, producer
from graph_engine.ops.elementwise import Binary


def _channel_axis(reduce_node):
    """(channel axis, keep_dims) of a Mean/Sum over every axis of its input but one (the pattern
    the kernels compute), else None."""
    x, axes = reduce_node.inputs[0], reduce_node.inputs[1].const
    if axes is None or x.shape is None or len(x.shape) < 2:
        return None
    rank = len(x.shape)
    reduced = sorted({int(a) % rank for a in np.reshape(axes, -1)})
    if len(reduced) != rank - 1:
        return None
    (axis,) = set(range(rank)) - set(reduced)
    keep = bool(reduce_node.attr("keep_dims"))
    if not keep and axis != rank - 1:      # [C] broadcasts along the last axis only
        return None
    return axis, keep


def _stats_node(rw, name, op, inputs, axis, keep, like):
    """An NpuMoments/NpuBatchNormGradSums node whose two outputs have the shape of `like`."""
    node = rw.add(name, op, inputs, {"T": like.node.attrs["T"]},
                  output_dtypes=[like.dtype, like.dtype])
    node.set_attr("axis", axis)
    node.set_attr("keep_dims", keep)
    node.device = like.node.device
    for v in node.outputs:
        v.shape = like.shape
    return node


def fuse_moments(rw, var):
    """Mean `var` of SquaredDifference(x, Mean(x)) -> NpuMoments; returns it or None."""
    sqd = producer(var.inputs[0], "SquaredDifference")
    geometry = _channel_axis(var)
    if sqd is None or geometry is None or not is_float(var.outputs[0]):
        return None
    for x, m in (sqd.inputs, sqd.inputs[::-1]):
        mean = producer(m, "Mean")
        if mean is None or mean.inputs[0] is not x or _channel_axis(mean) != geometry \
                or x.shape != sqd.outputs[0].shape or m.dtype != x.dtype:
            continue
        if not internal_only(rw, sqd.outputs, [var]):
            return None
        node = _stats_node(rw, var.name + "/moments", "NpuMoments", [x], *geometry, mean.outputs[0])
        rw.replace_uses(mean.outputs[0], node.outputs[0])
        rw.replace_chain([mean, sqd, var], node, var.outputs[0], node.outputs[1])
        return node
    return None


def fuse_grad_sums(rw, sum_dot, position):
    """Sum `sum_dot` of Mul(x, dy) and a Sum of dy over the same axes -> NpuBatchNormGradSums;
    returns it or None. `position`: a topological index (x must come before the Sum of dy, so
    the fused node, which reads x, cannot depend on its own result)."""
    mul = producer(sum_dot.inputs[0], "Mul")
    geometry = _channel_axis(sum_dot)
    if mul is None or geometry is None or not is_float(sum_dot.outputs[0]) \
            or not internal_only(rw, mul.outputs, [sum_dot]):
        return None
    for dy, x in (mul.inputs, mul.inputs[::-1]):
        if dy.shape != x.shape or dy.shape != mul.outputs[0].shape or dy is x:
            continue
        sum_dy = next((u for u, i in rw.uses(dy) if u.op == "Sum" and i == 0 and u is not sum_dot
                       and _channel_axis(u) == geometry and u.outputs[0].dtype == dy.dtype
                       and x.node in position and position[x.node] < position.get(u, -1)), None)
        if sum_dy is None:
            continue
        node = _stats_node(rw, sum_dot.name + "/grad_sums", "NpuBatchNormGradSums", [dy, x],
                           *geometry, sum_dot.outputs[0])
        rw.replace_chain([sum_dy], node, sum_dy.outputs[0], node.outputs[0])
        rw.replace_chain([mul, sum_dot], node, sum_dot.outputs[0], node.outputs[1])
        return node
    return None


def _broadcasting(node):
    return isinstance(ops.get(node.op), Binary) and ops.has(node.op, "fusible")


def _adds(rw, addn):
    """AddN -> AddV2 chain adding its inputs in order (as AddN's kernels do)."""
    acc = addn.inputs[0]
    for i, v in enumerate(addn.inputs[1:]):
        add = rw.add(f"{addn.name}/add_{i}", "AddV2", [acc, v], {"T": addn.attrs["T"]})
        add.device = addn.device
        add.outputs[0].shape = addn.outputs[0].shape
        acc = add.outputs[0]
    rw.replace_chain([addn], acc.node, addn.outputs[0], acc)


def _per_channel(rw, u, i, r, other):
    """u with r in place of its input i: a node of r's shape. When r is a Reshape of a [C]
    value (the gradient's statistics) and `other` a single element, u runs on that value and
    is reshaped, so it joins the per-channel ops' NpuElementwise kernel instead of making one."""
    src = r.node
    if ops.has(src.op, "reshapes") and len(src.inputs) == 2 and math.prod(other.shape) == 1 \
            and len(other.shape) <= len(src.inputs[0].shape):
        base = src.inputs[0]
        node = rw.add(u.name + "/per_channel", u.op, [base, other] if i == 0 else [other, base],
                      dict(u.attrs))
        node.device, node.outputs[0].shape = u.device, tuple(base.shape)
        node = rw.add(src.name + "/moved", src.op, [node.outputs[0], src.inputs[1]], dict(src.attrs))
        node.device, node.outputs[0].shape = src.device, tuple(r.shape)
        return node
    node = rw.add(u.name + "/per_channel", u.op, [r, other] if i == 0 else [other, r], dict(u.attrs))
    node.device, node.outputs[0].shape = u.device, tuple(r.shape)
    return node


def broadcast_tile(rw, tile):
    """Replaces the uses of `tile` (a Tile that only repeats size-1 axes of its input) by
    broadcasting in its elementwise consumers, as far as they allow."""
    pending = [tile]
    while pending:
        t = pending.pop()
        r, full = t.inputs[0], t.outputs[0].shape
        again = True
        while again:
            again = False
            for u, i in list(rw.uses(t.outputs[0])):
                if u.op == "AddN" and all(v.shape == full for v in u.inputs) and len(u.inputs) > 1:
                    _adds(rw, u)
                    again = True
                    break
                if not _broadcasting(u) or u.outputs[0].shape != full or u.inputs[i] is not t.outputs[0]:
                    continue
                other = u.inputs[1 - i]
                if other.shape == full:             # the consumer broadcasts r itself
                    rw.set_input(u, i, r)
                    continue
                if other is t.outputs[0] or other.shape is None or \
                        tuple(np.broadcast_shapes(other.shape, r.shape)) != tuple(r.shape):
                    continue
                # u(Tile(r), small) = Tile(u(r, small)): u runs per channel
                small = _per_channel(rw, u, i, r, other)
                moved = rw.add(t.name + "/moved", "Tile", [small.outputs[0], t.inputs[1]],
                               dict(t.attrs))
                moved.device, moved.outputs[0].shape = t.device, full
                rw.replace_chain([u], small, u.outputs[0], moved.outputs[0])
                pending.append(moved)
        if not rw.uses(t.outputs[0]):     # gone; control edges (pure ops: no order) go to r
            rw.replace_chain([t], r.node, t.outputs[0], r)


def _repeats_ones(tile):
    """The Tile only repeats axes of size 1 (a broadcast)."""
    m, shape = tile.inputs[1].const, tile.inputs[0].shape
    return m is not None and shape is not None and \
        all(k == 1 or d == 1 for d, k in zip(shape, np.reshape(m, -1)))


def run(c):
    rw = Rewriter(c)
    order = c.graph.topo_order()
    moments = sums = 0
    shapes = set()          # (x's shape, the statistics' shape) of the fused batch norms
    for node in order:
        if node.op == "Mean" and node.name in c.graph.nodes:
            fused = fuse_moments(rw, node)
            if fused is not None:
                moments += 1
                shapes.add((fused.inputs[0].shape, fused.outputs[0].shape))
    position = {n: i for i, n in enumerate(order)}
    for node in order:
        if node.op == "Sum" and node.name in c.graph.nodes:
            fused = fuse_grad_sums(rw, node, position)
            if fused is not None:
                sums += 1
                shapes.add((fused.inputs[0].shape, fused.outputs[0].shape))
    tiles = sum(n.op == "Tile" for n in c.graph)
    for node in order:
        if node.op == "Tile" and node.name in c.graph.nodes and is_float(node.outputs[0]) and \
                (node.outputs[0].shape, node.inputs[0].shape) in shapes and _repeats_ones(node):
            broadcast_tile(rw, node)
    tiles -= sum(n.op == "Tile" for n in c.graph)
    return {"moments": moments, "grad_sums": sums, "tiles_removed": tiles}
