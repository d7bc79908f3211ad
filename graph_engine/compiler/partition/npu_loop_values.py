"""Moves the loop plumbing of int32 values that TF's placer left on the CPU, read only by the
NPU in the loop, onto the NPU.

A function's int32 argument made on the CPU (`f(tf.constant(500))`) is a CPU `_Arg`, and TF
places the Enter (and for a loop variable the Merge/Switch/NextIteration/Exit) that bring it
into a loop beside it. When the loop's condition (`i < n`, `for i in tf.range(n)`) and body
are on the NPU, the value then crosses from the CPU every iteration (a send, a receive and an
event each: 5-15x TF-CPU's time per iteration of a small loop). On the NPU the plumbing keeps
int32 in host memory too, so it costs nothing there, and the value crosses once, into the loop.
"""
from graph_engine.compiler.partition import dag
from graph_engine.compiler.partition.candidates import device_type
from graph_engine.compiler.partition.contexts import ENTER, EXIT, SWITCH
from graph_engine.compiler.partition.cpu_lists import PLUMBING
from tensorflow.core.framework import types_pb2


def _is_cpu_int32_plumbing(n):
    return n.op in PLUMBING and device_type(n.device) == "CPU" and \
        n.outputs and all(v.dtype == types_pb2.DT_INT32 for v in n.outputs)


def move_to_npu(g):
    """Moves qualifying plumbing in Graph `g` to the NPU; returns how many nodes moved."""
    plumbing = {n for n in g if _is_cpu_int32_plumbing(n)}
    if not any(n.op in ENTER for n in plumbing):
        return 0
    users = g.data_consumers()

    def neighbours(n):                          # plumbing the value flows through
        inputs = n.inputs[:1] if n.op in SWITCH else n.inputs
        yield from (v.node for v in inputs if v.node in plumbing)
        yield from (c for v in n.outputs for c, _ in users.get(v, ()) if c in plumbing)

    moved = 0
    for component in dag.components(plumbing, neighbours):
        # what the loop reads and writes each iteration: not an Enter's input, not an Exit's
        # readers (those cross once)
        inside = [v.node for n in component if n.op not in ENTER for v in n.inputs] + \
                 [c for n in component if n.op not in EXIT for v in n.outputs
                  for c, _ in users.get(v, ())]
        ends = [m for m in inside if m not in component]
        if not ends or any(device_type(m.device) != "NPU" for m in ends):
            continue
        for n in component:
            n.device = ends[0].device
            moved += 1
    return moved
