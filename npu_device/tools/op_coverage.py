"""Op coverage sweep: every TF op with an NPU kernel (the graph-engine registry's and the plugin's
own), for every dtype it claims, run eagerly on the NPU with soft placement off (so nothing can
silently fall back to the CPU) and compared with TensorFlow on the CPU, forward and gradient.

    python -m npu_device.tools.op_coverage                 # writes docs/op_coverage.md
    python -m npu_device.tools.op_coverage --ops Erf,Einsum --out -   # a subset, to stdout

Exit status 1 when any run mismatches or fails. Example inputs: tests/test_ge_ops.py's CASES
(one per op of the original registry) and cases.all_cases() (op_cases.CASES and the op
families of npu_device/tools/cases/). An input given as op_cases.Var is a resource variable on
the device; its value after the op is compared as one more output.
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
import functools
import importlib.util
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import kernels as tf_kernels
from tensorflow.python.framework import op_def_registry

import npu_device  # noqa: F401  (loads the plugin: the NPU device)
from graph_engine import ops
from graph_engine.ops import dtypes as gdt
from npu_device.tools import cases, op_cases
from npu_device.tools.op_cases import ListOf, Var

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPU, CPU = "/device:NPU:0", "/device:CPU:0"
# (rtol, atol relative to the largest |expected|) per dtype name; integers must match exactly
TOLERANCE = {"float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (4e-2, 1e-2),
             "complex64": (1e-4, 1e-5)}      # its real and imaginary parts as float32
EAGER_LESS = {"Const", "NoOp"}      # no eager kernel call: covered by tests/test_ge_ops.py only
# Runs where TF on the CPU is not a valid reference (checked against numpy instead).
TF_CPU_WRONG = {("Round", "int32"): "TF's CPU Round returns 0 for integers (it is the identity)",
                ("Round", "int64"): "TF's CPU Round returns 0 for integers (it is the identity)"}
# Ops whose float16/bfloat16 reference is TF's own narrow CPU kernel, not float32 rounded: their
# results are exact selections, and their identities are the narrow dtype's own (an empty
# segment's max is float16's lowest -65504, which float32's lowest would round to -inf).
NARROW_NATIVE = {"UnsortedSegmentMax", "UnsortedSegmentMin"}


@functools.lru_cache(maxsize=None)     # kernels register when the plugin loads, once
def plugin_ops():
    """{op: {type attr: allowed DataTypes}} for the TF ops with an NPU kernel that the plugin
    registers itself rather than through the graph-engine registry (variable updates, ops whose
    output shape depends on input values ...), read back from TensorFlow's kernel registry.
    The plugin's own ops (NpuGraphOp, NpuHostLogicalAnd ...: made by the partitioner, not TF
    ops, so without a tf.raw_ops wrapper) are not among them."""
    found = {}
    for k in tf_kernels.get_all_registered_kernels().kernel:
        if k.device_type != "NPU" or ops.get(k.op) is not None or not hasattr(tf.raw_ops, k.op):
            continue
        attrs = found.setdefault(k.op, {})
        for c in k.constraint:
            allowed = attrs.setdefault(c.name, [])
            allowed += [t for t in c.allowed_values.list.type if t not in allowed]
    return dict(sorted(found.items()))


def npu_ops():
    """Every TF op that runs on the NPU: the graph-engine registry's and the plugin's own."""
    return sorted(set(ops.registered()) | set(plugin_ops()))


def _type_attrs(op_type):
    reg = ops.get(op_type)
    return reg.type_attrs if reg is not None else plugin_ops().get(op_type, {})


def _const_inputs(op_type):
    reg = ops.get(op_type)
    return reg.const_inputs if reg is not None else ()


@functools.lru_cache(maxsize=None)
def load_cases():
    """(op, inputs, attrs) for every registered op, from both case tables."""
    path = os.path.join(REPO, "tests", "test_ge_ops.py")
    spec = importlib.util.spec_from_file_location("_ge_op_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.CASES) + tuple(cases.all_cases())


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
    type_attrs = _type_attrs(op_type)
    if any(a in type_attrs for a in attrs):
        return None
    if any(isinstance(v, Var) for v in inputs.values()):    # the variables' value type
        return next((a for a in ("T", "dtype") if a in type_attrs), None)
    used = {arg.type_attr for arg in op_def_registry.get(op_type).input_arg
            if arg.name in inputs and arg.type_attr in type_attrs and arg.name not in _const_inputs(op_type)}
    return used.pop() if len(used) == 1 else None


def _convert(a, np_dtype):
    if isinstance(a, (Var, ListOf)):
        return type(a)(_convert(a.value, np_dtype))
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
    first = _value(first[0] if isinstance(first, (list, tuple)) else first)
    if attr is None or first.dtype == object:
        return [(_label(inputs, attrs), inputs)]
    arg_attr = {a.name: a.type_attr for a in op_def_registry.get(op_type).input_arg}
    case_dtype = None
    for name, v in inputs.items():
        if _varies(arg_attr.get(name), v, attr):
            case_dtype = _value(v[0] if isinstance(v, (list, tuple)) else v).dtype
            break
    out = []
    for enum in _type_attrs(op_type)[attr]:
        try:
            np_dtype = gdt.numpy_dtype(enum)
        except ValueError:          # a type the sweep has no numpy form for
            continue
        if np_dtype == np.int32 and any(isinstance(v, Var) for v in inputs.values()):
            continue   # int32 variables live on the CPU (TF has no int32 VarHandleOp but the CPU's)
        # integer cases stay integer (their values are chosen for integer semantics)
        if np.issubdtype(case_dtype, np.integer) != np.issubdtype(np_dtype, np.integer):
            if np.issubdtype(case_dtype, np.integer) or op_type in _FLOAT_ONLY_VALUES:
                continue
        new = {}
        for name, v in inputs.items():
            conv = (lambda a: _convert(a, np_dtype)) if _varies(arg_attr.get(name), v, attr) else _same
            new[name] = [conv(a) for a in v] if isinstance(v, (list, tuple)) else conv(v)
        out.append((gdt.name(enum).replace("DT_", "").lower().replace("half", "float16"), new))
    return out


def _value(v):
    return v.value if isinstance(v, (Var, ListOf)) else np.asarray(v)


def _same(v):
    return v if isinstance(v, (Var, ListOf)) else np.asarray(v)


def _varies(arg_type_attr, value, attr):
    """Whether an input takes the varied type: an arg typed by it, a variable or a list."""
    return arg_type_attr == attr or isinstance(value, (Var, ListOf))


def _label(inputs, attrs):
    """The dtype a case runs in: its `dtype` attr (random ops), else its first float input's,
    else its first input's."""
    if "dtype" in attrs and not isinstance(attrs["dtype"], (int, np.integer)):
        return tf.as_dtype(attrs["dtype"]).name
    arrays = [_value(a) for v in inputs.values() for a in (v if isinstance(v, (list, tuple)) else [v])]
    arrays = [a for a in arrays if a.dtype != object and a.size]
    floats = [a for a in arrays if a.dtype.kind == "f" or a.dtype in _NARROW]
    return gdt.name(gdt.from_numpy((floats or arrays)[0].dtype)) if arrays else "-"


_FLOAT_ONLY_VALUES = {"Pow"}    # negative integer exponents are errors, not values


_NARROW = (np.dtype(np.float16), np.dtype(tf.bfloat16.as_numpy_dtype))


def _widened(inputs):
    """float16/bfloat16 inputs as float32 (the CPU reference of narrow dtypes)."""
    def w(a):
        if isinstance(a, Var):
            return Var(w(a.value))
        return np.asarray(a).astype(np.float32) if np.asarray(a).dtype in _NARROW else a
    return {k: ([w(a) for a in v] if isinstance(v, (list, tuple)) else w(v)) for k, v in inputs.items()}


def _reference(op_type, inputs, attrs, dtype, grad_weights=None):
    """TF on the CPU; for a narrow dtype in float32, with float results rounded to it."""
    if dtype not in ("float16", "bfloat16") or op_type in NARROW_NATIVE:
        return _run(CPU, op_type, inputs, attrs, grad_weights)
    variables = any(isinstance(v, Var) for v in inputs.values())   # their dtype attr follows them
    wide_attrs = {k: (tf.float32 if variables and isinstance(v, tf.DType) and v in (tf.float16, tf.bfloat16)
                      else v) for k, v in attrs.items()}
    outs, grads = _run(CPU, op_type, _widened(inputs), wide_attrs, grad_weights)
    narrow = np.float16 if dtype == "float16" else tf.bfloat16.as_numpy_dtype
    r = lambda a: a.astype(narrow) if a.dtype == np.float32 else a
    try:     # the output dtypes (ResizeBilinear's is float32 whatever the input)
        out_dtypes = [n.dtype for n in _run(CPU, op_type, inputs, attrs)[0]]
    except Exception:                                                # noqa: BLE001
        out_dtypes = [r(o).dtype for o in outs]   # TF has no CPU kernel for the narrow dtype
    if grads is not None:    # a gradient takes its input's dtype (CropAndResize's boxes stay float32)
        grads = [None if g is None else _array(g).astype(d) for g, d in zip(grads, _float_input_dtypes(inputs))]
    return [o.astype(d) for o, d in zip(outs, out_dtypes)], grads


def _float_input_dtypes(inputs):
    """The dtypes of the float inputs, in the order _run watches them."""
    arrays = [np.asarray(a) for v in inputs.values() if not isinstance(v, (Var, ListOf))
              for a in (v if isinstance(v, (list, tuple)) else [v])]
    return [a.dtype for a in arrays if tf.as_dtype(a.dtype).is_floating]


def _tf_refuses_gradient(op_type, inputs, attrs, weights):
    """Whether TF itself defines no gradient for the op in a narrow dtype (its gradient function
    returns None or rejects the dtype), though it does in float32."""
    try:
        _, grads = _run(CPU, op_type, inputs, attrs, weights)
    except Exception as e:               # noqa: BLE001
        if "is not in the list of allowed values" in str(e):
            return True   # the gradient uses an op whose definition lacks the dtype (Digamma's: Polygamma)
        try:
            _run(CPU, op_type, inputs, attrs)
        except Exception:                # noqa: BLE001  (no narrow CPU kernel at all: no verdict)
            return False
        return True                      # the forward runs, its gradient does not
    return grads is None or all(g is None for g in grads)


def _run(device, op_type, inputs, attrs, grad_weights=None):
    with tf.device(device):
        variables = {k: tf.Variable(v.value) for k, v in inputs.items() if isinstance(v, Var)}
        lists = {k: tf.raw_ops.TensorListFromTensor(tensor=v.value, element_shape=v.value.shape[1:])
                 for k, v in inputs.items() if isinstance(v, ListOf)}
        tensors = {k: (variables[k].handle if k in variables else lists[k] if k in lists else
                       [tf.constant(a) for a in v] if isinstance(v, (list, tuple)) else tf.constant(v))
                   for k, v in inputs.items()}
        watched = [t for v in tensors.values() for t in (v if isinstance(v, list) else [v])
                   if t.dtype.is_floating or t.dtype.is_complex]
        with tf.GradientTape() as tape:
            tape.watch(watched)
            if device == CPU:     # TF's CPU kernels, in a form every CPU build supports
                out = op_cases.tf_cpu_op(op_type, tensors, attrs)
            else:
                out = getattr(tf.raw_ops, op_type)(**tensors, **attrs)
            outs = [o for o in (out if isinstance(out, (list, tuple)) else [out])
                    if o is not None and not isinstance(o, tf.Operation)]
            if any(o.dtype == tf.variant for o in outs):      # a list: compared as its elements
                element = attrs.get("element_dtype") or tensors["tensor"].dtype
                outs = [tf.raw_ops.TensorListStack(input_handle=o, element_shape=-1, element_dtype=element)
                        if o.dtype == tf.variant else o for o in outs]
            outs += [v.read_value() for v in variables.values()]   # the updated variables
            loss = None
            if grad_weights is not None:
                floats = [o for o in outs if o.dtype.is_floating or o.dtype.is_complex]
                # a complex output: the real part of its weighted sum (complex weights)
                loss = tf.add_n([tf.cast(tf.reduce_sum(tf.math.real(o * tf.constant(w, o.dtype))), tf.float32)
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
        if w.dtype.kind == "c":          # complex64: its real and imaginary parts, as float32
            g, w = np.stack([g.real, g.imag]), np.stack([w.real, w.imag])
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
               if w.dtype.kind != "c" else   # complex64: (real, imag) pairs
               np.random.default_rng(2).standard_normal(w.shape + (2,)).astype(np.float32).view(np.complex64)[..., 0]
               for w in want if w.dtype.kind in "fc" or w.dtype == tf.bfloat16.as_numpy_dtype]
    if not weights or dtype not in TOLERANCE:
        return r
    try:
        _, want_g = _reference(op_type, inputs, attrs, dtype, weights)
    except LookupError:                                              # TF registers no gradient
        return r
    except TypeError as e:     # TF's gradient function itself fails (QuantizeAndDequantizeV4Grad's)
        r.gradient = f"- (TF's gradient function fails: {str(e).splitlines()[0][:80]})"
        return r
    except Exception as e:                                           # noqa: BLE001
        r.gradient = "skipped: no TF reference: TF on CPU cannot compute it: " + _short(e)
        return r
    if want_g is None or all(g is None for g in want_g):
        return r
    if dtype in ("float16", "bfloat16") and _tf_refuses_gradient(op_type, inputs, attrs, weights):
        r.gradient = f"- (TF defines no {dtype} gradient)"
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
        if dtype in ("float16", "bfloat16") and "is not in the list of allowed values" in str(e):
            # TF's gradient uses an op whose definition has no such dtype, on any device
            r.gradient = f"- (TF defines no {dtype} gradient)"
    return r


def sweep(only=None):
    """Results for every (case, dtype) of the registered ops (or of the ops in `only`)."""
    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        results, known = [], set(npu_ops())
        for op_type, inputs, attrs in load_cases():
            if (only and op_type not in only) or op_type in EAGER_LESS or op_type not in known:
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
    every, plugin = npu_ops(), plugin_ops()
    lines = [
        "# NPU op coverage",
        "",
        "Generated by `python -m npu_device.tools.op_coverage` (do not edit): every TF op with an NPU",
        "kernel -- the graph-engine registry's and the plugin's own (variable updates, ops whose output",
        "shape depends on input values; marked `plugin`) -- run eagerly on the NPU with soft device",
        "placement off, against TensorFlow on the CPU",
        "(NCHW/NCDHW, dilated and unequal-stride depthwise convolutions and pooling in an equivalent",
        "form TF's plain Eigen CPU kernels compute: channels-last transposes, zero-dilated filters,",
        "explicit padding and subsampling; see `op_cases.tf_cpu_op`).",
        "Forward: outputs compared (float32 rtol 1e-4, float16 1e-2, bfloat16 4e-2; integers exactly);",
        "an op that updates variables is compared on the variables' values afterwards too.",
        "Gradient: d(sum(out * w))/d(inputs) computed on each device (`-`: no float input, or TF",
        "defines no gradient). Ops marked compile-only have no eager kernel call (Const, NoOp) or always",
        "fold (their NPU kernel is TF's own).",
        "",
        f"{len(every)} TF ops run on the NPU ({len(every) - len(plugin)} graph-engine ops, "
        f"{len(plugin)} plugin kernels); {sum(1 for o in every if o in by_op)} swept; "
        f"{sum(1 for r in results if r.failed)} failing runs; "
        f"{sum(1 for r in results if r.skipped)} skipped (no TF reference).",
        "",
        "Stateless random ops (Dropout, initializers) draw bit for bit what TF draws on the CPU",
        "(tests/test_ge_random.py); their uint64 key/counter tensors live on the NPU.",
        "",
        "| op | dtype | forward | gradient |",
        "|---|---|---|---|",
    ]
    for name in every:
        label = f"{name} (plugin)" if name in plugin else name
        if name not in by_op:
            lines.append(f"| {label} | - | compile-only | - |")
            continue
        for r in by_op[name]:
            lines.append(f"| {label} | {r.dtype} | {r.forward.replace('|', '/')} | {r.gradient.replace('|', '/')} |")
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
