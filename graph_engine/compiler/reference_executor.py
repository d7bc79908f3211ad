"""The reference executor: runs a compiled model with the numpy references of the op registry.

It is the specification the C++ runtime's kernels are checked against, and it executes the
model exactly as laid out: arena values are views into one scratch buffer at their planned
offsets, so a wrong memory plan corrupts results here too.

    outputs = reference_executor.run(model_bytes_or_Model, [np.ndarray, ...])

Values in padded formats (NC1HWC0, FRACTAL_Z; docs/layouts.md) are held as their storage
arrays, exactly as the device holds them: kernels read them unpacked to the logical array
and their results are packed back (padding zero). Model inputs and outputs in such a format
are storage arrays too.
"""
import numpy as np

from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.ops import layout


class ExecutionError(RuntimeError):
    pass


def _storage_shape(v):
    return layout.storage_shape(v.format, v.dims, v.dtype)


def _view(buffer, offset, value):
    dtype = dt.numpy_dtype(value.dtype)
    shape = _storage_shape(value)
    return np.frombuffer(buffer, dtype, int(np.prod(shape)), offset).reshape(shape)


def run(model, inputs):
    if isinstance(model, (bytes, bytearray, memoryview)):
        model = mf.deserialize(bytes(model))
    if len(inputs) != len(model.inputs):
        raise ExecutionError(f"model {model.name!r} takes {len(model.inputs)} inputs, "
                             f"got {len(inputs)}")
    arena = bytearray(model.arena_bytes)
    cached = bytearray(model.cached_bytes())
    env = {}                     # value id -> storage array
    for vid, v in enumerate(model.values):
        if v.format == mf.Format.FRACTAL_NZ:
            raise ExecutionError(f"value {vid}: format FRACTAL_NZ is not supported by the "
                                 f"reference executor (supported: ND, NCHW, NHWC, NC1HWC0, FRACTAL_Z)")
        shape = _storage_shape(v)
        if v.kind == mf.Kind.INPUT:
            x = np.asarray(inputs[v.where])
            if x.shape != shape or x.dtype != dt.numpy_dtype(v.dtype):
                raise ExecutionError(
                    f"input {v.where}: expected {dt.name(v.dtype)}{list(shape)}, got "
                    f"{x.dtype}{list(x.shape)}")
            env[vid] = x
        elif v.kind == mf.Kind.CONST:
            env[vid] = np.frombuffer(model.const_blob, dt.numpy_dtype(v.dtype),
                                     int(np.prod(shape)), v.where).reshape(shape)
        elif v.kind == mf.Kind.ARENA:
            env[vid] = _view(arena, v.where, v)
        elif v.kind == mf.Kind.CACHED:           # this executor keeps nothing between runs
            env[vid] = _view(cached, v.where, v)
        else:
            env[vid] = np.empty(shape, dt.numpy_dtype(v.dtype))

    def logical(vid):
        return layout.unpack(env[vid], model.values[vid].format, model.values[vid].dims)

    for k in model.kernels:
        op = ops.get(k.kernel)
        if op is None:
            raise ExecutionError(f"kernel {k.kernel} (node {k.node!r}) has no reference")
        out_values = [model.values[o] for o in k.outputs]
        try:
            results = ops.evaluate(op, [logical(i) for i in k.inputs], k.attrs,
                                   [v.dtype for v in out_values])
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise ExecutionError(f"kernel {k.kernel} (node {k.node!r}): {e}") from None
        for o, v, r in zip(k.outputs, out_values, results):
            if r.shape != v.dims:
                raise ExecutionError(f"kernel {k.kernel} (node {k.node!r}) produced shape "
                                     f"{list(r.shape)}, the model says {list(v.dims)}")
            np.copyto(env[o], layout.pack(r, v.format))
    direct = lambda i, v: v.kind == mf.Kind.OUTPUT and v.where == i   # written in place
    return [env[vid] if direct(i, model.values[vid]) else env[vid].copy()
            for i, vid in enumerate(model.outputs)]
