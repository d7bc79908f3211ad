"""Property-based fuzzing of every registered op: NPU against TensorFlow on the CPU.

Hypothesis derives inputs from each op's example case (the coverage sweep's tables,
npu_device.tools.op_coverage.load_cases): every dtype the registry allows, data inputs resized
(a dimension made 0, 1, one smaller or one larger, everywhere it occurs, so inputs stay
consistent or become inconsistent together), edge values written in (NaN, ±inf, ±0, the largest
and smallest values, denormals; INT_MIN, INT_MAX, -1), and small changes to the constant inputs
(axes, shapes, paddings: -1, 0, one past the rank ...). Each input runs eagerly on the NPU (soft
placement off, CPU fallback off) and on the CPU in a crash-isolated worker. The property:

* nothing crashes or hangs;
* both sides succeed with results equal within the coverage sweep's tolerances (NaN where
  TF has NaN, the same infinities), or both raise; or the NPU reports the input as unsupported
  (UnimplementedError: with cpu_fallback, the default, it runs on the CPU).
"""
import numpy as np
from hypothesis import strategies as st

# No denormals: TF's CPU kernels flush them in Eigen's vector loops but not in their scalar
# remainders (std:: functions ignore DAZ), so TF disagrees with itself on them. The NPU flushes
# them like the vector loops (tests/test_hardening.py checks that against TF).
_FLOAT_EDGES = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 65504.0, 65520.0,
                3e9, -3e9, 0.5, -1.5)
_CONST_NUDGES = (-1, 1, 2, -2)
_MAX_ELEMENTS = 1 << 16          # resized inputs stay small: the point is edges, not size


def _items(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _is_float(a):
    """Floating point, complex included (its edge values go into the real part)."""
    return a.dtype.kind in "fc" or a.dtype.name == "bfloat16"


def _fresh(draw, shape, like):
    """Random values of `like`'s dtype and value range, in `shape`."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if like.dtype.kind == "c":
        return (rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)).astype(like.dtype)
    if _is_float(like):
        return rng.uniform(-2, 2, shape).astype(like.dtype)
    if like.dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    pool = like.reshape(-1) if like.size else np.zeros(1, like.dtype)
    return rng.choice(pool, size=shape).astype(like.dtype)


def _resize(draw, inputs, data_names):
    dims = sorted({d for n in data_names for a in _items(inputs[n]) for d in a.shape})
    if not dims:
        return inputs
    old = draw(st.sampled_from(dims))
    new = draw(st.sampled_from(sorted({0, 1, max(old - 1, 0), old + 1} - {old})))
    out = dict(inputs)
    for n in data_names:
        arrays = []
        for a in _items(inputs[n]):
            shape = tuple(new if d == old else d for d in a.shape)
            ok = shape != a.shape and int(np.prod(shape)) <= _MAX_ELEMENTS
            arrays.append(_fresh(draw, shape, a) if ok else a)
        out[n] = arrays if isinstance(inputs[n], (list, tuple)) else arrays[0]
    return out


# Contractions (convolutions, matrix products): how TF's CPU kernels propagate NaN and inf
# depends on the build (Eigen's padded patch products multiply padding zeros by the filter,
# oneDNN skips them) and on summation order, so non-finite values have no stable reference.
_CONTRACTIONS = ("Conv", "MatMul", "Einsum")
# FusedBatchNorm*: TF's CPU kernels are oneDNN's or Eigen's by build (TF_ENABLE_ONEDNN_OPTS), which
# order the float products differently: oneDNN's (dy * scale) * rsqrt(var) overflows to inf where
# Eigen's dy * (scale * rsqrt(var)) does not, and oneDNN's dy * (x - mean) overflows (inf - inf
# sums to NaN) where Eigen's dy * ((x - mean) * rsqrt(var)) does not. Same limits as contractions.
_BUILD_DEPENDENT = _CONTRACTIONS + ("FusedBatchNorm",)
# Where NaN, inf and overflow land (a zero pivot included) depends on the order of operations,
# and the NPU's is its own: CholeskyGrad is two triangular solves on the NPU, TF's blocked
# algorithm on the CPU. Finite nonzero edge values only.
_ORDER_DEPENDENT = ("CholeskyGrad",)
_FINITE_EDGES = tuple(v for v in _FLOAT_EDGES if np.isfinite(v) and abs(v) < 1e4)
# TF's CPU MaxPool3D kernels ignore NaN in the channels their vector loop covers and not in the
# scalar remainder ([2, nan, 1] pools to 2 in one channel and to 1 in the next): no NaN there.
# TF's CPU TopKV2 orders with `<` alone, which is no strict weak order with NaN (std::sort and
# its TopN heap then give path-dependent results): [1, nan, 2] gives [nan, 2] for k=2 but
# [2, 1, nan] for k=3, and [1, 2, nan] gives [1] for k=1.
_NAN_UNDEFINED = ("MaxPool3D", "TopKV2")
_NO_NAN_EDGES = tuple(v for v in _FLOAT_EDGES if not np.isnan(v))
# Inputs whose huge values make TF's CPU kernel loop forever (AdjustHue wraps the hue with
# `while (h >= 6) h -= 6`, endless past 2^27): only moderate edge values, or every such example
# costs the CPU worker's whole timeout.
_TF_HANGS = {("AdjustHue", "delta")}


def _edge_values(draw, a, edges_for_floats=_FLOAT_EDGES):
    if a.size == 0 or a.dtype == np.bool_:
        return a
    if _is_float(a):
        edges = np.array(edges_for_floats, np.float64)
    else:
        info = np.iinfo(a.dtype)
        edges = np.array([int(v) for v in (info.min, info.max, -1, 0, 1)
                          if info.min <= v <= info.max], a.dtype)
    a = a.copy()
    flat = a.reshape(-1)
    for _ in range(draw(st.integers(1, min(4, flat.size)))):
        with np.errstate(over="ignore", invalid="ignore"):
            flat[draw(st.integers(0, flat.size - 1))] = np.asarray(
                edges[draw(st.integers(0, len(edges) - 1))]).astype(a.dtype)
    return a


def _nudge_const(draw, a):
    """One element of an integer constant input (an axis, a size, a padding) moved a little,
    negated, or set to -1/0: validation paths, never a huge allocation."""
    if a.size == 0 or a.dtype.kind not in "iu":
        return a
    a = a.copy()
    flat = a.reshape(-1)
    i = draw(st.integers(0, flat.size - 1))
    kind = draw(st.sampled_from(("add", "negate", "minus_one", "zero")))
    v = int(flat[i])
    v = {"add": v + draw(st.sampled_from(_CONST_NUDGES)), "negate": -v - 1,
         "minus_one": -1, "zero": 0}[kind]
    info = np.iinfo(a.dtype)
    flat[i] = min(max(v, info.min), info.max, 64) if v > 0 else max(v, info.min)
    return a


@st.composite
def mutated(draw, case):
    """A variation of an op's example case: (op, dtype label, inputs, attrs)."""
    from graph_engine import ops
    from npu_device.tools import op_coverage
    op_type, inputs, attrs = case
    dtype, inputs = draw(st.sampled_from([(d, i) for d, i in op_coverage.variants(case)
                                          if (op_type, d) not in op_coverage.TF_CPU_WRONG]))
    inputs = {k: ([np.asarray(a) for a in v] if isinstance(v, (list, tuple)) else np.asarray(v))
              for k, v in inputs.items()}
    consts = set(ops.get(op_type).const_inputs)
    data = [n for n in inputs if n not in consts]
    if data and draw(st.booleans()):
        inputs = _resize(draw, inputs, data)
    for n in data:
        if draw(st.integers(0, 2)) == 0:
            edges = (tuple(v for v in _FINITE_EDGES if v) if op_type in _ORDER_DEPENDENT else
                     _FINITE_EDGES if any(p in op_type for p in _BUILD_DEPENDENT)
                     or (op_type, n) in _TF_HANGS else
                     _NO_NAN_EDGES if op_type.startswith(_NAN_UNDEFINED) else _FLOAT_EDGES)
            arrays = [_edge_values(draw, a, edges) for a in _items(inputs[n])]
            inputs[n] = arrays if isinstance(inputs[n], (list, tuple)) else arrays[0]
    for n in sorted(consts & set(inputs)):
        if draw(st.integers(0, 4)) == 0:
            arrays = [_nudge_const(draw, a) for a in _items(inputs[n])]
            inputs[n] = arrays if isinstance(inputs[n], (list, tuple)) else arrays[0]
    return op_type, dtype, inputs, attrs


# Inputs TF's CPU kernels do not validate: they read or write out of bounds instead (undefined
# results, sometimes heap corruption). Where TF "succeeds" on such input, the NPU's
# InvalidArgumentError is the right answer. op -> (predicate on the inputs, what TF misses).
_SHORT_COUNTER = (lambda ins: np.size(ins["counter"]) < 2,
                  "a Philox counter of fewer than 2 elements is read past its end")


def _crop_samples_nan(image_hw, ratio_form):
    """CropAndResize's gradients: TF does not check the boxes, and a NaN sampling position (from a
    non-finite box) passes its range check and indexes pixel floor(NaN), out of bounds."""
    def predicate(ins):
        from graph_engine.ops.image import nan_samples
        g = np.shape(ins["grads"])
        return nan_samples(ins["boxes"], *image_hw(ins), g[1], g[2], ratio_form)
    return predicate, ("a NaN sampling position (a non-finite box) indexes the image at "
                       "floor(NaN), out of bounds")


def _argmax_outside_image(ins):
    """MaxPoolGradWithArgmax: an argmax index outside its own image (include_batch_in_index off)."""
    argmax, batch = np.asarray(ins["argmax"]), max(np.shape(ins["input"])[0], 1)
    if argmax.size % batch:
        return False                       # a shape error, which TF reports too
    rows, per_image = argmax.reshape(batch, -1), np.size(ins["input"]) // batch
    return bool(np.any((rows < 0) | (rows >= per_image)))


_NONPOSITIVE_KSIZE = (lambda ins: np.any(np.asarray(ins["ksize"]) <= 0),
                      "ksize is not checked to be positive (a zero window returns zeros, a "
                      "negative one corrupts the heap)")
TF_UNCHECKED = {
    "MaxPoolGradWithArgmax": (_argmax_outside_image, "an argmax index is checked against the "
                              "images of its thread's shard, not its own image's (outside the "
                              "shard: a CHECK crash)"),
    "MaxPoolGradV2": _NONPOSITIVE_KSIZE,
    "MaxPoolGradGradV2": _NONPOSITIVE_KSIZE,
    "CropAndResizeGradImage": _crop_samples_nan(lambda ins: [int(v) for v in ins["image_size"][1:3]], False),
    "CropAndResizeGradBoxes": _crop_samples_nan(lambda ins: np.shape(ins["image"])[1:3], True),
    "AvgPoolGrad": (lambda ins: True, "grad's shape is not checked against orig_input_shape's "
                    "pooled shape (a smaller batch in orig_input_shape corrupts the heap)"),
    "AvgPool3DGrad": (lambda ins: True, "grad's shape is not checked against "
                      "orig_input_shape's pooled shape"),
    "RaggedBincount": (lambda ins: 0 < np.size(ins["weights"]) < np.size(ins["values"]),
                       "weights are read at each value's position unchecked (bincount_op.cc): "
                       "weights shorter than values are read past their end"),
    "StatelessRandomUniformV2": _SHORT_COUNTER,
    "StatelessRandomNormalV2": _SHORT_COUNTER,
    "StatelessTruncatedNormalV2": _SHORT_COUNTER,
    "StatelessRandomUniformIntV2": _SHORT_COUNTER,
    "StatelessRandomUniformFullIntV2": _SHORT_COUNTER,
}

# Inputs for which TF's CPU kernel returns uninitialized memory; the NPU must return the
# mathematically right answer instead: zeros (a gradient summed over an empty batch), or, with a
# third element, TF's outputs with the unwritten part replaced by what the NPU writes there.
_EMPTY_BATCH = lambda ins: np.size(ins["input"]) == 0 or np.size(ins["out_backprop"]) == 0  # noqa: E731
_BN_EMPTY = (lambda ins: np.size(ins["x"]) == 0,
             "an empty x's reserve spaces 1 and 2 are never written (fused_batch_norm_op.cc "
             "returns once it has set the batch mean and variance to NaN); the NPU gives NaN "
             "there too", lambda outs: outs[:3] + [np.full_like(o, np.nan) for o in outs[3:5]] + outs[5:])
_NO_SEGMENT_GRAD = (lambda ins: np.size(ins["indices"]) == 0,
                    "with no indices the output is allocated and returned unwritten "
                    "(SparseSegmentGradOpBase: `if (M == 0 || N == 0) return;`)")
# The real FFTs: TF checks each transformed input dimension against fft_length only when it is
# non-empty, and returns an empty input's output, shaped by fft_length, without writing it
# (fft_ops.cc: `if (input_shape.num_elements() == 0) return;` after allocating it). The
# transform of an empty (zero-padded) signal is zeros, which the NPU gives.
_FFT_EMPTY = (lambda ins: np.size(ins["input"]) == 0,
              "an empty input's output (non-empty where fft_length asks for it) is never written")
TF_UNINITIALIZED = {
    "RFFT": _FFT_EMPTY,
    "IRFFT": _FFT_EMPTY,
    "RFFT2D": _FFT_EMPTY,
    "IRFFT2D": _FFT_EMPTY,
    "RFFT3D": _FFT_EMPTY,
    "IRFFT3D": _FFT_EMPTY,
    "FusedBatchNorm": _BN_EMPTY,
    "SparseSegmentSumGrad": _NO_SEGMENT_GRAD,
    "SparseSegmentMeanGrad": _NO_SEGMENT_GRAD,
    "SparseSegmentSqrtNGrad": _NO_SEGMENT_GRAD,
    "FusedBatchNormV2": _BN_EMPTY,
    "FusedBatchNormV3": _BN_EMPTY,
    "DepthwiseConv2dNativeBackpropFilter": (_EMPTY_BATCH, "the filter gradient of an empty batch "
                                            "is never written"),
    "Conv2DBackpropFilter": (_EMPTY_BATCH, "the filter gradient of images with no rows or columns "
                             "is never written (Eigen's kernel; an empty batch gives zeros)"),
    "Cholesky": (lambda ins: True, "a matrix whose decomposition fails (not positive definite) "
                 "gets NaN in its lower triangle and its strict upper triangle is never written "
                 "(cholesky_op.cc); every other L has zeros there",
                 lambda outs: [np.tril(outs[0])]),
}

# The workers' environment: IEEE float16 overflow (the NPU's default saturation mode stores
# ±65504 where TF stores ±inf, by design: docs/precision.md), and no CPU fallback.
# No disk compile cache either: every input is compiled, as the fuzzer means to test. TF's own
# (Eigen) CPU kernels as the reference, as in the test suite (docs/testing.md): oneDNN's differ
# on edge inputs (empty convolutions give other shapes, errors or CHECK crashes).
WORKER_ENV = {"NPU_OVERFLOW_MODE": "inf_nan", "NPU_CPU_FALLBACK": "0",
              "NPU_OP_COMPILER_CACHE_MODE": "disable", "TF_ENABLE_ONEDNN_OPTS": "0"}


class Workers:
    """One crash-isolated worker per device: TF's own CPU kernels can crash on inconsistent
    inputs (AvgPoolGrad with a batch unlike orig_input_shape's corrupts the heap), which must
    neither take the NPU side down nor count against it."""

    def __init__(self):
        from tools.fuzz.worker import Worker
        self.cpu = Worker("tools.fuzz.ops:run_on", env=WORKER_ENV)
        self.npu = Worker("tools.fuzz.ops:run_on", env=WORKER_ENV)

    def _call(self, device, case, timeout):
        from tools.fuzz.worker import Crash
        try:
            return (self.cpu if device == "CPU" else self.npu).call((device, case), timeout)
        except Crash as e:
            return e

    def verdict(self, case, timeout):
        return judge(case, self._call("CPU", case, timeout), self._call("NPU", case, timeout))

    def close(self):
        self.cpu.close()
        self.npu.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def seed_cases(only=None):
    """The example case of every op the fuzzer covers (all registered ops with an eager kernel)."""
    from graph_engine import ops
    from npu_device.tools import op_coverage
    return [c for c in op_coverage.load_cases()
            if c[0] not in op_coverage.EAGER_LESS and ops.get(c[0]) is not None
            and (only is None or c[0] in only)
            and any((c[0], d) not in op_coverage.TF_CPU_WRONG for d, _ in op_coverage.variants(c))]


# --- in the workers -----------------------------------------------------------------------

def run_on(payload):
    """(device, case) -> ("ok", outputs) or ("error", TF error class name, message). Runs in a
    worker: the NPU side eagerly with soft placement off; the CPU side as the coverage sweep's
    reference computes it (TF's kernels, in forms plain Eigen supports)."""
    import tensorflow as tf
    from npu_device.tools import op_coverage
    device, (op_type, dtype, inputs, attrs) = payload
    tf.config.set_soft_device_placement(False)
    try:
        if device == "CPU":
            outs, _ = op_coverage._reference(op_type, inputs, attrs, dtype)
        else:
            outs, _ = op_coverage._run(op_coverage.NPU, op_type, inputs, attrs)
        return "ok", outs
    except Exception as e:                                          # noqa: BLE001
        return "error", type(e).__name__, _line(e)


def judge(case, cpu, npu):
    """"ok" or what breaks the property, from each side's run_on answer (or a Crash)."""
    from npu_device.tools import op_coverage
    from tools.fuzz.worker import Crash
    if isinstance(npu, Crash):
        return f"the NPU side crashed: {npu}"
    if isinstance(cpu, Crash):
        return "ok"              # TF's own CPU kernel crashes on it: no reference, the NPU survived
    if case[0] in TF_UNINITIALIZED and TF_UNINITIALIZED[case[0]][0](case[2]) and cpu[0] == "ok":
        defined = TF_UNINITIALIZED[case[0]][2:] or [lambda outs: [np.zeros_like(w) for w in outs]]
        cpu = ("ok", defined[0](cpu[1]))
    if cpu[0] == "error":
        if npu[0] == "ok":
            return f"TF on CPU raises {cpu[1]} ({cpu[2]}) but the NPU succeeds"
        return "ok"
    if npu[0] == "error":
        if npu[1] == "UnimplementedError":
            return "ok"          # unsupported on the NPU: with cpu_fallback it runs on the CPU
        if npu[1] == "InvalidArgumentError" and case[0] in TF_UNCHECKED \
                and TF_UNCHECKED[case[0]][0](case[2]):
            return "ok"
        return f"the NPU raises {npu[1]} ({npu[2]}); TF on CPU succeeds"
    return op_coverage._compare(npu[1], cpu[1], case[1])


def _line(e):
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else repr(e)


def describe(case):
    """A reproduction of a case: the tf.raw_ops call with its inputs."""
    op_type, dtype, inputs, attrs = case
    np.set_printoptions(threshold=64, edgeitems=4)
    args = ", ".join(f"{k}=np.{np.asarray(v).dtype}{np.asarray(v).tolist()!r}"[:400]
                     if not isinstance(v, list) else f"{k}=[{len(v)} arrays]"
                     for k, v in inputs.items())
    shapes = {k: [list(np.shape(a)) for a in _items(v)] for k, v in inputs.items()}
    return f"tf.raw_ops.{op_type}({args}, **{attrs!r})  # {dtype}, shapes {shapes}"


def fuzz(workers, case, examples, seed=None, shrink=False, timeout=120):
    """Runs `examples` variations of one example case in `workers`; raises AssertionError with
    the verdict and a reproduction for the first one that breaks the property. seed=None:
    derandomized (the same inputs every run, as CI needs)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])

    @settings(max_examples=examples, derandomize=seed is None, deadline=None, database=None,
              phases=phases, suppress_health_check=list(HealthCheck), print_blob=False)
    @given(mutated(case))
    def prop(variant):
        verdict = workers.verdict(variant, timeout)
        assert verdict == "ok", f"{verdict}\n  {describe(variant)}"

    (prop if seed is None else seeded(seed)(prop))()
