"""The last pass: the lowered, planned program becomes a compiled model
(docs/compiled_model_format.md) with its metadata JSON."""
import json

import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.compiler.passes.plan_memory import WEIGHT_FORMATS, nbytes

COMPILER_VERSION = "0.1.0"


def _desc(name, v):
    return {"name": name, "dtype": dt.name(v.dtype), "shape": list(v.shape)}


def build_model(c) -> mf.Model:
    p, plan = c.program, c.plan
    ids, values, blob = {}, [], bytearray()

    # Not recursive: a closure that calls itself is a reference cycle, which would keep the
    # whole IR (through `plan`) alive past Graph.dispose() until the cyclic GC found it.
    def store(v, alias_of=None):
        if v in ids:
            return ids[v]
        kind = plan.kind[v]
        if alias_of is not None:                          # an alias reads the constant's bytes
            where = values[alias_of].where
        elif kind == mf.Kind.CONST:
            blob.extend(b"\0" * (-len(blob) % mf.CONST_ALIGNMENT))
            where = len(blob)
            blob.extend(np.ascontiguousarray(v.const, dt.numpy_dtype(v.dtype)).tobytes())
        else:
            where = plan.where.get(v, 0)
        ids[v] = len(values)
        values.append(mf.Value(dtype=v.dtype, dims=tuple(v.shape), nbytes=nbytes(v), kind=kind,
                               where=where, format=v.format or mf.Format.ND))
        return ids[v]

    def add(v):
        root = plan.storage.get(v, v)
        if v not in ids and plan.kind[v] == mf.Kind.CONST and root is not v:
            return store(v, store(root))
        return store(v)

    inputs = [add(v) for v in p.inputs]
    for v in p.constants:
        add(v)
    kernels = [mf.Kernel(k.kernel, k.node, [add(v) for v in k.inputs],
                         [add(v) for v in k.outputs], k.attrs) for k in p.kernels]
    outputs = [add(v) for v in p.outputs]
    metadata = {
        "compiler": f"graph_engine {COMPILER_VERSION}",
        "name": c.name,
        "source": c.source,
        "options": c.options,
        "inputs": [_desc(n, v) for n, v in zip(p.input_names, p.inputs)],
        "outputs": [_desc(n, v) for n, v in zip(p.output_names, p.outputs)],
        "kernels": [k.kernel for k in p.kernels],
        # conversions of weights (graph inputs, e.g. variables) into a weight format
        # (FRACTAL_Z, FILTER_KN) that run on every step, apart from the activation TransData at
        # layout boundaries; those kept between runs (CACHED values, converted again only when
        # the input changes) are counted apart
        "weight_transdata": sum(_weight_transdata(k) and plan.kind.get(k.outputs[0]) != mf.Kind.CACHED
                                for k in p.kernels),
        "cached_weight_transdata": sum(_weight_transdata(k) and plan.kind.get(k.outputs[0]) == mf.Kind.CACHED
                                       for k in p.kernels),
        "weight_formats": sorted({mf.Format(k.attrs["dst_format"]).name for k in p.kernels
                                  if _weight_transdata(k)}),
        "cached_conversions": plan.cached_conversions,
        "cached_bytes": plan.cached_bytes,
        "cached_transient": plan.cached_transient,
        "arena_bytes": plan.arena_bytes,
        "live_bytes_lower_bound": plan.lower_bound_bytes,
        "no_reuse_bytes": plan.no_reuse_bytes,
        "memory_strategy": plan.strategy,
        "inplace_outputs": plan.inplace,
        # (output, input): results the caller may place in that input's buffer
        "outputs_over_inputs": [list(pair) for pair in plan.in_place],
        "aliased_values": plan.aliased,
        "const_bytes": len(blob),
        # per value id: the TF tensor it holds ("node:index"), for tensor dumps and
        # npu_device.tools.compare_dump; null where no TF tensor corresponds
        "origins": _origins(p, ids),
        "passes": c.log,
    }
    return mf.Model(name=c.name, values=values, kernels=kernels, inputs=inputs, outputs=outputs,
                    arena_bytes=plan.arena_bytes, const_blob=bytes(blob), in_place=list(plan.in_place),
                    metadata=json.dumps(metadata, default=str))


def _weight_transdata(k):
    return k.kernel == "TransData" and k.attrs.get("dst_format") in WEIGHT_FORMATS


# Kernels the engine inserts that only change a value's storage format or precision: a value
# they make without an origin of its own holds their input's tensor.
_CONVERSIONS = ("TransData", "Cast")


def _origins(p, ids):
    origins = [None] * len(ids)
    for v, i in ids.items():
        origins[i] = v.origin
    for k in p.kernels:
        if k.kernel in _CONVERSIONS and len(k.inputs) == 1:
            for v in k.outputs:
                if origins[ids[v]] is None:
                    origins[ids[v]] = origins[ids[k.inputs[0]]]
    return origins


def run(c):
    c.model = build_model(c)
