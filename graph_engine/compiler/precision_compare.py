"""Precision debugging: runs a function's NPU graph in a precision mode and in float32 with
the numpy references, compares every op's outputs, ranks the ops by the error they add, and
proposes the modify_mixlist entry that keeps the worst reduced op types in float32.

    report = compare(fn, [x, w], precision="allow_mix_precision_fp16")
    print(report)                 # table of ops by added error + suggested modify_mixlist
    report.suggestion             # {"black-list": {"to-add": [...]}} or None

An op's error is max|out - out_fp32| / max|out_fp32| over its outputs; the error it adds is
its error minus the largest error of its inputs (what it made worse itself). The suggestion
is verified: `report.fixed_error` is the worst graph-output error with it applied.
"""
import dataclasses
import json

import numpy as np

from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.compiler import devtools
from graph_engine.compiler.compile import compile_model
from graph_engine.compiler.mixlist import BLACK

_HALF_MAX = float(np.finfo(np.float16).max)
OVERFLOW_MODES = ("saturation", "inf_nan")


@dataclasses.dataclass
class OpError:
    node: str
    op: str
    dtype: str           # the op's output dtype in the compared mode
    error: float         # relative error of its outputs against float32
    added: float         # error minus the largest error of its inputs


@dataclasses.dataclass
class Report:
    precision: str
    ops: list            # OpError, largest added error first
    output_error: float  # worst graph-output error in the mode
    suggestion: dict     # modify_mixlist JSON object, or None when nothing reduced adds error
    fixed_error: float   # worst graph-output error with the suggestion applied

    def __str__(self):
        lines = [f"precision {self.precision}: worst output error {self.output_error:.3g}",
                 f"{'node':40} {'op':24} {'dtype':9} {'error':>10} {'added':>10}"]
        lines += [f"{e.node[:40]:40} {e.op:24} {e.dtype:9} {e.error:10.3g} {e.added:10.3g}"
                  for e in self.ops[:10]]
        if self.suggestion:
            lines.append(f"modify_mixlist={json.dumps(self.suggestion)}  "
                         f"(worst output error {self.output_error:.3g} -> {self.fixed_error:.3g})")
        return "\n".join(lines)


def _cluster(fn, args):
    cluster, inputs, _ = devtools.single_cluster(fn, args)
    return cluster, inputs


def _trace(cluster, inputs, options, saturate):
    """The compiled model, {value id: array} and {node: (kernel, inputs, outputs, dtypes)} of
    the cluster compiled with `options`, every kernel evaluated by its numpy reference (float16
    results clamped to ±65504 when `saturate`, like the NPU's saturation mode)."""
    request = devtools.cluster_request(cluster, inputs)
    request.attr["options"].s = json.dumps(options, sort_keys=True).encode()
    model = mf.deserialize(compile_model(request.SerializeToString()))
    env, by_node = {}, {}
    for vid, v in enumerate(model.values):
        if v.kind == mf.Kind.INPUT:
            env[vid] = inputs[v.where]
        elif v.kind == mf.Kind.CONST:
            env[vid] = model.const_array(vid)
    for k in model.kernels:
        out_types = [model.values[o].dtype for o in k.outputs]
        with np.errstate(over="ignore", invalid="ignore"):     # overflow is what we measure
            results = ops.evaluate(ops.get(k.kernel), [env[i] for i in k.inputs], k.attrs,
                                   out_types)
        if saturate:
            results = [np.clip(r, -_HALF_MAX, _HALF_MAX) if t == dt.DT_HALF else r
                       for r, t in zip(results, out_types)]
        env.update(zip(k.outputs, results))
        if k.kernel != "Cast":
            by_node[k.node] = (k.kernel, list(k.inputs), list(k.outputs), out_types)
    return model, env, by_node


def _error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if want.size == 0:
        return 0.0
    scale = np.max(np.abs(want[np.isfinite(want)]), initial=0.0) or 1.0
    diff = np.abs(got - want)
    return float(np.inf if not np.all(np.isfinite(diff)) else diff.max() / scale)


def _run(cluster, inputs, precision, overflow_mode, modify=None):
    # Optional passes off: errors are attributed to the TF ops the mixlists name, which fused
    # kernels would merge. The precision pass places the same Casts either way.
    options = {"precision": precision, "fusion_switch_file": {"ALL": "off"}}
    if modify:
        options["modify_mixlist"] = modify
    return _trace(cluster, inputs, options, overflow_mode == "saturation")


def _output_error(model, env, ref_model, ref_env):
    return max((_error(env[a], ref_env[b]) for a, b in zip(model.outputs, ref_model.outputs)),
               default=0.0)


def compare(fn, args, precision="allow_mix_precision_fp16", modify_mixlist=None, top=3,
            overflow_mode="saturation"):
    """Report of `fn(*args)` (one NPU cluster) in `precision` against float32; suggests
    black-listing up to `top` reduced op types."""
    if overflow_mode not in OVERFLOW_MODES:
        raise ValueError(f"overflow_mode {overflow_mode!r} is not allowed; allowed: "
                         f"{', '.join(OVERFLOW_MODES)}")
    cluster, inputs = _cluster(fn, args)
    ref_model, ref_env, ref_nodes = _run(cluster, inputs, "must_keep_origin_dtype",
                                         overflow_mode)
    model, env, nodes = _run(cluster, inputs, precision, overflow_mode, modify_mixlist)
    producer = {o: name for name, (_, _, outs, _) in nodes.items() for o in outs}
    errors, value_error = [], {}
    for name, (op, ins, outs, types) in nodes.items():
        if name not in ref_nodes:
            continue
        floats = [(o, r) for o, r, t in zip(outs, ref_nodes[name][2], types)
                  if t in dt.FLOATING]
        if not floats:
            continue
        err = max(_error(env[o], ref_env[r]) for o, r in floats)
        for o, _ in floats:
            value_error[o] = err
        upstream = max((value_error.get(_through_casts(model, i, producer), 0.0) for i in ins),
                       default=0.0)
        errors.append(OpError(name, op, dt.name(types[0]), err, max(err - upstream, 0.0)))
    errors.sort(key=lambda e: -e.added)
    worst_types = []
    for e in errors:
        if e.added > 0 and e.dtype != "float32" and e.op not in BLACK and e.op not in worst_types:
            worst_types.append(e.op)
        if len(worst_types) == top:
            break
    out_err = _output_error(model, env, ref_model, ref_env)
    suggestion, fixed = None, out_err
    if worst_types:
        suggestion = {"black-list": {"to-add": worst_types}}
        fixed_model, fixed_env, _ = _run(cluster, inputs, precision, overflow_mode, suggestion)
        fixed = _output_error(fixed_model, fixed_env, ref_model, ref_env)
    return Report(precision, errors, out_err, suggestion, fixed)


def _through_casts(model, vid, producer):
    """The value a (chain of) pass-made Cast(s) reads, so an op's inputs map to their producer."""
    by_output = {o: k for k in model.kernels for o in k.outputs}
    while vid not in producer and vid in by_output and by_output[vid].kernel == "Cast":
        vid = by_output[vid].inputs[0]
    return vid
