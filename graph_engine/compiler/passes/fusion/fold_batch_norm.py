"""Inference batch norm folded into the contraction before it (Keras 3 writes BatchNormalization
in inference as y * s + t with per-channel s = gamma * rsqrt(var + eps), t = beta - mean * s):

    Conv2D | DepthwiseConv2dNative | MatMul (channels last) [-> BiasAdd(b)] -> Mul(s) [-> Add(t) | Sub(t)]
      => contraction with filter W * s (per output channel) -> BiasAdd(b * s + t)

The new filter and bias are graph ops on the weights: constant-folded when the weights are
constants (frozen graphs, serving), computed per step when they are inputs (variables). The
BiasAdd then fuses into the contraction (contraction_epilogue). Training-mode batch norm
normalizes with the batch's moments, which read the contraction's output: that second consumer
keeps the pattern from matching.
"""
import numpy as np

from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.passes.fusion.contraction_epilogue import _bias, channel_axis
from graph_engine.compiler.passes.fusion.rewrite import Rewriter, is_float, other_input

CONTRACTIONS = ("Conv2D", "DepthwiseConv2dNative", "MatMul")


def _per_channel(v, cur, channels):
    return v is not None and v.dtype == cur.dtype and v.shape is not None and \
        v.shape[-1:] == (channels,) and int(np.prod(v.shape)) == channels and \
        len(v.shape) <= len(cur.shape)


def _vector(rw, name, v, shape):
    """`v` reshaped to `shape` (a Reshape node, or a Const when `v` is known)."""
    if v.shape == tuple(shape):
        return v
    shape_const = rw.const(name + "/shape", np.array(shape, np.int32), dt.DT_INT32)
    return rw.add_inferred(name, "Reshape", [v, shape_const],
                           {"T": attr_util.make(type=v.dtype),
                            "Tshape": attr_util.make(type=dt.DT_INT32)})


def _binary(rw, name, op, a, b):
    return rw.add_inferred(name, op, [a, b], {"T": attr_util.make(type=a.dtype)})


def fold(rw, node):
    out = node.outputs[0]
    if not is_float(out) or out.shape is None or channel_axis(node, len(out.shape)) != len(out.shape) - 1:
        return False
    channels = out.shape[-1]
    chain, cur = [], out
    bias_node, b = _bias(rw, node, cur)
    if bias_node is not None:
        chain.append(bias_node)
        cur = bias_node.outputs[0]
    mul = rw.sole_user(cur, "Mul")
    s = other_input(mul, cur) if mul is not None else None
    if not _per_channel(s, cur, channels) or mul.outputs[0].shape != cur.shape:
        return False
    chain.append(mul)
    cur = mul.outputs[0]
    shift = rw.sole_user(cur, ("Add", "AddV2", "Sub"))
    t = other_input(shift, cur) if shift is not None else None
    if shift is not None and shift.op == "Sub" and shift.inputs[0] is not cur:
        t = None                                   # t - y is not a shift of y
    if _per_channel(t, cur, channels) and shift.outputs[0].shape == cur.shape:
        chain.append(shift)
        cur = shift.outputs[0]
    else:
        shift = t = None
    base = node.name + "/folded_bn"
    s = _vector(rw, base + "/scale", s, (channels,))
    w = node.inputs[1]
    if node.op == "DepthwiseConv2dNative":
        w_scale = _vector(rw, base + "/scale_kernel", s, (w.shape[2], w.shape[3]))
    elif node.op == "MatMul" and node.attr("transpose_b"):
        w_scale = _vector(rw, base + "/scale_kernel", s, (channels, 1))
    else:
        w_scale = s
    rw.set_input(node, 1, _binary(rw, base + "/filter", "Mul", w, w_scale))
    bias = _binary(rw, base + "/bias_scaled", "Mul", b, s) if b is not None else None
    if t is not None:
        t = _vector(rw, base + "/shift", t, (channels,))
        if shift.op == "Sub":
            t = rw.add_inferred(base + "/neg_shift", "Neg", [t], {"T": attr_util.make(type=t.dtype)})
        bias = _binary(rw, base + "/bias", "AddV2", bias, t) if bias is not None else t
    if bias is None:
        rw.replace_chain(chain, node, cur, out)
        return True
    bias_add = rw.add(base + "/bias_add", "BiasAdd", [out, bias],
                      {"T": attr_util.make(type=out.dtype), "data_format": attr_util.make("NHWC")})
    bias_add.device = node.device
    bias_add.outputs[0].shape = out.shape
    rw.replace_chain(chain, bias_add, cur)
    return True


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if node.op in CONTRACTIONS and node.name in c.graph.nodes:
            count += fold(rw, node)
    return {"folded": count}
