"""Common-subexpression elimination: two nodes with the same op, attrs, data inputs, control
inputs, device, output dtypes and output formats compute the same values, so the later one's
uses move to the earlier one and it is removed. Equal constants merge too.

Never merged: stateful ops (random numbers, anything TF marks stateful, GE-internal ops with
`stateful = True`), graph inputs and outputs (_Arg/_Retval keep their positions), NoOps, and
constants over CONST_LIMIT_BYTES.
"""
import hashlib

from graph_engine import ops
from graph_engine.compiler.signature import op_def

NEVER = ("_Arg", "_Retval", "NoOp", "Placeholder")
CONST_LIMIT_BYTES = 16 << 20     # bigger constants are not compared (hashing costs compile time)


def _stateful(op_type, library, cache):
    if op_type not in cache:
        d = op_def(op_type, library)
        registered = ops.get(op_type)
        cache[op_type] = (d.is_stateful if d is not None else registered is None) or \
            bool(getattr(registered, "stateful", False))
    return cache[op_type]


def attrs_key(node):
    """What of `node`'s attrs makes it compute what it does: all of them, and for a Const its
    dtype and a digest of its value (the partitioner copies equal constants in once with it)."""
    if node.op == "Const":       # values can be large: key on a digest of the tensor proto
        value = node.attrs["value"]
        if value.ByteSize() > CONST_LIMIT_BYTES:
            return ("unique", node.name)
        digest = hashlib.sha256(value.SerializeToString(deterministic=True)).hexdigest()
        return ("value", digest, node.attrs["dtype"].type)
    return tuple(sorted((k, v.SerializeToString(deterministic=True))
                        for k, v in node.attrs.items()))


def run(c):
    g = c.graph
    users, control_users = g.data_consumers(), g.control_consumers()
    # Keyed in two steps: the attrs (serialized, costly) only of nodes that match another node
    # in everything else. seen: that key -> its only node so far, or {attrs key: first node}.
    seen, stateful, merged = {}, {}, 0
    for node in g.topo_order():
        if node.op in NEVER or _stateful(node.op, g.library, stateful):
            continue
        key = (node.op, node.device, tuple((v.node.name, v.index) for v in node.inputs),
               tuple(sorted(p.name for p in node.control_inputs)),
               tuple((v.dtype, v.format) for v in node.outputs))
        same = seen.setdefault(key, node)
        if same is node:
            continue
        if not isinstance(same, dict):
            same = seen[key] = {attrs_key(same): same}
        first = same.setdefault(attrs_key(node), node)
        if first is node:
            continue
        # Inputs were rewritten before this node was keyed (topological order), so chains of
        # duplicates collapse in one sweep.
        for dup, keep in zip(node.outputs, first.outputs):
            for consumer, i in users.pop(dup, []):
                consumer.inputs[i] = keep
                users[keep].append((consumer, i))
        for consumer in control_users.pop(node, []):
            consumer.control_inputs = [first if p is node else p for p in consumer.control_inputs]
            if consumer.control_inputs.count(first) > 1:
                consumer.control_inputs = list(dict.fromkeys(consumer.control_inputs))
            control_users[first].append(consumer)
        g.remove(node)
        merged += 1
    return {"merged": merged}
