"""The reference executor: runs a compiled model with the numpy references of the op registry.

It is the specification the C++ runtime's kernels are checked against, and it executes the
model exactly as laid out: arena values are views into one scratch buffer at their planned
offsets, so a wrong memory plan corrupts results here too.

    outputs = reference_executor.run(model_bytes_or_Model, [np.ndarray, ...])
"""
import numpy as np

from graph_engine import ops
from graph_engine.compiler import dtypes as dt
from graph_engine.compiler import model_format as mf


class ExecutionError(RuntimeError):
    pass


def _view(buffer, offset, value):
    dtype = dt.numpy_dtype(value.dtype)
    count = int(np.prod(value.dims))
    return np.frombuffer(buffer, dtype, count, offset).reshape(value.dims)


def run(model, inputs):
    if isinstance(model, (bytes, bytearray, memoryview)):
        model = mf.deserialize(bytes(model))
    if len(inputs) != len(model.inputs):
        raise ExecutionError(f"model {model.name!r} takes {len(model.inputs)} inputs, "
                             f"got {len(inputs)}")
    arena = bytearray(model.arena_bytes)
    env = {}
    for vid, v in enumerate(model.values):
        if v.format != mf.Format.ND:
            raise ExecutionError(f"value {vid}: format {v.format.name} is not supported by the "
                                 f"reference executor")
        if v.kind == mf.Kind.INPUT:
            x = np.asarray(inputs[v.where])
            if x.shape != v.dims or x.dtype != dt.numpy_dtype(v.dtype):
                raise ExecutionError(
                    f"input {v.where}: expected {dt.name(v.dtype)}{list(v.dims)}, got "
                    f"{x.dtype}{list(x.shape)}")
            env[vid] = x
        elif v.kind == mf.Kind.CONST:
            env[vid] = model.const_array(vid)
        elif v.kind == mf.Kind.ARENA:
            env[vid] = _view(arena, v.where, v)
        else:
            env[vid] = np.empty(v.dims, dt.numpy_dtype(v.dtype))
    for k in model.kernels:
        op = ops.get(k.kernel)
        if op is None:
            raise ExecutionError(f"kernel {k.kernel} (node {k.node!r}) has no reference")
        out_values = [model.values[o] for o in k.outputs]
        try:
            results = ops.evaluate(op, [env[i] for i in k.inputs], k.attrs,
                                   [v.dtype for v in out_values])
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise ExecutionError(f"kernel {k.kernel} (node {k.node!r}): {e}") from None
        for o, v, r in zip(k.outputs, out_values, results):
            if r.shape != v.dims:
                raise ExecutionError(f"kernel {k.kernel} (node {k.node!r}) produced shape "
                                     f"{list(r.shape)}, the model says {list(v.dims)}")
            np.copyto(env[o], r)
    direct = lambda i, v: v.kind == mf.Kind.OUTPUT and v.where == i   # written in place
    return [env[vid] if direct(i, model.values[vid]) else env[vid].copy()
            for i, vid in enumerate(model.outputs)]
