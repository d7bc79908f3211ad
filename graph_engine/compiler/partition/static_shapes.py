"""The input shapes an NpuGraphOp will be called with, when the graph already fixes them.

The graph Grappler hands over has no shape annotations on most nodes, but a function's inputs
carry what TF traced them with: `_output_shapes` on a data _Arg, `_handle_shapes` on a
resource _Arg (its variable's shape). A cluster's inputs are mostly such args, variables read
from them and constants, so their shapes follow without running shape inference over TF ops
the engine does not model. With every input's shape known (and no `values` input, whose
contents the compile needs too) the cluster's compile request can be made at partition time,
before TF has placed and instantiated the graph (npu_device compiles it ahead meanwhile).
"""
from tensorflow.core.framework import types_pb2

from graph_engine import ops

# Ops whose output has the shape of their first input.
_SAME_SHAPE = ("Identity", "Cast", "StopGradient", "Snapshot")


def _concrete(shape_proto):
    if shape_proto.unknown_rank or any(d.size < 0 for d in shape_proto.dim):
        return None
    return tuple(d.size for d in shape_proto.dim)


def _handle_shape(handle):
    """A variable's shape from its handle, a function argument's `_handle_shapes`."""
    node = handle.node
    if node.op != "_Arg":
        return None
    av = node.attrs.get("_handle_shapes")
    shapes = av.list.shape if av is not None else ()
    return _concrete(shapes[0]) if len(shapes) == 1 else None


def _shape(value, depth=0):
    """The static shape of IR Value `value`, or None when the graph does not fix it."""
    node = value.node
    if value.dtype == types_pb2.DT_RESOURCE:   # a variable's handle: the variable's shape
        return _handle_shape(value)
    if node.op == "_Arg":
        av = node.attrs.get("_output_shapes")
        shapes = av.list.shape if av is not None else ()
        return _concrete(shapes[value.index]) if value.index < len(shapes) else None
    if node.op == "Const":
        return _concrete(node.attrs["value"].tensor.tensor_shape)
    if node.op == "ReadVariableOp" and node.inputs:
        return _handle_shape(node.inputs[0])
    if node.op in _SAME_SHAPE and node.inputs and depth < 8:
        return _shape(node.inputs[0], depth + 1)
    return None


def input_shapes(npu_graph_op):
    """[shape per input] of an NpuGraphOp IR node when all are fixed, else None."""
    if npu_graph_op.attr("Tvalues"):
        return None
    shapes = []
    for v in npu_graph_op.inputs:
        s = _shape(v)
        if s is None:
            return None
        shapes.append(s)
    return shapes


# Ops with a list of their outputs' shapes (unknown dims -1) in an attr.
_SHAPES_ATTR = {"IteratorGetNext": "output_shapes", "IteratorGetNextSync": "output_shapes",
                "OptionalGetValue": "output_shapes", "_Arg": "_output_shapes",
                "Placeholder": "shape"}


def static_dim(value, axis, depth=0):
    """Dimension `axis` of IR Value `value` when the graph fixes it (a batch of unknown size
    may still have fixed image sizes), else None."""
    node = value.node
    if node.op in _SHAPES_ATTR and value.dtype != types_pb2.DT_RESOURCE:
        av = node.attrs.get(_SHAPES_ATTR[node.op])
        shapes = () if av is None else [av.shape] if node.op == "Placeholder" else av.list.shape
        index = 0 if node.op == "_Arg" else value.index
        if index < len(shapes) and not shapes[index].unknown_rank and \
                axis < len(shapes[index].dim) and shapes[index].dim[axis].size >= 0:
            return shapes[index].dim[axis].size
        return None
    if node.op in _SAME_SHAPE + ("Enter",) and node.inputs and depth < 8:
        return static_dim(node.inputs[0], axis, depth + 1)
    op = ops.get(node.op)
    if op is not None and op.elementwise_kernel and depth < 8:    # x * scale + offset
        varying = [v for v in node.inputs
                   if v.node.op != "Const" or v.node.attrs["value"].tensor.tensor_shape.dim]
        if len(varying) == 1:
            return static_dim(varying[0], axis, depth + 1)
    shape = _shape(value)
    return shape[axis] if shape is not None and axis < len(shape) else None
