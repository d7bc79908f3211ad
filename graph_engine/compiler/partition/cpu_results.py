"""Function results made on the CPU are returned from the CPU.

A function placed on the NPU puts its `_Retval`s there, and the Identity that tf.function ends
each output with: a value made on the CPU (Keras' train and test functions return their
logs in an Optional made by OptionalFromValue, which has only a CPU kernel) then crosses to the
NPU inside the function, a variant's components copied one by one, and back when Python reads
them. Placing those pass-through nodes on the CPU removes both trips: a call of a function
returning an Optional of two scalars and reading them went from 786-808 to 459-471 us on a
2-vCPU VM (docs/benchmarks.md).
"""
from graph_engine.compiler.partition.candidates import device_type
from graph_engine.compiler.partition.cpu_lists import cpu_device

REASON = "result made on the CPU, returned from there (no trip to the NPU and back)"
_PASS_THROUGH = ("Identity", "Snapshot")


def _on_the_way(retval, users):
    """The NPU Identities handing a value on to `retval`, each read by the next alone."""
    way, reader, v = [], retval, retval.inputs[0]
    while (v.node.op in _PASS_THROUGH and device_type(v.node.device) == "NPU" and v.node.inputs
           and [c for c, _ in users.get(v, ())] == [reader]):
        way.append(v.node)
        reader, v = v.node, v.node.inputs[0]
    return way


def move_to_cpu(g):
    """Places on the CPU each NPU `_Retval` whose value a CPU node makes, with the Identities
    handing it on; returns those nodes."""
    users, moved = g.data_consumers(), []
    for n in list(g):
        if n.op != "_Retval" or device_type(n.device) != "NPU" or not n.inputs:
            continue
        way = _on_the_way(n, users)
        if device_type((way[-1] if way else n).inputs[0].node.device) == "CPU":
            moved += [n, *way]
    for n in moved:
        n.device = cpu_device(n.device)
    return moved
