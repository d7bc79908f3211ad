"""A hand-written softmax over the last axis -> TF's Softmax op (one row-wise kernel):

    e = Exp(x - Max(x, -1, keep_dims))   or   e = Exp(x)
    out = e / Sum(e, -1, keep_dims)

Only when e, the shifted x and the max have no consumers outside the subgraph.
"""
import numpy as np

from graph_engine.compiler.passes.fusion.rewrite import Rewriter, internal_only, is_float, producer


def _last_axis(node, x):
    """True for a keep_dims reduction of `x` over its last axis."""
    axes = node.inputs[1].const
    rank = len(x.shape)
    return node.inputs[0] is x and node.attr("keep_dims") and axes is not None and \
        [int(a) % rank for a in np.reshape(axes, -1)] == [rank - 1]


def match(div):
    """(x, pattern nodes) when RealDiv `div` is a softmax, else None."""
    exp, total = producer(div.inputs[0], "Exp"), producer(div.inputs[1], "Sum")
    if exp is None or total is None or not _last_axis(total, exp.outputs[0]):
        return None
    sub = producer(exp.inputs[0], "Sub")
    mx = producer(sub.inputs[1], "Max") if sub else None
    if mx is not None and _last_axis(mx, sub.inputs[0]):
        return sub.inputs[0], [exp, total, sub, mx]
    return exp.inputs[0], [exp, total]


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if node.op != "RealDiv" or node.name not in c.graph.nodes or not is_float(node.outputs[0]):
            continue
        m = match(node)
        if m is None:
            continue
        x, inner = m
        if not x.shape or node.outputs[0].shape != x.shape or \
                not internal_only(rw, [v for n in inner for v in n.outputs], inner + [node]):
            continue
        softmax = rw.add(node.name + "/softmax", "Softmax", [x], {"T": node.attrs["T"]},
                         output_dtypes=[x.dtype])
        softmax.device = node.device
        softmax.outputs[0].shape = x.shape
        rw.replace_chain(inner + [node], softmax, node.outputs[0])
        count += 1
    return {"fused": count}
