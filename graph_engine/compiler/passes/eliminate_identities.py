"""Identity elimination: Identity, IdentityN, Snapshot, StopGradient and PreventGradient forward
their inputs (control edges mean nothing inside a compiled model: all its ops are pure)."""
IDENTITIES = ("Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient")


def run(c):
    g = c.graph
    users = g.data_consumers()
    forwarded = 0
    for node in g.topo_order():
        if node.op in IDENTITIES:
            forwarded += 1
            for out, src in zip(node.outputs, node.inputs):
                for consumer, i in users.get(out, ()):
                    consumer.inputs[i] = src
                    users[src].append((consumer, i))
                users.pop(out, None)
    return {"forwarded": forwarded}
