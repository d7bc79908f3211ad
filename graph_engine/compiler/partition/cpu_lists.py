"""Moves the loop plumbing of a CPU-only TensorList onto the CPU.

TF's placer puts a list op the NPU has no kernel for on the CPU (TensorListGetItem of a bool
mask under Keras' masked RNNs) but leaves the list's Enter/Merge/Switch/NextIteration/Exit and
the Identities of function inlining on the loop's device. The list then crosses devices on every
iteration, and a TensorList crossing devices is copied element by element. When every op that
makes or reads the list outside this plumbing runs on the CPU, the plumbing goes there too: the
list never leaves the host, and only what the loop body reads from it (one element) crosses.
"""
from graph_engine.compiler.partition.candidates import device_type
from graph_engine.compiler.signature import DT_VARIANT

# Ops that pass a value through (their data input 0, Switch's pred aside) without computing.
_PLUMBING = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "Identity"})


def _is_list_plumbing(n):
    return n.op in _PLUMBING and device_type(n.device) == "NPU" and \
        any(v.dtype == DT_VARIANT for v in n.outputs)


def move_to_cpu(g):
    """Moves qualifying plumbing in Graph `g` to the CPU; returns how many nodes moved."""
    plumbing = {n for n in g if _is_list_plumbing(n)}
    if not plumbing:
        return 0
    users = g.data_consumers()
    seen, moved = set(), 0
    for start in plumbing:
        if start in seen:
            continue
        group, ends, stack = set(), [], [start]      # a connected group and the ops around it
        while stack:
            n = stack.pop()
            if n in group:
                continue
            group.add(n)
            inputs = n.inputs[:1] if n.op == "Switch" else n.inputs
            neighbours = [v.node for v in inputs if v.dtype == DT_VARIANT]
            neighbours += [c for v in n.outputs if v.dtype == DT_VARIANT
                           for c, _ in users.get(v, ())]
            for m in neighbours:
                (stack if m in plumbing else ends).append(m)
        seen |= group
        cpu = [m.device for m in ends if device_type(m.device) == "CPU"]
        if cpu and len(cpu) == len(ends):
            for n in group:
                n.device = cpu[0]
            moved += len(group)
    return moved
