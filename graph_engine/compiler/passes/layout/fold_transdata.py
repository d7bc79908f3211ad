"""Converts constants at compile time: a TransData of a known value becomes a Const whose
value is stored in the target format. For such a Const, Value.const holds the storage array
(ops.layout.pack) that serialize writes as is; its shape stays logical.

A filter computed from constants (batch-norm folding's filter * scale) counts as known even
above infer_shapes' folding size limit: the converted filter replaces the constants it is
computed from, so folding it does not grow the stored constants.
"""
from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.kernel_attrs import kernel_attrs, split_inputs
from graph_engine.ops.formats import Format
from graph_engine.compiler.node import Node
from graph_engine.ops import layout

MAX_DEPTH = 4      # constant subexpressions evaluated here stay small: filter * scale


def known(v, depth=0):
    """The value of ND Value `v` if it follows from constants alone, else None."""
    if v.format is not None:
        return None
    if v.const is not None or depth >= MAX_DEPTH:
        return v.const
    node = v.node
    op = ops.get(node.op)
    if op is None or not op.foldable or op.internal or node.op in ("_Arg", "Placeholder"):
        return None
    data = split_inputs(node, op)[0]
    xs = [known(x, depth + 1) for x in data]
    if any(x is None for x in xs):
        return None
    return ops.evaluate(op, xs, kernel_attrs(node, op), [o.dtype for o in node.outputs])[v.index]


def run(c):
    g = c.graph
    users = g.data_consumers()
    folded = 0
    for node in list(g):
        if node.op != "TransData" or not users.get(node.outputs[0]):
            continue
        x = known(node.inputs[0])
        if x is None:
            continue
        out = node.outputs[0]
        logical = layout.TransData().compute([x], {"src_format": node.attr("src_format"),
                                                   "dst_format": node.attr("dst_format")})
        const = g.add(Node(g.unique_name(f"{node.name}/folded"), "Const", device=node.device,
                           attrs={"dtype": attr_util.make(type=out.dtype),
                                  "value": attr_util.make(tensor=attr_util.numpy_to_tensor(
                                      logical, out.dtype))},
                           output_dtypes=[out.dtype]))
        v = const.outputs[0]
        v.shape, v.format = out.shape, out.format
        v.const = layout.pack(logical, out.format or Format.ND)
        g.replace_uses(out, v, users)
        folded += 1
    return {"folded": folded}
