"""Which nodes have NC1HWC0 kernels (runtime/kernels/*_5hd.cc) and the formats they read and
write. Shared by the layout passes; not a pass itself.

A node chosen to run in NC1HWC0 carries the attr MARK ("_npu_format"; underscore attrs never
reach kernels). Formats are model_format.Format members; None means ND.
"""
from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.kernel_attrs import input_names
from graph_engine.ops.formats import Format
from graph_engine.ops.layout import c0

MARK = "_npu_format"
NC1HWC0, FRACTAL_Z, FILTER_KN = Format.NC1HWC0, Format.FRACTAL_Z, Format.FILTER_KN

CONVOLUTIONS = frozenset({"Conv2D", "NpuFusedConv2D", "DepthwiseConv2dNative",
                          "NpuFusedDepthwiseConv2D"})
POOLS = frozenset({"MaxPool", "AvgPool"})
FLOATS = (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16)


def is_5hd(node):
    return node.attr(MARK) == "NC1HWC0"


def mark(node):
    node.set_attr(MARK, "NC1HWC0")


def data_positions(node):
    """Positions in node.inputs of the data inputs (const inputs become kernel attrs)."""
    op = ops.get(node.op)
    if op is None or not op.const_inputs:
        return list(range(len(node.inputs)))
    return [i for i, name in enumerate(input_names(node)) if name not in op.const_inputs]


def _const_ints(node, position):
    v = node.inputs[position]
    return None if v.const is None else [int(x) for x in v.const.reshape(-1)]


def _nhwc4(v):
    return v.shape is not None and len(v.shape) == 4 and v.dtype in FLOATS


def _channels_match(v, channels, dtype):
    """An operand an elementwise kernel can read from NC1HWC0 storage next to the output."""
    return (v.shape is not None and len(v.shape) <= 4 and len(v.shape) >= 1
            and v.shape[-1] == channels and c0(v.dtype) == c0(dtype))


def _scalar(v):
    return v.shape is not None and all(d == 1 for d in v.shape)


def can_run_5hd(node):
    """True when the node has an NC1HWC0 kernel for its attrs and shapes."""
    op, ins = node.op, node.inputs
    if not node.outputs or node.outputs[0].shape is None:
        return False
    out = node.outputs[0]
    nhwc = node.attr("data_format", "NHWC") in ("NHWC", b"NHWC")
    if op in CONVOLUTIONS:
        filt = ins[1].shape
        # conv_5hd.cc contracts over all input channels: a grouped Conv2D (filter depth less
        # than the input's, graph_engine/ops/conv.py) stays ND
        return (nhwc and _nhwc4(ins[0]) and filt is not None and len(filt) == 4
                and (filt[3] == 1 if "Depthwise" in op else filt[2] == ins[0].shape[3]))
    if op in POOLS:
        return nhwc and _nhwc4(ins[0])
    if op == "BiasAdd":
        return nhwc and _nhwc4(ins[0])
    if op in ("Mean", "Sum"):
        axes = _const_ints(node, 1)
        return (_nhwc4(ins[0]) and axes is not None
                and sorted(a % 4 for a in axes) == [1, 2])
    if op == "Pad":
        p = _const_ints(node, 1)
        return _nhwc4(ins[0]) and p is not None and p[:2] == [0, 0] and p[6:] == [0, 0]
    if op == "ConcatV2":
        axis = _const_ints(node, len(ins) - 1)
        return (axis is not None and axis[0] in (3, -1)
                and all(_nhwc4(v) for v in ins[:-1]))
    if op == "NpuElementwise":     # its NC1HWC0 kernel reads storage flat: no broadcasting
        return (len(node.outputs) == 1 and _nhwc4(out)
                and all(ins[i].shape == out.shape and c0(ins[i].dtype) == c0(out.dtype)
                        for i in data_positions(node)))
    if ops.has(op, "layout_agnostic"):
        if len(node.outputs) != 1 or not _nhwc4(out):
            return False
        return all(_scalar(ins[i]) or _channels_match(ins[i], out.shape[-1], out.dtype)
                   for i in data_positions(node))
    return False


def filter_format(node):
    """The storage format a (non-depthwise) NC1HWC0 convolution reads its filter in: float32
    filters as the GEMM operand conv_5hd.cc contracts with (FILTER_KN, read in place), other
    floats FRACTAL_Z (the kernel computes in float32 and keeps its own converted copy)."""
    return FILTER_KN if node.inputs[1].dtype == dt.DT_FLOAT else FRACTAL_Z


def input_formats(node):
    """{position in node.inputs: format} for the data inputs of a node marked NC1HWC0."""
    op, n = node.op, len(node.inputs)
    if op in CONVOLUTIONS:
        want = {0: NC1HWC0, 1: filter_format(node) if "Depthwise" not in op else None}
        extra = 2
        if node.attr("has_bias", False):
            want[extra] = None
            extra += 1
        if node.attr("has_residual", False):
            want[extra] = NC1HWC0
        return want
    if op == "BiasAdd":
        return {0: NC1HWC0, 1: None}
    if ops.has(op, "layout_agnostic"):
        return {i: None if _scalar(node.inputs[i]) else NC1HWC0 for i in data_positions(node)}
    return {i: NC1HWC0 for i in data_positions(node)} if n else {}


def output_format(node):
    """The format a node marked NC1HWC0 writes its (first) output in."""
    if node.op in ("Mean", "Sum") and not node.attr("keep_dims", False):
        return None
    return NC1HWC0
