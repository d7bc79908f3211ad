"""Shape inference with concrete shapes, and value inference: every value gets its static
shape, and a constant value where it is computable at compile time (Const, Shape/Size/Rank of a
static shape, any foldable op whose inputs are all known and whose result is small).
fold_constants then turns the known values into Const nodes."""
import math

import numpy as np

from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.ops.errors import (CompileError, InvalidInputError, OutOfMemoryError,
                                          UnsupportedError)
from graph_engine.compiler.kernel_attrs import kernel_attrs, split_inputs

FOLD_LIMIT_BYTES = 1 << 20     # bigger results are computed at run time, not stored


def _nbytes(shape, dtype):
    return math.prod(int(d) for d in shape) * dt.itemsize(dtype)   # exact: no int64 overflow


def device_memory(c):
    """Bytes of memory of one NPU device, compile option `device_memory_bytes` (npu_device's
    bridge passes the runtime's); None compiles for no device in particular (no bound)."""
    limit = c.options.get("device_memory_bytes")
    return int(limit) if limit else None


def _check_fits(node, out_shapes, out_dtypes, limit):
    """A value larger than the device's memory can never exist on it: refuse it before anything
    computes or folds it (TF's ResourceExhaustedError, naming the sizes)."""
    if limit is None:
        return
    for i, (s, t) in enumerate(zip(out_shapes, out_dtypes)):
        n = _nbytes(s, t)
        if n > limit:
            raise OutOfMemoryError(
                f"output {i} ({dt.name(t).replace('DT_', '').lower()}{list(s)}) needs {n} bytes of "
                f"device memory; the NPU has {limit} bytes (hbm_size)", node.name, node.op)


def _set(node, shapes, consts=None):
    if len(shapes) != len(node.outputs):
        raise CompileError(f"shape function gave {len(shapes)} outputs, the op has "
                           f"{len(node.outputs)}", node.name, node.op)
    for i, (v, s) in enumerate(zip(node.outputs, shapes)):
        v.shape = tuple(int(d) for d in s)
        if consts is not None:
            v.const = np.asarray(consts[i], dt.numpy_dtype(v.dtype))
            if v.const.shape != v.shape:
                raise CompileError(f"output {i}: computed shape {list(v.const.shape)} differs "
                                   f"from inferred {list(v.shape)}", node.name, node.op)


def _structural(node, c):
    """_Arg, _Retval, Const, Placeholder, NoOp: True if handled."""
    if node.op == "_Arg":
        i = node.attr("index")
        if i >= len(c.input_shapes) or c.input_shapes[i] is None:
            raise CompileError(f"no concrete shape given for input {i} "
                               f"({len(c.input_shapes)} input shapes)", node.name, node.op)
        _set(node, [c.input_shapes[i]])
    elif node.op == "Placeholder":
        shape = node.attr("shape")
        if shape is None or any(d < 0 for d in shape):
            raise CompileError(f"placeholder shape {shape} is not fully defined", node.name,
                               node.op)
        _set(node, [shape])
    elif node.op == "Const":
        value = node.attr("value")
        _set(node, [value.shape], [value])
    elif node.op in ("_Retval", "NoOp"):
        pass
    else:
        return False
    return True


def infer_node(node, c):
    if _structural(node, c):
        return
    op = ops.get(node.op)
    if op is None:
        raise UnsupportedError(f"op {node.op} has no NPU implementation", node.name, node.op)
    reason = op.unsupported_dtype(node.python_attrs(op.type_attrs))
    if reason:
        raise UnsupportedError(reason, node.name, node.op)
    for v in node.inputs:
        if v.shape is None:
            raise CompileError(f"input {v.ref} has no inferred shape", node.name, node.op)
    try:
        attrs = kernel_attrs(node, op)
        data = split_inputs(node, op)[0]
        shapes = [v.shape for v in data]
        out_dtypes = [v.dtype for v in node.outputs]
        out_shapes = op.shapes(shapes, attrs)
        _check_fits(node, out_shapes, out_dtypes, device_memory(c))
        known = None
        # Ops without a runtime kernel fold whatever their size; others when small, or when the
        # result is no bigger than a constant it is computed from (weights * scale, weight casts:
        # folding them stores no more than the model holds and saves a kernel per step).
        out_bytes = sum(_nbytes(s, t) for s, t in zip(out_shapes, out_dtypes))
        biggest_const = max((v.const.nbytes for v in data if v.const is not None), default=0)
        if out_shapes and all(0 in tuple(s) for s in out_shapes) and not op.checks_values:
            # Empty results are known without computing anything (TF returns them for empty
            # inputs): no kernel ever sees the zero-size shapes.
            known = [np.zeros(tuple(s), dt.numpy_dtype(t)) for s, t in zip(out_shapes, out_dtypes)]
        elif not op.runtime_kernel or out_bytes <= max(FOLD_LIMIT_BYTES, biggest_const):
            known = op.value_from_shapes(shapes, attrs, out_dtypes)
            if known is None and op.foldable and all(v.const is not None for v in data):
                known = ops.evaluate(op, [v.const for v in data], attrs, out_dtypes)
        _set(node, out_shapes, known)
    except CompileError as e:
        if e.node is None:               # an op's own check: name the node
            raise type(e)(e.reason, node.name, node.op) from None
        raise
    except ValueError as e:              # shape functions reject invalid inputs with ValueError
        raise InvalidInputError(str(e), node.name, node.op) from None
    except (TypeError, KeyError, IndexError) as e:
        raise CompileError(f"{type(e).__name__}: {e}", node.name, node.op) from None


def run(c):
    for node in c.graph.topo_order():
        infer_node(node, c)
