"""Which nodes may join an NPU cluster, and why the others may not (the report's reasons)."""
import functools

from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.partition.contexts import ENTER, EXIT, MERGE, SWITCH
from graph_engine.compiler.signature import DT_RESOURCE, DT_STRING, DT_VARIANT, op_def, signature

PRESERVE_ATTR = "_npu_preserve"
# On a node a rewrite made for TF to run in host memory outside any cluster (int32 arithmetic
# with TF's host kernels): its result is a cluster's compile-time value, not a member's input.
HOST_ATTR = "_npu_host"
HOST_ARITHMETIC = "int32 arithmetic TF runs in host memory: a compile-time value of a cluster"

# Ops that stay TF ops whatever their device, with the reason shown to users.
_STAYS_IN_TF = {
    **dict.fromkeys(("_Arg", "_Retval", "Placeholder", "PlaceholderWithDefault",
                     "_DeviceArg", "_DeviceRetval"), "graph input/output stays in TF"),
    **dict.fromkeys(("_Send", "_Recv", "_HostSend", "_HostRecv"), "transfer op stays in TF"),
    **dict.fromkeys((*SWITCH, *MERGE, *ENTER, *EXIT, "NextIteration", "RefNextIteration",
                     "LoopCond", "If", "StatelessIf", "While", "StatelessWhile", "Case",
                     "StatelessCase", "ControlTrigger"), "control-flow op stays in TF"),
    **dict.fromkeys(("PartitionedCall", "StatefulPartitionedCall", "SymbolicGradient"),
                    "function call stays in TF"),
    "NoOp": "control-only op stays in TF",
    "NpuGraphOp": "already an NPU cluster",
    "NpuStatefulGraphOp": "already an NPU cluster",
}


@functools.lru_cache(maxsize=256)          # a graph has a few device strings, on every node
def device_type(device):
    """'NPU' for '/job:localhost/replica:0/task:0/device:NPU:0', '' when unplaced."""
    for part in device.split("/"):
        if part.startswith("device:"):
            part = part[len("device:"):]
        kind, sep, index = part.rpartition(":")
        if sep and index.isdigit() and kind and kind.upper() == kind:
            return kind
    return ""


def unsupported_reason(node):
    """Why the NPU cannot run `node` (None when it can): op, dtype or value-kind reasons."""
    if node.op in _STAYS_IN_TF:
        return _STAYS_IN_TF[node.op]
    sig = signature(node.op, node.attrs)
    if sig is not None:
        kinds = set(sig.input_dtypes) | set(sig.output_dtypes)
        if DT_RESOURCE in kinds:
            return "resource op stays in TF"
        if DT_STRING in kinds or DT_VARIANT in kinds:
            return "string/variant values stay in TF"
        if sig.is_ref:
            return "reference-typed (TF1 variable) op stays in TF"
    op = ops.get(node.op)
    if op is None or op.internal:
        return f"op {node.op} has no NPU implementation"
    if node.op != "Const":
        reason = op.unsupported_dtype(node.python_attrs(op.type_attrs))
        if reason:
            return reason
    for v in node.outputs:
        if v.dtype is not None and v.dtype not in _NPU_DTYPES:
            return f"dtype {dt.name(v.dtype)} not supported for op {node.op}"
    return None


_NPU_DTYPES = set(ops.ALL) | {dt.DT_UINT64, dt.DT_COMPLEX64}  # uint64: stateless random key/counter


def classify(node):
    """(clusterable, reason); reason None for clusterable nodes."""
    if node.attr(PRESERVE_ATTR):
        return False, "kept by Grappler (fetch or preserved node)"
    if node.attr(HOST_ATTR):
        return False, HOST_ARITHMETIC
    reason = unsupported_reason(node)
    kind = device_type(node.device)
    if kind != "NPU":
        return False, reason or (f"placed on {kind} by TensorFlow/user" if kind
                                 else "not placed on a device")
    if reason:
        return False, reason
    if node.op == "Const":
        return False, "constant: copied into the clusters that read it"
    return True, None


@functools.lru_cache(maxsize=512)
def _host_kernel_constraints(op_type):
    """The type constraints ({attr: allowed DataTypes}) of TF's kernels for `op_type` on devices
    like the NPU (DEVICE_DEFAULT) that keep every input and output in host memory."""
    from tensorflow.python.framework import kernels
    od = op_def(op_type)
    if od is None:
        return ()
    args = {a.name for a in list(od.input_arg) + list(od.output_arg)}
    return tuple({c.name: frozenset(c.allowed_values.list.type) for c in k.constraint}
                 for k in kernels.get_registered_kernels_for_op(op_type).kernel
                 if k.device_type == "DEFAULT" and args <= set(k.host_memory_arg))


def runs_on_host_in_tf(node):
    """Whether TF itself runs `node` on the NPU in host memory (int32 arithmetic of loop
    counters and shapes: AddV2, Less, Range ... have such kernels): no launch, no copy."""
    python_attrs = node.python_attrs()
    return any(all(python_attrs.get(name) in allowed for name, allowed in kernel.items())
               for kernel in _host_kernel_constraints(node.op))
