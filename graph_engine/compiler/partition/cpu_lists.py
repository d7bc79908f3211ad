"""Moves TensorLists that live on the host, with their loop plumbing, onto the CPU.

Two kinds of list cross devices on every loop iteration if left as TF's placer leaves them:
- a list made and read only by CPU ops (TF's placer puts a list op the NPU has no kernel for on
  the CPU: TensorListGetItem of a bool mask under Keras' masked RNNs) whose Enter/Merge/Switch/
  NextIteration/Exit and the Identities of function inlining stay on the loop's device. A
  TensorList crossing devices is copied element by element.
- a list of int32 elements: TF's list kernels for devices like the NPU keep elements in device
  memory while TF keeps every int32 tensor there in host memory, so each push is a host-to-device
  copy and each pop a device-to-host one (the gradient of a loop that reads a TensorArray pushes
  the array's length and element shape every forward iteration and pops them every backward one).
Either way the whole list (ops and plumbing) goes to the CPU: the list never leaves the host, and
what crosses is one element, in host memory on both sides.

Except the common int32 case, a loop gradient's accumulator (a loop counter or a TensorArray's
length pushed each forward iteration, popped each backward one): a list that is only created
empty, pushed to, popped from and measured never has its elements read by a kernel, only handed
over. Its pushes take their element in host memory and its pops give it back there
(`_input_hostmem` / `_output_hostmem`, which TF's memory-type assignment honours), and the list
stays on the NPU: no copy, and no CPU share of the loop, which TF would run in lockstep with the
NPU's through a send of the loop condition and control edges every iteration (about 16 us per
iteration on two cores, more than the copies it saves).
"""
import re

from graph_engine.compiler.partition import dag
from graph_engine.compiler.partition.candidates import device_type
from graph_engine.compiler.partition.contexts import SWITCH
from graph_engine.compiler.signature import DT_VARIANT
from tensorflow.core.framework import types_pb2

# Ops that pass a value through (their data input 0, Switch's pred aside) without computing.
PLUMBING = frozenset({"Enter", "Exit", "Merge", *SWITCH, "NextIteration", "Identity"})


def _is_list_plumbing(n):
    return n.op in PLUMBING and device_type(n.device) == "NPU" and \
        any(v.dtype == DT_VARIANT for v in n.outputs)


def _is_host_list_op(n):
    """A list op on int32 elements (or reading only a list's length/shape) on the NPU or CPU."""
    if device_type(n.device) not in ("NPU", "CPU"):
        return False
    if n.op in ("TensorListLength", "TensorListElementShape"):
        return True
    return (n.op.startswith("TensorList") or n.op == "EmptyTensorList") and \
        n.attr("element_dtype") == types_pb2.DT_INT32


# List ops that hand int32 elements over without reading them (the element's input / output
# index), and those that only make an empty list or read its length or element shape.
_HANDS_OVER = {"TensorListPushBack": ("_input_hostmem", 1),
               "TensorListPopBack": ("_output_hostmem", 1)}
_NO_ELEMENTS = frozenset({"EmptyTensorList", "TensorListLength", "TensorListElementShape"})


def _keeps_host_elements(ends):
    """Whether an int32 list whose ops are `ends` can stay on the NPU with its elements in host
    memory: its ops are all on the NPU and none reads an element."""
    return all(device_type(n.device) == "NPU" and (n.op in _HANDS_OVER or n.op in _NO_ELEMENTS)
               for n in ends)


def cpu_device(device):
    return re.sub(r"device:NPU:\d+", "device:CPU:0", device)


def _variant_neighbours(n, users):
    inputs = n.inputs[:1] if n.op in SWITCH else n.inputs
    yield from (v.node for v in inputs if v.dtype == DT_VARIANT)
    yield from (c for v in n.outputs if v.dtype == DT_VARIANT for c, _ in users.get(v, ()))


def move_to_cpu(g):
    """Moves qualifying lists and plumbing in Graph `g` to the CPU, or marks their element
    hand-overs host memory; returns how many nodes changed."""
    plumbing = {n for n in g if _is_list_plumbing(n)}
    if not plumbing:
        return 0
    users = g.data_consumers()
    moved = 0
    # every node a list flows through
    for component in dag.components(plumbing, lambda n: _variant_neighbours(n, users)):
        ends = [n for n in component if n not in plumbing]
        cpu = [m.device for m in ends if device_type(m.device) == "CPU"]
        if cpu and len(cpu) == len(ends):
            target = [n for n in component if n in plumbing]
        elif ends and all(map(_is_host_list_op, ends)):
            if _keeps_host_elements(ends):
                for n in ends:
                    if n.op in _HANDS_OVER:
                        attr, index = _HANDS_OVER[n.op]
                        n.set_attr(attr, [index])
                        moved += 1
                continue
            target = list(component)
        else:
            continue
        device = cpu[0] if cpu else cpu_device(next(n for n in component
                                                    if n in plumbing).device)
        for n in target:
            if n.device != device:
                n.device = device
                moved += 1
    return moved
