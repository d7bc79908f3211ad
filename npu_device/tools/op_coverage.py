"""Op coverage sweep: every op the graph-engine registry claims, for every dtype it claims, run
eagerly on the NPU with soft placement off (so nothing can silently fall back to the CPU) and
compared with TensorFlow on the CPU, forward and gradient.

    python -m npu_device.tools.op_coverage                 # writes docs/op_coverage.md
    python -m npu_device.tools.op_coverage --ops Erf,Einsum --out -   # a subset, to stdout

Exit status 1 when any run mismatches or fails. Example inputs: tests/test_ge_ops.py's CASES
(one per op of the original registry) and op_cases.CASES (the ops added for model coverage).
A case is re-run for each dtype its op allows for the type attr of its data inputs; the
gradient is d(sum(out * w))/d(float inputs) with fixed random w, on each device.

float16/bfloat16 are storage types on the NPU (computed in float32, rounded once on store), so
their reference is TF on the CPU in float32 on the same (rounded) inputs, rounded to the dtype:
TF's own half-precision CPU kernels round intermediates, and some (oneDNN's float16 Einsum)
are plainly inaccurate.

The CPU reference is op_cases.tf_cpu_op: convolutions and pooling in NCHW/NCDHW, with dilations,
or depthwise with unequal strides, which only oneDNN builds of TF compute directly, are computed
by TF on the CPU in an equivalent form plain Eigen builds support (transposed to channels-last,
zero-dilated filter, explicit padding and subsampling), forward and gradient, so the sweep
checks the same thing on every machine. A run is "skipped" only where TF has no CPU reference
even so; tests/test_op_coverage.py requires that there be none.
"""
import argparse
import dataclasses
import importlib.util
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

import npu_device  # noqa: F401  (loads the plugin: the NPU device)
from graph_engine import ops
from graph_engine.ops import dtypes as gdt
from npu_device.tools import op_cases

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPU, CPU = "/device:NPU:0", "/device:CPU:0"
# (rtol, atol relative to the largest |expected|) per dtype name; integers must match exactly
TOLERANCE = {"float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (4e-2, 1e-2)}
EAGER_LESS = {"Const", "NoOp"}      # no eager kernel call: covered by tests/test_ge_ops.py only
# Runs where TF on the CPU is not a valid reference (checked against numpy instead).
TF_CPU_WRONG = {("Round", "int32"): "TF's CPU Round returns 0 for integers (it is the identity)",
                ("Round", "int64"): "TF's CPU Round returns 0 for integers (it is the identity)"}


def load_cases():
    """(op, inputs, attrs) for every registered op, from both case tables."""
    path = os.path.join(REPO, "tests", "test_ge_ops.py")
    spec = importlib.util.spec_from_file_location("_ge_op_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES) + list(op_cases.CASES)


@dataclasses.dataclass
class Result:
    op: str
    dtype: str
    forward: str = "ok"       # ok | mismatch: ... | error: ... | skipped: ... (no TF reference)
    gradient: str = "-"       # ok | mismatch | error | skipped | - (no float input, or TF has no gradient)

    @property
    def skipped(self):
        """Not checked (in part): TF on the CPU computes no reference for it, even in the
        equivalent form op_cases.tf_cpu_op uses."""
        return self.forward.startswith("skipped") or self.gradient.startswith("skipped")

    @property
    def failed(self):
        """The NPU disagrees with the reference, or errs."""
        return not (self.forward.startswith(("ok", "skipped"))
                    and self.gradient.startswith(("ok", "-", "skipped")))


def _varied_attr(op_type, inputs, attrs):
    """The type attr the sweep varies: the one type attr of the case's data inputs, when the
    case sets no type attr explicitly (Cast's DstT, Bitcast's type: those cases run as given)."""
    reg = ops.get(op_type)
    if any(a in reg.type_attrs for a in attrs):
        return None
    used = {arg.type_attr for arg in op_def_registry.get(op_type).input_arg
            if arg.name in inputs and arg.type_attr in reg.type_attrs and arg.name not in reg.const_inputs}
    return used.pop() if len(used) == 1 else None


def _convert(a, np_dtype):
    a = np.asarray(a)
    if np_dtype == np.bool_:
        return a > 0
    if np.issubdtype(np_dtype, np.integer) and not np.issubdtype(a.dtype, np.integer):
        r = np.round(a * 3)                     # small nonzero integers (divisors stay valid)
        return np.where(r == 0, 1, r).astype(np_dtype)
    return a.astype(np_dtype)


def variants(case):
    """(dtype name, inputs) for each dtype the registry allows for the case."""
    op_type, inputs, attrs = case
    attr = _varied_attr(op_type, inputs, attrs)
    first = next(iter(inputs.values()), None)
    first = np.asarray(first[0] if isinstance(first, (list, tuple)) else first)
    if attr is None or first.dtype == object:
        return [(_label(inputs, attrs), inputs)]
    arg_attr = {a.name: a.type_attr for a in op_def_registry.get(op_type).input_arg}
    case_dtype = None
    for name, v in inputs.items():
        if arg_attr.get(name) == attr:
            case_dtype = np.asarray(v[0] if isinstance(v, (list, tuple)) else v).dtype
            break
    out = []
    for enum in ops.get(op_type).type_attrs[attr]:
        np_dtype = gdt.numpy_dtype(enum)
        # integer cases stay integer (their values are chosen for integer semantics)
        if np.issubdtype(case_dtype, np.integer) != np.issubdtype(np_dtype, np.integer):
            if np.issubdtype(case_dtype, np.integer) or op_type in _FLOAT_ONLY_VALUES:
                continue
        new = {}
        for name, v in inputs.items():
            conv = (lambda a: _convert(a, np_dtype)) if arg_attr.get(name) == attr else np.asarray
            new[name] = [conv(a) for a in v] if isinstance(v, (list, tuple)) else conv(v)
        out.append((gdt.name(enum).replace("DT_", "").lower().replace("half", "float16"), new))
    return out


def _label(inputs, attrs):
    """The dtype a case runs in: its `dtype` attr (random ops), else its first float input's,
    else its first input's."""
    if "dtype" in attrs and not isinstance(attrs["dtype"], (int, np.integer)):
        return tf.as_dtype(attrs["dtype"]).name
    arrays = [np.asarray(a) for v in inputs.values() for a in (v if isinstance(v, (list, tuple)) else [v])]
    arrays = [a for a in arrays if a.dtype != object and a.size]
    floats = [a for a in arrays if a.dtype.kind == "f" or a.dtype in _NARROW]
    return gdt.name(gdt.from_numpy((floats or arrays)[0].dtype)) if arrays else "-"


_FLOAT_ONLY_VALUES = {"Pow"}    # negative integer exponents are errors, not values


_NARROW = (np.dtype(np.float16), np.dtype(tf.bfloat16.as_numpy_dtype))


def _widened(inputs):
    """float16/bfloat16 inputs as float32 (the CPU reference of narrow dtypes)."""
    w = lambda a: np.asarray(a).astype(np.float32) if np.asarray(a).dtype in _NARROW else a
    return {k: ([w(a) for a in v] if isinstance(v, (list, tuple)) else w(v)) for k, v in inputs.items()}


def _reference(op_type, inputs, attrs, dtype, grad_weights=None):
    """TF on the CPU; for a narrow dtype in float32, with float results rounded to it."""
    if dtype not in ("float16", "bfloat16"):
        return _run(CPU, op_type, inputs, attrs, grad_weights)
    outs, grads = _run(CPU, op_type, _widened(inputs), attrs, grad_weights)
    narrow = np.float16 if dtype == "float16" else tf.bfloat16.as_numpy_dtype
    r = lambda a: a.astype(narrow) if a.dtype == np.float32 else a
    try:     # the output dtypes (ResizeBilinear's is float32 whatever the input)
        out_dtypes = [n.dtype for n in _run(CPU, op_type, inputs, attrs)[0]]
    except Exception:                                                # noqa: BLE001
        out_dtypes = [r(o).dtype for o in outs]   # TF has no CPU kernel for the narrow dtype
    return ([o.astype(d) for o, d in zip(outs, out_dtypes)],
            None if grads is None else [None if g is None else r(_array(g)) for g in grads])


def _run(device, op_type, inputs, attrs, grad_weights=None):
    with tf.device(device):
        tensors = {k: ([tf.constant(a) for a in v] if isinstance(v, (list, tuple)) else tf.constant(v))
                   for k, v in inputs.items()}
        watched = [t for v in tensors.values() for t in (v if isinstance(v, list) else [v])
                   if t.dtype.is_floating]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            if device == CPU:     # TF's CPU kernels, in a form every CPU build supports
                out = op_cases.tf_cpu_op(op_type, tensors, attrs)
            else:
                out = getattr(tf.raw_ops, op_type)(**tensors, **attrs)
            outs = [o for o in (out if isinstance(out, (list, tuple)) else [out]) if o is not None]
            loss = None
            if grad_weights is not None:
                floats = [o for o in outs if o.dtype.is_floating]
                loss = tf.add_n([tf.reduce_sum(o * tf.constant(w, o.dtype))
                                 for o, w in zip(floats, grad_weights)]) if floats else None
        grads = tape.gradient(loss, watched) if loss is not None else None
    return [o.numpy() for o in outs], grads


def _array(t):
    """A gradient as numpy (GatherV2's gradient is IndexedSlices)."""
    if t is None or isinstance(t, np.ndarray):
        return t
    return tf.convert_to_tensor(t).numpy()


def _compare(got, want, dtype):
    if len(got) != len(want):
        return f"mismatch: {len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"mismatch: output {i} is {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if w.dtype.kind == "f" or w.dtype == tf.bfloat16.as_numpy_dtype:
            rtol, atol = TOLERANCE.get(dtype, TOLERANCE["float32"])   # int images -> float32
            g32, w32 = g.astype(np.float32), w.astype(np.float32)
            scale = float(np.max(np.abs(w32[np.isfinite(w32)]), initial=1.0))
            if not np.allclose(g32, w32, rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True):
                err = np.nanmax(np.abs(g32 - w32))
                return f"mismatch: output {i} max abs error {err:.3g}"
        elif not np.array_equal(g, w, equal_nan=g.dtype.kind == "f"):
            return f"mismatch: output {i} differs"
    return "ok"


def _short(e):
    return f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


def _against_numpy(r, op_type, inputs, attrs):
    """The registry's numpy reference instead of TF (see TF_CPU_WRONG)."""
    from graph_engine.compiler.devtools import op_request
    from graph_engine.compiler import reference_executor
    from graph_engine.compiler.compile import compile_model
    nd, model_inputs = op_request(op_type, inputs, **attrs)
    want = reference_executor.run(compile_model(nd.SerializeToString()), model_inputs)
    try:
        got, _ = _run(NPU, op_type, inputs, attrs)
        r.forward = _compare(got, want, r.dtype)
    except Exception as e:                                           # noqa: BLE001
        r.forward = _short(e)
    r.gradient = "- (" + TF_CPU_WRONG[(op_type, r.dtype)] + "; checked against numpy)"
    return r


def run_case(op_type, dtype, inputs, attrs):
    r = Result(op_type, dtype)
    if (op_type, dtype) in TF_CPU_WRONG:
        return _against_numpy(r, op_type, inputs, attrs)
    try:
        want, _ = _reference(op_type, inputs, attrs, dtype)
    except Exception as e:                                           # noqa: BLE001
        r.forward = "skipped: no TF reference: TF on CPU rejects the case: " + _short(e)
        return r
    try:
        got, _ = _run(NPU, op_type, inputs, attrs)
        r.forward = _compare(got, want, dtype)
    except Exception as e:                                           # noqa: BLE001
        r.forward = _short(e)
        return r
    weights = [np.random.default_rng(2).standard_normal(w.shape).astype(np.float32)
               for w in want if w.dtype.kind == "f" or w.dtype == tf.bfloat16.as_numpy_dtype]
    if not weights or dtype not in TOLERANCE:
        return r
    try:
        _, want_g = _reference(op_type, inputs, attrs, dtype, weights)
    except LookupError:                                              # TF registers no gradient
        return r
    except Exception as e:                                           # noqa: BLE001
        r.gradient = "skipped: no TF reference: TF on CPU cannot compute it: " + _short(e)
        return r
    if want_g is None or all(g is None for g in want_g):
        return r
    try:
        _, got_g = _run(NPU, op_type, inputs, attrs, weights)
        pairs = [(_array(g), _array(w)) for g, w in zip(got_g, want_g) if w is not None]
        if any(g is None for g, _ in pairs):
            r.gradient = "mismatch: missing gradient"
        else:
            r.gradient = _compare([g for g, _ in pairs], [w for _, w in pairs], dtype)
    except Exception as e:                                           # noqa: BLE001
        r.gradient = _short(e)
    return r


def sweep(only=None):
    """Results for every (case, dtype) of the registered ops (or of the ops in `only`)."""
    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        results = []
        for op_type, inputs, attrs in load_cases():
            if (only and op_type not in only) or op_type in EAGER_LESS or ops.get(op_type) is None:
                continue
            for dtype, ins in variants((op_type, inputs, attrs)):
                results.append(run_case(op_type, dtype, ins, attrs))
        return results
    finally:
        tf.config.set_soft_device_placement(soft)


def markdown(results):
    by_op = {}
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    reg = ops.registered()
    lines = [
        "# NPU op coverage",
        "",
        "Generated by `python -m npu_device.tools.op_coverage` (do not edit): every op of the graph-engine",
        "registry, run eagerly on the NPU with soft device placement off, against TensorFlow on the CPU",
        "(NCHW/NCDHW, dilated and unequal-stride depthwise convolutions and pooling in an equivalent",
        "form TF's plain Eigen CPU kernels compute: channels-last transposes, zero-dilated filters,",
        "explicit padding and subsampling; see `op_cases.tf_cpu_op`).",
        "Forward: outputs compared (float32 rtol 1e-4, float16 1e-2, bfloat16 4e-2; integers exactly).",
        "Gradient: d(sum(out * w))/d(inputs) computed on each device (`-`: no float input, or TF",
        "defines no gradient). Ops marked compile-only have no eager kernel call (Const, NoOp) or always",
        "fold (their NPU kernel is TF's own).",
        "",
        f"{len(reg)} ops registered; {sum(1 for o in reg if o in by_op)} swept; "
        f"{sum(1 for r in results if r.failed)} failing runs; "
        f"{sum(1 for r in results if r.skipped)} skipped (no TF reference).",
        "",
        "Stateless random ops (Dropout, initializers) draw bit for bit what TF draws on the CPU",
        "(tests/test_ge_random.py); their uint64 key/counter tensors live on the NPU. Not on the NPU",
        "yet (TF runs these on the CPU): the sparse-update ops of IndexedSlices gradients in some",
        "optimizers (Where, ResourceScatterSub; Where's output shape is data-dependent).",
        "",
        "| op | dtype | forward | gradient |",
        "|---|---|---|---|",
    ]
    for name in reg:
        if name not in by_op:
            lines.append(f"| {name} | - | compile-only | - |")
            continue
        for r in by_op[name]:
            lines.append(f"| {r.op} | {r.dtype} | {r.forward.replace('|', '/')} | {r.gradient.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", help="comma-separated op names (default: all registered)")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "op_coverage.md"),
                   help="markdown file to write, or - for stdout")
    args = p.parse_args(argv)
    results = sweep(set(args.ops.split(",")) if args.ops else None)
    text = markdown(results)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    failed = [r for r in results if r.failed]
    skipped = [r for r in results if r.skipped and not r.failed]
    for tag, rs in (("FAIL", failed), ("SKIP", skipped)):
        for r in rs:
            print(f"{tag} {r.op} {r.dtype}: forward {r.forward}; gradient {r.gradient}", file=sys.stderr)
    print(f"{len(results)} runs, {len(failed)} failing, {len(skipped)} skipped (no TF reference)",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
