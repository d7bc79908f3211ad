"""Removes redundant TransData: a conversion back to the format a value came from
(A -> B -> A gives the original value) and duplicate conversions of one value (merged)."""


def _key(node):
    return (node.inputs[0], node.attr("src_format"), node.attr("dst_format"))


def run(c):
    g = c.graph
    cancelled = merged = 0
    changed = True
    while changed:
        changed = False
        users = g.data_consumers()
        seen = {}
        for node in g.topo_order():
            if node.op != "TransData" or not users.get(node.outputs[0]):
                continue
            first = node.inputs[0].node
            if (first.op == "TransData" and first.attr("src_format") == node.attr("dst_format")
                    and first.attr("dst_format") == node.attr("src_format")):
                g.replace_uses(node.outputs[0], first.inputs[0], users)
                cancelled += 1
                changed = True
                break
            twin = seen.setdefault(_key(node), node)
            if twin is not node:
                g.replace_uses(node.outputs[0], twin.outputs[0], users)
                merged += 1
                changed = True
                break
    return {"cancelled": cancelled, "merged": merged}
