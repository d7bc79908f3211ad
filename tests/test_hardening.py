"""Issue 13, parts 1 and 4: no input crashes the process, and edge cases follow TF exactly.

* Crash reproductions, each in its own interpreter (a SIGFPE/SIGSEGV/OOM kill there fails the
  test instead of killing the suite): INT_MIN / -1 in the integer division kernels, zero-size
  dimensions (ArgMax, reductions, resize), a compiled model whose padded scratch value is too
  small for its format, and tf.range(2**31) with a 1 GiB device (no host materialization; TF's
  ResourceExhaustedError naming the sizes, at compile time and for a run-time device OOM).
* Edge semantics against TF on the CPU: NaN/inf/-0 through activations, their gradients,
  Maximum/Minimum (eager kernels, the fused elementwise program, the contraction epilogue and
  constant folding, i.e. every copy of the formulas); float -> int casts of NaN/inf/out-of-range
  values; ArgMax/ArgMin with NaN; reductions over empty axes; integer division edge cases;
  pooling gradients and windows with empty results.

float16 values are compared in the IEEE overflow mode (inf_nan): in the default saturation mode
the NPU stores +-inf as +-65504 by design (docs/precision.md), TF's CPU keeps them.
"""
import npu_device  # noqa: F401,I001  (loads the NPU plugin before TensorFlow creates devices)

import math

import numpy as np
import pytest
import tensorflow as tf

from graph_engine import ops
from graph_engine.ops import dtypes as gdt

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
NAN, INF = float("nan"), float("inf")
FLOATS = [tf.float32, tf.float16, tf.bfloat16]
SPECIAL = [NAN, -NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 7.0, -3.5]


@pytest.fixture(autouse=True, scope="module")
def ieee_float16():
    from npu_device import precision
    before = precision.overflow_mode()
    precision.set_overflow_mode("inf_nan")
    yield
    precision.set_overflow_mode(before)
    precision.clear_float_status()


def _on(device, fn, *args):
    """fn(*args) on `device` as numpy, or the exception TF raised."""
    try:
        with tf.device(device):
            out = fn(*[tf.identity(a) if isinstance(a, tf.Tensor) else a for a in args])
        return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else np.asarray(out)
    except tf.errors.OpError as e:
        return e


def _same(got, want, what=""):
    """Bit-for-bit agreement as TF's result: values, NaN positions, dtype, shape and the sign of
    zeros; or the same TF error class."""
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"{what}: TF raises {type(want).__name__}, NPU gave {got!r}"
        assert type(got) is type(want), f"{what}: TF raises {type(want).__name__}, NPU {type(got).__name__}: {got}"
        return
    assert not isinstance(got, Exception), f"{what}: NPU raised {type(got).__name__}: {got}"
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, what)
        return
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN positions")
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g[ok], w[ok], err_msg=what)
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]), err_msg=f"{what}: sign of zero")


def _compare(fn, *args, what=""):
    _same(_on(NPU, fn, *args), _on(CPU, fn, *args), what)


# ---- crash reproductions, each in a fresh interpreter ---------------------------------------

PRELUDE = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import npu_device
import numpy as np
import tensorflow as tf
NPU, CPU = "/device:NPU:0", "/device:CPU:0"
def both(fn):
    out = []
    for dev in (NPU, CPU):
        try:
            with tf.device(dev):
                out.append(np.asarray(fn()))
        except tf.errors.OpError as e:
            out.append(type(e).__name__)
    return out
def check(name, fn):
    npu, cpu = both(fn)
    same = (type(npu) is type(cpu) and (npu == cpu if isinstance(npu, str)
            else npu.dtype == cpu.dtype and npu.shape == cpu.shape and np.array_equal(npu, cpu, equal_nan=npu.dtype.kind == "f")))
    print(name, "same" if same else f"DIFFERENT npu={npu!r} cpu={cpu!r}", flush=True)
"""


def _isolated(python_subprocess, body, env=None, timeout=120):
    r = python_subprocess(PRELUDE + body, env={"NPU_OVERFLOW_MODE": "inf_nan", **(env or {})},
                          timeout=timeout)
    assert r.returncode == 0, f"exit status {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    lines = [l for l in r.stdout.splitlines() if l.strip()]
    bad = [l for l in lines if " same" not in l and not l.startswith("info ")]
    assert lines and not bad, r.stdout
    return lines


def test_integer_division_int_min_by_minus_one_and_by_zero(python_subprocess):
    """tf.truncatediv(INT64_MIN, -1) was a SIGFPE; every integer division kernel wraps like TF,
    and x / 0 raises TF's class for that op (InvalidArgumentError; InternalError for
    TruncateDiv/TruncateMod)."""
    _isolated(python_subprocess, """
check("repro", lambda: tf.truncatediv(tf.constant([-2**63], tf.int64), tf.constant([-1], tf.int64)))
for dt in (tf.int32, tf.int64):
    lo = dt.min
    for op in ("Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"):
        f = getattr(tf.raw_ops, op)
        x, y = [lo, lo, 7, -7, 7, -7, lo], [-1, 1, 2, 2, -2, -2, lo]
        check(f"{op} {dt.name}", lambda: f(x=tf.constant(x, dt), y=tf.constant(y, dt)))
        check(f"{op} {dt.name} by zero", lambda: f(x=tf.constant([5, 6], dt), y=tf.constant([1, 0], dt)))
""")


def test_zero_size_dimensions_reduce_and_argmax(python_subprocess):
    """tf.argmax(tf.zeros([3, 0]), 0) was a SIGFPE (zero width in reduce.cc): empty results,
    identities over empty axes, and ArgMax over an empty axis is TF's InvalidArgumentError."""
    _isolated(python_subprocess, """
check("repro", lambda: tf.argmax(tf.zeros([3, 0]), 0))
for dt in (tf.float32, tf.int32, tf.int64, tf.float16):
    for shape in ([3, 0], [0, 4], [2, 0, 3]):
        for axis in range(len(shape)):
            x = lambda: tf.zeros(shape, dt)
            for name, f in (("argmax", tf.math.argmax), ("argmin", tf.math.argmin), ("sum", tf.reduce_sum),
                            ("prod", tf.reduce_prod), ("max", tf.reduce_max), ("min", tf.reduce_min),
                            ("mean", tf.reduce_mean)):
                check(f"{name} {dt.name} {shape} axis {axis}", lambda: f(x(), axis))
check("sum all", lambda: tf.reduce_sum(tf.zeros([2, 0, 3]), [0, 2]))
check("bias_add_grad", lambda: tf.raw_ops.BiasAddGrad(out_backprop=tf.zeros([2, 3, 0])))
check("bias_add_grad batch", lambda: tf.raw_ops.BiasAddGrad(out_backprop=tf.zeros([0, 3, 4])))
check("any", lambda: tf.reduce_any(tf.zeros([3, 0], tf.bool), 1))
check("all", lambda: tf.reduce_all(tf.zeros([0, 3], tf.bool), 0))
""")


def test_resize_of_an_empty_image(python_subprocess):
    """tf.image.resize(tf.zeros([1, 0, 0, 2]), [4, 4]) was a SIGSEGV (MakeTaps index -1)."""
    _isolated(python_subprocess, """
check("repro", lambda: tf.image.resize(tf.zeros([1, 0, 0, 2]), [4, 4]))
for shape in ([1, 0, 3, 2], [1, 3, 0, 2], [0, 3, 3, 2], [1, 3, 3, 0]):
    check(f"resize {shape}", lambda: tf.raw_ops.ResizeBilinear(images=tf.zeros(shape), size=[4, 5]))
g = tf.ones([1, 4, 4, 2])
for shape in ([1, 0, 3, 2], [1, 3, 0, 2]):
    check(f"grad {shape}", lambda: tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=tf.zeros(shape)))
check("grad empty grads", lambda: tf.raw_ops.ResizeBilinearGrad(grads=tf.zeros([1, 0, 4, 2]),
                                                                 original_image=tf.zeros([1, 3, 3, 2])))
""")


MODEL_PRELUDE = """
import sys
import numpy as np
sys.path.insert(0, {repo!r})
from tests.test_kernels_harness import C, GraphBuilder, dt_enum
from graph_engine.compiler import model_format as mf
from graph_engine.ops import layout

def transdata_model(scratch_nbytes=None, fmt=mf.Format.NC1HWC0, shape=(2, 3, 4, 5)):
    g = GraphBuilder("padded")
    x = g.input(np.float32, shape)
    storage = layout.storage_shape(fmt, shape, 1)
    need = int(np.prod(storage)) * 4
    nbytes = need if scratch_nbytes is None else scratch_nbytes
    g.arena += -g.arena % 64
    g.values.append(mf.Value(1, shape, nbytes, mf.Kind.ARENA, g.arena, fmt))
    packed = len(g.values) - 1
    g.arena += nbytes
    y = g.output(np.float32, shape)
    g.kernel("TransData", [x], [packed], T=1, src_format=0, dst_format=int(fmt))
    g.kernel("TransData", [packed], [y], T=1, src_format=int(fmt), dst_format=0)
    return g

def load(g, what):
    try:
        m = g.load()
    except ValueError as e:
        print("refused", what, "|", e, flush=True)
        return None
    print("loaded", what, flush=True)
    return m
"""


def test_models_with_out_of_bounds_storage_are_refused_at_load(python_subprocess, request):
    """A compiled model whose NC1HWC0 scratch value had only its logical size passed Validate and
    its first run wrote past the arena (SIGSEGV in CannSession / npu-model-server, which load
    through this same _C.load_model). Every value's storage for its format, arena and constant
    ranges are checked at load; a loaded model runs without touching memory it does not own."""
    repo = str(request.config.rootpath)
    code = MODEL_PRELUDE.format(repo=repo) + """
x = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
m = load(transdata_model(), "exact NC1HWC0 storage")
assert m is not None and np.array_equal(m.run([x])[0], x)
assert load(transdata_model(scratch_nbytes=120 * 4), "NC1HWC0 with logical bytes") is None
fz = (3, 3, 5, 20)
w = np.arange(np.prod(fz), dtype=np.float32).reshape(fz)
m = load(transdata_model(fmt=mf.Format.FRACTAL_Z, shape=fz), "exact FRACTAL_Z storage")
assert m is not None and np.array_equal(m.run([w])[0], w)
assert load(transdata_model(scratch_nbytes=w.nbytes, fmt=mf.Format.FRACTAL_Z, shape=fz),
            "FRACTAL_Z with logical bytes") is None
m = load(transdata_model(fmt=mf.Format.FILTER_KN, shape=fz), "exact FILTER_KN storage")
assert m is not None and np.array_equal(m.run([w])[0], w)
assert load(transdata_model(scratch_nbytes=w.nbytes, fmt=mf.Format.FILTER_KN, shape=fz),
            "FILTER_KN with logical bytes") is None
g = transdata_model()
g.arena -= 64                                     # the scratch value now ends past the arena
assert load(g, "value past the arena") is None
g = GraphBuilder("consts")
c = g.const(np.ones((4,), np.float32))
g.values[c].where = 32                            # 16 bytes at 32 in a 16-byte blob
y = g.output(np.float32, (4,))
g.kernel("Neg", [c], [y])
assert load(g, "constant past the blob") is None
g = GraphBuilder("nz")
x_ = g.input(np.float16, (5, 7))
g.values.append(mf.Value(dt_enum(np.float16), (5, 7), 70, mf.Kind.ARENA, 0, mf.Format.FRACTAL_NZ))
g.arena = 128
y = g.output(np.float16, (5, 7))
g.kernel("Neg", [x_], [len(g.values) - 1])
assert load(g, "FRACTAL_NZ with logical bytes") is None
# kernels given zero-size dimensions directly (the compiler folds these away)
for kernel, shape, out_shape, attrs in [
        ("ArgMax", (3, 0), (0,), dict(dimension=[0], output_type=9)),
        ("Sum", (3, 0), (3,), dict(reduction_indices=[1], keep_dims=False)),
        ("Max", (3, 0), (3,), dict(reduction_indices=[1], keep_dims=False)),
        ("Sum", (3, 0), (0,), dict(reduction_indices=[0], keep_dims=False)),
        ("BiasAddGrad", (2, 3, 0), (0,), {}),
        ("BiasAddGrad", (0, 3, 4), (4,), {}),
        ("ResizeBilinear", (1, 0, 0, 2), (1, 4, 4, 2), dict(size=[4, 4])),
        ("Relu", (0, 4), (0, 4), {})]:
    g = GraphBuilder("zero")
    xi = g.input(np.float32, shape)
    y = g.output(np.int64 if kernel == "ArgMax" else np.float32, out_shape)
    g.kernel(kernel, [xi], [y], **attrs)
    m = load(g, f"{kernel} {shape}")
    if m is not None:
        print("info", kernel, m.run([np.zeros(shape, np.float32)])[0].tolist(), flush=True)
print("done", flush=True)
"""
    r = python_subprocess(code, timeout=120)
    assert r.returncode == 0, f"exit status {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = r.stdout
    assert "done" in out, out
    for refused in ("NC1HWC0 with logical bytes", "FRACTAL_Z with logical bytes",
                    "FILTER_KN with logical bytes", "value past the arena",
                    "constant past the blob", "FRACTAL_NZ with logical bytes"):
        line = next(l for l in out.splitlines() if refused in l)
        assert line.startswith("refused") and "corrupt" in line, line
    assert "needs 1536 bytes of storage but has nbytes 480" in out, out
    assert "info Sum [0.0, 0.0, 0.0]" in out and "info Max [-inf, -inf, -inf]" in out, out
    assert "info BiasAddGrad [0.0, 0.0, 0.0, 0.0]" in out, out
    assert "refused ResizeBilinear (1, 0, 0, 2) | " in out and "non-zero size" in out, out


def test_device_memory_the_host_cannot_back_is_refused_and_bincount_needs_no_scratch(
        python_subprocess):
    """The simulated device's memory is host RAM and Linux grants any allocation: a block
    within hbm_size but beyond the host's MemAvailable was an OOM kill once touched; it is
    TF's ResourceExhaustedError now, before anything is allocated. Bincount counted into a
    scratch of twice its output (tf.math.bincount(x, minlength=2**31 - 1): 26 GB, killed);
    large ones count into the output."""
    _isolated(python_subprocess, """
import resource
available = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo")
                 if l.startswith("MemAvailable:"))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    with tf.device(NPU):
        tf.fill([available // 4 + 2**28], 1.0)
    print("fill DIFFERENT: no error")
except tf.errors.ResourceExhaustedError as e:
    print("fill same")
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print("rss same" if grew < 300 * 1024 else f"rss DIFFERENT grew {grew} KiB")
x = np.array([3, 0, 9_000_001, 3, 12_000_000], np.int32)
for weights in (None, np.float32([0.5, 1.0, 2.0, 0.25, 4.0])):
    check(f"bincount weights={weights is not None}",
          lambda: tf.math.bincount(x, weights=weights, minlength=17_000_000))   # > 64 MB
""", env={"NPU_HBM_SIZE": "1T"}, timeout=240)


def test_range_bigger_than_the_device_is_refused_without_materializing(python_subprocess):
    """Eager tf.range(2**31) with a 1 GiB device made the compiler build the range in numpy
    (23 GB RSS, OOM killer). The length is computed, not the values; a value bigger than the
    device is TF's ResourceExhaustedError naming the sizes, and so is a run whose working
    memory does not fit at run time."""
    lines = _isolated(python_subprocess, """
import resource
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    with tf.device(NPU):
        tf.range(2**31)
    print("DIFFERENT: no error")
except tf.errors.ResourceExhaustedError as e:
    print("range same" if "17179869184 bytes" in str(e) and "1073741824" in str(e) else f"range DIFFERENT {e}")
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print("rss same" if grew < 300 * 1024 else f"rss DIFFERENT grew {grew} KiB")
ranges = [lambda: tf.range(1, 400_000, 3, dtype=tf.int64),    # big: the runtime kernel
          lambda: tf.range(0.25, 20000.0, 0.037),              # big: the runtime kernel
          lambda: tf.range(0.25, 90.0, 0.037),                 # small: folded
          lambda: tf.range(10, -7, -3)]
for i, fn in enumerate(ranges):
    check(f"range {i}", fn)
with tf.device(NPU):
    x = tf.ones([75_000_000])                       # 300 MB
    filler = tf.ones([60_000_000])                  # 240 MB
    @tf.function
    def f(x):                                       # a 600 MB concatenation in the arena
        return tf.reduce_sum(tf.concat([x, x * 2.0], 0))
    try:
        f(x)
        print("arena DIFFERENT: no error")
    except tf.errors.ResourceExhaustedError as e:
        print("arena same" if "arena" in str(e) and "900000000" in str(e) else f"arena DIFFERENT {e}")
    del filler
    @tf.function
    def g(x):                                       # 600 MB result + 1.2 GB working memory
        return tf.concat([x, x * 2.0], 0), tf.reduce_sum(tf.concat([x * 3.0, x], 0))
    try:
        g(x)
        print("plan DIFFERENT: no error")
    except tf.errors.ResourceExhaustedError as e:
        print("plan same" if "needs 1800000004 bytes of device memory" in str(e) else f"plan DIFFERENT {e}")
""", env={"NPU_HBM_SIZE": "1G"}, timeout=240)
    assert len(lines) == 8, lines


# ---- edge semantics against TF on the CPU (in this process) --------------------------------

ACTIVATIONS = {
    "relu": tf.nn.relu, "relu6": tf.nn.relu6, "elu": tf.nn.elu, "selu": tf.nn.selu,
    "leaky_relu": lambda x: tf.nn.leaky_relu(x, 0.2), "softplus": tf.nn.softplus,
    "softsign": tf.nn.softsign, "sigmoid": tf.sigmoid, "tanh": tf.tanh,
    "clip": lambda x: tf.clip_by_value(x, tf.constant(-0.5, x.dtype), tf.constant(0.5, x.dtype)),
    "maximum": lambda x: tf.maximum(x, tf.reverse(x, [0])),
    "minimum": lambda x: tf.minimum(x, tf.reverse(x, [0])),
    "maximum0": lambda x: tf.maximum(x, tf.zeros_like(x)),
    "minimum0": lambda x: tf.minimum(tf.zeros_like(x), x),
}
# Transcendental activations: the NPU's vectorized math may differ from TF's by an ULP, so
# their finite values are compared to 2 ULP; NaN, infinities and signs exactly.
APPROX = {"elu", "selu", "softplus", "sigmoid", "tanh", "softsign"}


def _special(dtype):
    return tf.constant(SPECIAL, dtype)


def _reference(fn, x, dtype):
    """TF on the CPU; for float16/bfloat16 (NPU storage types, computed in float32 and rounded
    once) TF in float32 on the same inputs, rounded to the dtype."""
    if dtype not in (tf.float16, tf.bfloat16):
        return _on(CPU, fn, x)
    want = _on(CPU, fn, tf.cast(x, tf.float32))
    return want if isinstance(want, Exception) else want.astype(dtype.as_numpy_dtype)


def _same_or_close(got, want, name, what):
    if name not in APPROX:
        return _same(got, want, what)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=what)
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(np.isinf(g[ok]), np.isinf(w[ok]), err_msg=what)
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]), err_msg=f"{what}: signs")
    ulp = {np.dtype(np.float32): 2 ** -23}.get(got.dtype, 2 ** -7 if got.dtype.name == "bfloat16" else 2 ** -10)
    np.testing.assert_allclose(g[ok], w[ok], rtol=2 * ulp, atol=1e-30, err_msg=what)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_nan_inf_and_signed_zero_like_tf(name, dtype):
    """NaN stays NaN (relu/relu6 gave 0), infinities saturate as TF's, -0 as TF's vectorized
    path (relu(-0) = +0; Maximum/Minimum of equal values return the second)."""
    fn = ACTIVATIONS[name]
    x = _special(dtype)
    _same_or_close(_on(NPU, fn, x), _reference(fn, x, dtype), name, f"{name} eager {dtype.name}")


GRADS = {
    "ReluGrad": lambda g, f: tf.raw_ops.ReluGrad(gradients=g, features=f),
    "Relu6Grad": lambda g, f: tf.raw_ops.Relu6Grad(gradients=g, features=f),
    "EluGrad": lambda g, f: tf.raw_ops.EluGrad(gradients=g, outputs=f),
    "SeluGrad": lambda g, f: tf.raw_ops.SeluGrad(gradients=g, outputs=f),
    "LeakyReluGrad": lambda g, f: tf.raw_ops.LeakyReluGrad(gradients=g, features=f, alpha=0.2),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_activation_gradients_with_nan_inf_and_zero_like_tf(name):
    fn = GRADS[name]
    n = len(SPECIAL)
    g = tf.constant([v for v in SPECIAL for _ in range(n)], tf.float32)     # every pairing
    f = tf.constant(SPECIAL * n, tf.float32)
    _same(_on(NPU, fn, g, f), _on(CPU, fn, g, f), name)


def test_fused_programs_epilogues_and_folding_handle_nan_like_tf():
    """The same formulas exist in the fused elementwise program (NpuElementwise), the
    contraction epilogue and the numpy references that constant folding runs: all agree."""
    x = tf.constant(SPECIAL, tf.float32)

    @tf.function
    def chain(x):              # several elementwise ops: one NpuElementwise program
        a = tf.nn.relu(x) + tf.nn.relu6(x * 1.0)
        b = tf.maximum(x, -x) - tf.minimum(x, tf.zeros_like(x))
        return a, b, tf.raw_ops.ReluGrad(gradients=x * 2.0, features=x - 1.0)

    _same(_on(NPU, chain, x), _on(CPU, chain, x), "fused program")

    w = tf.constant(np.eye(len(SPECIAL), dtype=np.float32))

    @tf.function
    def dense(x):              # MatMul + BiasAdd + Relu: the fused contraction's epilogue
        y = tf.matmul(tf.reshape(x, [1, -1]), w)
        return tf.nn.relu(tf.nn.bias_add(y, tf.zeros([len(SPECIAL)])))

    got, want = _on(NPU, dense, x), _on(CPU, dense, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))   # NaN reaches every column

    @tf.function
    def folded():              # constants only: folded at compile time by the numpy references
        c = tf.constant(SPECIAL, tf.float32)
        return (tf.nn.relu(c), tf.nn.relu6(c), tf.maximum(c, tf.reverse(c, [0])),
                tf.minimum(c, tf.reverse(c, [0])), tf.cast(c * 1e10, tf.int32),
                tf.raw_ops.EluGrad(gradients=c, outputs=tf.reverse(c, [0])))

    _same(_on(NPU, folded), _on(CPU, folded), "folded")


CAST_VALUES = [NAN, INF, -INF, 1e10, -1e10, 3e9, -3e9, 5e9, 1e19, -1e19, 2.7, -2.7, -0.5,
               2147483520.0, -2147483648.0, 70000.0, 300.0, -300.0]


@pytest.mark.parametrize("src", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("dst", [tf.int32, tf.int64], ids=lambda d: d.name)
def test_float_to_int_casts_match_tf_exactly(src, dst):
    """NaN, +-inf and out-of-range values: TF on x86 gives INT32_MIN / INT64_MIN."""
    x = tf.cast(tf.constant(CAST_VALUES * 3, tf.float32), src)   # several SIMD positions
    _same(_on(NPU, lambda v: tf.cast(v, dst), x), _on(CPU, lambda v: tf.cast(v, dst), x),
          f"{src.name}->{dst.name}")


def test_float_to_int_cast_reference_matches_tf_for_narrow_integers():
    """The numpy reference (constant folding, the reference executor) and the runtime's store
    conversion follow TF's x86 scalar path for int8/int16/uint8 too: through int32, low bits
    kept."""
    x = np.array(CAST_VALUES, np.float32)
    for dst in (tf.int8, tf.int16, tf.uint8, tf.int32, tf.int64):
        want = _on(CPU, lambda v: tf.cast(v, dst), tf.constant(x))
        got = ops.evaluate(ops.get("Cast"), [x], {"SrcT": gdt.DT_FLOAT, "DstT": dst.as_datatype_enum},
                           [dst.as_datatype_enum])[0]
        _same(got, want, dst.name)


def test_runtime_cast_kernel_matches_tf_for_every_integer_width():
    """The C++ Cast kernel (and every kernel's store to an integer dtype) converts as TF does."""
    from tests.test_kernels_harness import run1
    x = np.array(CAST_VALUES, np.float32)
    for dst in (tf.int8, tf.int16, tf.uint8, tf.int32, tf.int64):
        want = _on(CPU, lambda v: tf.cast(v, dst), tf.constant(x))
        got = run1("Cast", [x], dst.as_numpy_dtype, x.shape, SrcT=gdt.DT_FLOAT, DstT=dst.as_datatype_enum)
        _same(got, want, f"Cast kernel float32->{dst.name}")


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16, tf.int32], ids=lambda d: d.name)
def test_argmax_argmin_with_nan_and_infinities_like_tf(dtype):
    rows = [[NAN, NAN, NAN], [NAN, 1, 2], [1, NAN, 2], [2, NAN, 1], [-INF, NAN, -INF],
            [NAN, -INF, 5], [INF, INF, 1], [3, 3, 3], [-INF, -INF, -INF]]
    if dtype.is_integer:
        rows = [[r if math.isfinite(r) else 0 for r in row] for row in rows]
    x = tf.constant(rows, tf.float32)
    x = tf.cast(x, dtype)
    for axis in (0, 1):
        for fn in (tf.math.argmax, tf.math.argmin):
            _same(_on(NPU, fn, x, axis), _on(CPU, fn, x, axis), f"{fn.__name__} axis {axis}")


def test_reductions_propagate_nan_like_tf():
    x = tf.constant([[NAN, 1.0, -INF], [2.0, 3.0, 1.0]])
    for fn in (tf.reduce_max, tf.reduce_min, tf.reduce_sum, tf.reduce_mean):
        for axis in (0, 1, None):
            _same(_on(NPU, fn, x, axis), _on(CPU, fn, x, axis), f"{fn.__name__} {axis}")


POOL_GRADS = {
    "AvgPool3DGrad": lambda x, y: tf.raw_ops.AvgPool3DGrad(
        orig_input_shape=tf.shape(x), grad=y, ksize=[1, 2, 2, 2, 1], strides=[1, 1, 1, 1, 1], padding="SAME"),
    "MaxPool3DGrad": lambda x, y: tf.raw_ops.MaxPool3DGrad(
        orig_input=x, orig_output=y, grad=y, ksize=[1, 2, 2, 2, 1], strides=[1, 1, 1, 1, 1], padding="SAME"),
    "AvgPoolGrad": lambda x, y: tf.raw_ops.AvgPoolGrad(
        orig_input_shape=tf.shape(x), grad=y, ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="SAME"),
    "MaxPoolGrad": lambda x, y: tf.raw_ops.MaxPoolGrad(
        orig_input=x, orig_output=y, grad=y, ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="SAME"),
}


@pytest.mark.parametrize("name", sorted(POOL_GRADS))
@pytest.mark.parametrize("empty_axis", [0, 1, -1])
def test_pool_gradients_of_empty_inputs_are_empty_like_tf(name, empty_axis):
    rank = 5 if "3D" in name else 4
    shape = [2, 3, 3, 3, 2][:rank]
    shape[empty_axis] = 0
    x = tf.zeros(shape)
    _compare(POOL_GRADS[name], x, x, what=f"{name} {shape}")


@pytest.mark.parametrize("case", [
    ("MaxPool", lambda x: tf.nn.max_pool2d(x, 3, 2, "VALID"), [2, 2, 5, 3]),
    ("AvgPool", lambda x: tf.nn.avg_pool2d(x, 2, 2, "SAME"), [2, 0, 4, 3]),
    ("MaxPool3D", lambda x: tf.nn.max_pool3d(x, 2, 2, "VALID"), [1, 1, 4, 4, 2]),
    ("Conv2D", lambda x: tf.nn.conv2d(x, tf.ones([3, 3, 3, 4]), 1, "VALID"), [2, 2, 6, 3]),
    ("Conv2D SAME", lambda x: tf.nn.conv2d(x, tf.ones([3, 3, 3, 4]), 2, "SAME"), [2, 0, 6, 3]),
    ("Conv2D no filters", lambda x: tf.nn.conv2d(x, tf.ones([3, 3, 3, 0]), 1, "SAME"), [2, 4, 4, 3]),
    ("Conv2D empty window", lambda x: tf.nn.conv2d(x, tf.ones([0, 3, 3, 4]), 1, "SAME"), [2, 4, 4, 3]),
    ("MatMul K=0", lambda x: tf.matmul(x, tf.zeros([0, 5])), [4, 0]),
    ("Softmax", tf.nn.softmax, [3, 0]),
    ("Concat", lambda x: tf.concat([x, tf.ones([2, 3])], 0), [0, 3]),
    ("Pad", lambda x: tf.pad(x, [[1, 1], [2, 0]]), [0, 3]),
    ("Tile", lambda x: tf.tile(x, [0, 2]), [2, 3]),
    ("Cumsum", lambda x: tf.cumsum(x, 1), [3, 0]),
    ("GatherV2", lambda x: tf.gather(x, tf.zeros([0], tf.int32)), [3, 4]),
    ("GatherNd empty params", lambda x: tf.gather_nd(x, [[1]]), [4, 0]),
    ("SparseXent no classes", lambda x: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
        features=x, labels=tf.zeros([4], tf.int32)), [4, 0]),
], ids=lambda c: c[0])
def test_windows_and_ops_with_empty_results_like_tf(case):
    """Empty outputs are TF's empty results (folded at compile time, skipped by the executor);
    what TF refuses (an empty window, no classes) is refused with TF's class."""
    _, fn, shape = case
    x = tf.ones(shape)
    _compare(fn, x, what=case[0])


# ---- what the op fuzzer (tools/fuzz/ops.py) found, pinned --------------------------------------

_BF16 = tf.bfloat16.as_numpy_dtype
_NAN = np.float32(np.nan)


@pytest.mark.parametrize("case", [
    # denormals are flushed to zero (inputs and results) as TF's CPU kernels compute
    ("Reciprocal of denormals", tf.math.reciprocal, [np.array([1e-39, -3e-39, 1e-45, 2.0], np.float32)]),
    ("Mul into denormals", lambda x: x * np.float32(1e-3), [np.array([1e-36, -2e-37, 1.0], np.float32)]),
    ("FloorDiv to a denormal quotient", tf.math.floordiv,
     [np.array([-1.18, 2.0], np.float32), np.array([3e38, 3e38], np.float32)]),
    # MaxPool: NaN never wins; a window of NaN or -inf pools to the dtype's lowest value
    ("MaxPool NaN windows", lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"),
     [np.array([_NAN, 1, _NAN, _NAN, -np.inf, -np.inf, 2, _NAN], np.float32).reshape(1, 2, 4, 1)]),
    ("MaxPool NaN windows fp16", lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"),
     [np.array([np.nan, np.nan, np.nan, np.nan], np.float16).reshape(1, 2, 2, 1)]),
    # MaxPoolGradGrad: the first element equal to orig_output, else 0 (NaN windows)
    ("MaxPoolGradGrad NaN", lambda x, y, g: tf.raw_ops.MaxPoolGradGrad(
        orig_input=x, orig_output=y, grad=g, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"),
     [np.array([_NAN, 1, 3, 3], np.float32).reshape(1, 2, 2, 1), np.array([[[[_NAN]]]], np.float32),
      np.arange(4, dtype=np.float32).reshape(1, 2, 2, 1)]),
    # bfloat16 scans accumulate in bfloat16, overflowing where TF's do
    ("Cumprod bfloat16 overflow", lambda x: tf.math.cumprod(x, exclusive=True, reverse=True),
     [np.array([0.71875, -1.0859375, 0.69140625, 1.15625, -3.004e38], _BF16)]),
    # Sqrt/Rsqrt/Reciprocal gradients: a zero upstream gradient gives 0, even at y = 0, inf, NaN
    *[(f"{op} of a zero gradient", lambda y, dy, op=op: getattr(tf.raw_ops, op)(y=y, dy=dy),
       [np.array([np.nan, 0, np.inf, 1, np.nan, -np.inf], np.float32),
        np.array([0, 0, 0, 0, 1, 0], np.float32)])
      for op in ("SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "InvGrad")],
    ("MirrorPadGrad of an empty gradient", lambda g: tf.raw_ops.MirrorPadGrad(
        input=g, paddings=[[0, 0], [2, 2]], mode="SYMMETRIC"), [np.zeros((0, 8), np.float32)]),
    # MaxPool3DGrad: TF routes the gradient to every element within 1e-5 of the maximum
    ("MaxPool3DGrad near ties and infinities", lambda x, y, g: tf.raw_ops.MaxPool3DGrad(
        orig_input=x, orig_output=y, grad=g, ksize=[1, 1, 1, 3, 1], strides=[1, 1, 1, 3, 1],
        padding="VALID"),
     [np.array([1.0, 1.0 + 5e-6, 0.5, np.inf, np.inf, 2.0], np.float32).reshape(1, 1, 1, 6, 1),
      np.array([1.0 + 5e-6, np.inf], np.float32).reshape(1, 1, 1, 2, 1),
      np.array([3.0, 7.0], np.float32).reshape(1, 1, 1, 2, 1)]),
    # StridedSlice: an ellipsis' stride is ignored; a shrunk axis needs a positive stride
    ("StridedSlice ellipsis stride 0", lambda x: tf.raw_ops.StridedSlice(
        input=x, begin=[0, 1], end=[0, 2], strides=[0, 1], ellipsis_mask=1, shrink_axis_mask=2),
     [np.ones((3, 4), np.float32)]),
    ("StridedSlice shrink stride -1", lambda x: tf.raw_ops.StridedSlice(
        input=x, begin=[1], end=[2], strides=[-1], shrink_axis_mask=1), [np.ones((3, 4), np.float32)]),
    # index checks that hold even for empty results
    ("UnsortedSegmentSum no segments", lambda d: tf.math.unsorted_segment_sum(d, [0], 0),
     [np.ones((1, 2), np.float32)]),
    ("UnsortedSegmentSum negative ids only", lambda d: tf.math.unsorted_segment_sum(d, [-1], 0),
     [np.ones((1, 2), np.float32)]),
    ("ScatterNd into an empty shape", lambda u: tf.scatter_nd([[1]], u, [3, 0]), [np.zeros((1, 0), np.float32)]),
    # stateless random: key/counter shapes checked before an empty result returns, alg after
    ("StatelessRandom empty, bad key", lambda: tf.raw_ops.StatelessRandomUniformV2(
        shape=[0, 5], key=np.array([1, 2], np.uint64), counter=np.array([1, 2], np.uint64), alg=1), []),
    ("StatelessRandom empty, alg 0", lambda: tf.raw_ops.StatelessRandomUniformV2(
        shape=[0, 5], key=np.array([1], np.uint64), counter=np.array([1, 2], np.uint64), alg=0), []),
    ("StatelessRandom longer counter", lambda: tf.raw_ops.StatelessRandomUniformV2(
        shape=[2, 3], key=np.array([7], np.uint64), counter=np.array([1, 2, 3], np.uint64), alg=1), []),
], ids=lambda c: c[0])
def test_fuzzer_findings_match_tf(case):
    _, fn, args = case
    _compare(fn, *[tf.constant(a) for a in args], what=case[0])
