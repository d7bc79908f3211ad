"""Constant folding: every value that shape inference could compute (Value.const) and that is
produced by a non-Const node is replaced by a Const node; the producers die in DCE.
Shape inference bounds what becomes known (infer_shapes.FOLD_LIMIT_BYTES for ops with a runtime
kernel), so huge results are computed at run time instead of being stored in the model."""
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.node import Node


def run(c):
    g = c.graph
    users = g.data_consumers()
    count = 0
    for node in g:
        if node.op in ("Const", "_Arg", "Placeholder"):
            continue
        for v in node.outputs:
            if v.const is None or not users.get(v):
                continue
            const = g.add(Node(g.unique_name(f"{node.name}/folded_{v.index}"), "Const",
                               attrs={"dtype": attr_util.make(type=v.dtype),
                                      "value": attr_util.make(tensor=attr_util.numpy_to_tensor(
                                          v.const, v.dtype))},
                               output_dtypes=[v.dtype]))
            folded = const.outputs[0]
            folded.shape, folded.const = v.shape, v.const
            g.replace_uses(v, folded, users)
            count += 1
    return {"folded": count}
