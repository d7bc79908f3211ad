"""Identity elimination: ops that forward their inputs (trait forwards_input: Identity, IdentityN,
Snapshot ...) are removed (control edges mean nothing inside a compiled model: all its ops are
pure)."""
from graph_engine import ops


def run(c):
    g = c.graph
    users = g.data_consumers()
    forwarded = 0
    for node in g.topo_order():
        if ops.has(node.op, "forwards_input"):
            forwarded += 1
            for out, src in zip(node.outputs, node.inputs):
                for consumer, i in users.get(out, ()):
                    consumer.inputs[i] = src
                    users[src].append((consumer, i))
                users.pop(out, None)
    return {"forwarded": forwarded}
