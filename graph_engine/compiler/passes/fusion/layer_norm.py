"""Keras 3 LayerNormalization (axis -1) -> NpuLayerNorm(x, gamma, beta), attrs axis, epsilon:

    mean = Mean(x, -1, keep_dims);  var = Mean(SquaredDifference(x, mean), -1, keep_dims)
    scale = Rsqrt(var + epsilon) * gamma                  (gamma may have been folded away)
    out = x * scale + (-mean * scale + beta)              (beta may have been folded away)

In training the gradient reads mean, -mean, rsqrt and the scale: the kernel then also outputs
mean and rsqrt (attr with_stats), the small -mean and scale ops stay, and everything else of
the subgraph (the [rows, C]-sized differences, products and sums) becomes the one kernel.
Any other outside consumer of an inner value keeps the subgraph as it is.
"""
import numpy as np

from graph_engine import ops
from graph_engine.compiler.passes.fusion.rewrite import (Rewriter, internal_only, is_float,
                                                         operands, producer, scalar_value)



def _last_axis_mean(v, x=None):
    """The Mean node of `v` over the last axis with keep_dims (of `x` when given)."""
    mean = producer(v, "Mean")
    if mean is None or not mean.attr("keep_dims") or (x is not None and mean.inputs[0] is not x):
        return None
    axes = mean.inputs[1].const
    rank = len(mean.inputs[0].shape)
    if axes is None or [int(a) % rank for a in np.reshape(axes, -1)] != [rank - 1]:
        return None
    return mean


def _per_channel(v, x):
    """True when `v` holds one value per position of x's last axis."""
    return v.dtype == x.dtype and v.shape[-1:] == x.shape[-1:] and \
        int(np.prod(v.shape)) == x.shape[-1]


def match(out):
    """The pattern's parts by role when Add node `out` is a LayerNorm (x, gamma, beta, epsilon,
    and its nodes: mean, sqd, var, add_eps, rsqrt, scale (gamma's Mul, when present), mul_x,
    neg, mul_mean, add_beta (when present)), else None."""
    for x_scaled, shift in (out.inputs, out.inputs[::-1]):
        mul_x = producer(x_scaled, "Mul")
        if mul_x is None:
            continue
        for x, scale in (mul_x.inputs, mul_x.inputs[::-1]):
            mul_g = producer(scale, "Mul")
            pair = operands(mul_g, lambda v: producer(v, "Rsqrt") is not None)
            rsqrt, gamma = (pair[0].node, pair[1]) if pair else (producer(scale, "Rsqrt"), None)
            mul_g = mul_g if pair else None
            add_eps = producer(rsqrt.inputs[0], ops.having("commutative_add")) if rsqrt else None
            pair = operands(add_eps, lambda v: scalar_value(v) is not None)
            var = _last_axis_mean(pair[1], None) if pair else None
            sqd = producer(var.inputs[0], "SquaredDifference") if var else None
            if sqd is None or x not in sqd.inputs:
                continue
            eps = scalar_value(pair[0])
            mean = _last_axis_mean(sqd.inputs[1] if sqd.inputs[0] is x else sqd.inputs[0], x)
            # shift = -mean * scale [+ beta]
            add_b = producer(shift, ops.having("commutative_add"))
            pair = operands(add_b, lambda v: producer(v, "Mul") is not None and
                            any(producer(u, "Neg") for u in v.node.inputs))
            mul_m, beta = (pair[0].node, pair[1]) if pair else (producer(shift, "Mul"), None)
            add_b = add_b if pair else None
            pair = operands(mul_m, lambda v: v is scale)
            neg = producer(pair[1], "Neg") if pair else None
            if mean is None or neg is None or neg.inputs[0] is not mean.outputs[0]:
                continue
            if any(v is not None and not _per_channel(v, x) for v in (gamma, beta)):
                continue
            return dict(x=x, gamma=gamma, beta=beta, epsilon=eps, mean=mean, sqd=sqd, var=var,
                        add_eps=add_eps, rsqrt=rsqrt, scale=mul_g, mul_x=mul_x, neg=neg,
                        mul_mean=mul_m, add_beta=add_b)
    return None


# Values a training graph's gradient reads: kept, with mean and rsqrt as extra outputs of the
# fused kernel; the [rows, C]-sized rest of the forward pass disappears.
STATS_READ_BY_GRADIENTS = ("mean", "neg", "rsqrt", "scale")


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if not ops.has(node.op, "commutative_add") or node.name not in c.graph.nodes or not is_float(node.outputs[0]):
            continue
        m = match(node)
        if m is None or node.outputs[0].shape != m["x"].shape:
            continue
        x = m["x"]
        parts = {k: n for k, n in m.items() if k not in ("x", "gamma", "beta", "epsilon") and n}
        members = list(parts.values()) + [node]
        outside = {k for k, n in parts.items() if not internal_only(rw, n.outputs, members)}
        if not outside <= set(STATS_READ_BY_GRADIENTS):
            continue
        channels = x.shape[-1]
        gamma = m["gamma"] if m["gamma"] is not None else rw.const(node.name + "/gamma",
                                                                   np.ones(channels), x.dtype)
        beta = m["beta"] if m["beta"] is not None else rw.const(node.name + "/beta",
                                                                np.zeros(channels), x.dtype)
        stats = bool(outside)
        ln = rw.add(node.name + "/layer_norm", "NpuLayerNorm", [x, gamma, beta],
                    {"T": node.attrs["T"]}, output_dtypes=[x.dtype] * (3 if stats else 1))
        ln.set_attr("axis", -1)
        ln.set_attr("epsilon", float(m["epsilon"]))
        ln.set_attr("with_stats", stats)
        ln.device = node.device
        ln.outputs[0].shape = x.shape
        if stats:               # the gradient's reads now come from the kernel's extra outputs
            for v, old in zip(ln.outputs[1:], (parts["mean"], parts["rsqrt"])):
                v.shape = old.outputs[0].shape
                rw.replace_uses(old.outputs[0], v)
        rw.replace_chain(members, ln, node.outputs[0])
        count += 1
    return {"fused": count}
