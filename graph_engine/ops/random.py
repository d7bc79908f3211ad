"""TF's stateless random ops (Keras Dropout and initializers, tf.random.stateless_uniform with
integer dtypes, tf.random.stateless_categorical), bit-exact with TF on the CPU.
Kernel: runtime/kernels/random.cc.

TF's algorithm: Philox4x32-10. StatelessRandomGetKeyCounter scrambles a 2-element seed into a
64-bit key and a 128-bit counter (one Philox call on the seed with a fixed key); the V2 ops fill
their output from (key, counter): output group g is made from Philox(counter + g, key), one
uint32 per element (uniform float, 32-bit integers), two per element (64-bit integers, low word
first), or two per pair of elements (normal, Box-Muller). Truncated normal takes a variable
number of draws per group of 4 and so reserves 256 Philox calls per group. The V1 ops (seed
input) derive key and counter the same way and then fill alike.

StatelessMultinomial draws one double per sample (two words) from a stream that TF's CPU kernel
splits by its intra-op thread pool's row blocks (multinomial_row_blocks): the result depends on
that pool's size, which the NPU takes to be TF's default (see tf_intra_op_threads).
"""
import math
import os

import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import FLOAT, INDEX, INT, Op, register, scalar

FULL_INT = INT + (dt.DT_UINT64,)     # StatelessRandomUniformFullInt's dtypes the NPU holds

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = np.uint64(0xFFFFFFFF)
PHILOX, AUTO_SELECT = 1, 3          # TF's RNG algorithm ids; AUTO_SELECT is Philox on CPU


def philox(counters, key):
    """Philox4x32-10 of uint32 counters [n, 4] under key (k0, k1): uint32 [n, 4]."""
    c = [counters[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = int(key[0]), int(key[1])
    for _ in range(10):
        p0, p1 = _M0 * c[0], _M1 * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & _LO,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & _LO]
        k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return np.stack(c, axis=1).astype(np.uint32)


def _counters(counter, start, n):
    """counter + start + i for i < n (128-bit adds with carry), as uint32 [n, 4]."""
    lo = np.uint64(int(counter[0]) | int(counter[1]) << 32)
    hi = np.uint64(int(counter[2]) | int(counter[3]) << 32)
    with np.errstate(over="ignore"):
        step = np.uint64(start) + np.arange(n, dtype=np.uint64)
        new_lo = lo + step                               # wraps modulo 2**64
        new_hi = hi + (new_lo < lo).astype(np.uint64)
    w = np.uint64(32)
    return np.stack([new_lo & _LO, new_lo >> w, new_hi & _LO, new_hi >> w], axis=1)


def words(n, key, counter, start=0):
    """n uint32 of the Philox stream from call `start` on: word i is word i % 4 of
    Philox(counter + start + i // 4)."""
    return philox(_counters(counter, start, -(-n // 4)), key).reshape(-1)[:n]


def key_counter_from_seed(seed):
    """TF's seed scrambling: ((k0, k1), (c0, c1, c2, c3)) as uint32 tuples."""
    s0, s1 = (int(v) & 0xFFFFFFFFFFFFFFFF for v in np.asarray(seed).reshape(-1)[:2])  # sign-extend
    words = np.array([[s0 & 0xFFFFFFFF, s0 >> 32, s1 & 0xFFFFFFFF, s1 >> 32]], np.uint64)
    mix = philox(words, (0x3EC8F720, 0x02461E29))[0]
    return (int(mix[0]), int(mix[1])), (0, 0, int(mix[2]), int(mix[3]))


def _to_float(bits):
    """TF's uint32 -> float in [0, 1): 23 random mantissa bits."""
    return (bits & np.uint32(0x7FFFFF)).astype(np.float32) * np.float32(2.0 ** -23)


def _box_muller(x0, x1):
    u1 = np.maximum(_to_float(x0), np.float32(1e-7))
    v1 = (2.0 * np.pi * _to_float(x1).astype(np.float64)).astype(np.float32)
    u2 = np.sqrt(np.float32(-2.0) * np.log(u1))
    return np.sin(v1) * u2, np.cos(v1) * u2


def fill(dist, n, key, counter, out_dtype):
    """n values of `dist` ("uniform", "normal", "truncated_normal") as float32 (exactly
    representable in `out_dtype` for uniform: the mantissa bits TF keeps for that dtype)."""
    groups = -(-n // 4)
    if dist == "uniform":
        bits = words(n, key, counter)
        if out_dtype == dt.DT_HALF:
            return (bits & np.uint32(0x3FF)).astype(np.float32) / np.float32(1024)
        if out_dtype == dt.DT_BFLOAT16:
            return (bits & np.uint32(0x7F)).astype(np.float32) / np.float32(128)
        return _to_float(bits)
    if dist == "normal":
        r = philox(_counters(counter, 0, groups), key)
        a, b = _box_muller(r[:, 0::2], r[:, 1::2])
        return np.stack([a, b], axis=2).reshape(-1)[:n]
    out = []
    for g in range(groups):             # 256 Philox calls reserved per group of 4
        for calls in (8, 256):          # 8 almost always yield 4 values within (-2, 2)
            draws = philox(_counters(counter, 256 * g, calls), key).reshape(-1)
            a, b = _box_muller(draws[0::2], draws[1::2])
            kept = np.stack([a, b], axis=1).reshape(-1)
            kept = kept[np.abs(kept) < 2.0]
            if len(kept) >= 4:
                break
        out.append(kept[:4])
    return np.concatenate(out)[:n] if out else np.zeros(0, np.float32)


def _key_counter_inputs(xs):
    key, counter = (np.asarray(x).astype(np.uint64).reshape(-1) for x in xs)
    if key.size != 1 or counter.size < 2:
        raise ValueError(f"key must have 1 element and counter at least 2, got {key.size} and "
                         f"{counter.size}")
    k, c0, c1 = int(key[0]), int(counter[0]), int(counter[1])
    return ((k & 0xFFFFFFFF, k >> 32),
            (c0 & 0xFFFFFFFF, c0 >> 32, c1 & 0xFFFFFFFF, c1 >> 32))


def _check_alg(attrs, name):
    alg = scalar(attrs, "alg")
    if alg not in (PHILOX, AUTO_SELECT):
        raise ValueError(f"{name}: RNG algorithm {alg} not supported; allowed: 1 (Philox), "
                         "3 (auto-select)")


def _shape(attrs, name):
    shape = tuple(int(d) for d in attrs["shape"])
    if any(d < 0 for d in shape):
        raise ValueError(f"{name}: shape {list(shape)} has a negative dimension")
    return shape


@register
class StatelessRandomGetKeyCounter(Op):
    """seed [2] -> key uint64 [1], counter uint64 [2]."""
    type_attrs = {"Tseed": INT}

    def shapes(self, shapes, attrs):
        if tuple(shapes[0]) != (2,):
            raise ValueError(f"{self.name}: seed must have shape [2], got {list(shapes[0])}")
        return [(1,), (2,)]

    def compute(self, xs, attrs):
        (k0, k1), c = key_counter_from_seed(xs[0])
        return [np.array([k0 | k1 << 32], np.uint64),
                np.array([c[0] | c[1] << 32, c[2] | c[3] << 32], np.uint64)]


class _StatelessV2(Op):
    """shape (const), key, counter, alg (const) -> random values of `dtype`."""
    dist = None
    type_attrs = {"dtype": FLOAT, "Tshape": INDEX}
    const_inputs = ("shape", "alg")

    def shapes(self, shapes, attrs):
        # TF's order: key and counter shapes, then an empty result returns, then the algorithm.
        key, counter = tuple(shapes[0]), tuple(shapes[1])
        if key != (1,) or len(counter) != 1 or counter[0] < 1:
            raise ValueError(f"{self.name}: key must have shape [1] and counter be a non-empty "
                             f"vector, got {list(key)} and {list(counter)}")
        out = _shape(attrs, self.name)
        if 0 in out:
            return [out]
        _check_alg(attrs, self.name)
        if counter[0] < 2:             # TF reads Philox's second word past the end (undefined)
            raise ValueError(f"{self.name}: counter must have at least 2 elements for Philox, got "
                             f"{list(counter)}")
        return [out]

    def compute(self, xs, attrs):
        _check_alg(attrs, self.name)
        shape = _shape(attrs, self.name)
        key, counter = _key_counter_inputs(xs)
        n = int(np.prod(shape))
        return fill(self.dist, n, key, counter, attrs.get("dtype", dt.DT_FLOAT)).reshape(shape)


class _StatelessV1(Op):
    """shape (const), seed [2] -> random values of `dtype` (key and counter from the seed)."""
    dist = None
    type_attrs = {"dtype": FLOAT, "T": INDEX, "Tseed": INT}
    const_inputs = ("shape",)

    def shapes(self, shapes, attrs):
        if tuple(shapes[0]) != (2,):
            raise ValueError(f"{self.name}: seed must have shape [2], got {list(shapes[0])}")
        return [_shape(attrs, self.name)]

    def compute(self, xs, attrs):
        shape = _shape(attrs, self.name)
        key, counter = key_counter_from_seed(xs[0])
        n = int(np.prod(shape))
        return fill(self.dist, n, key, counter, attrs.get("dtype", dt.DT_FLOAT)).reshape(shape)


# numpy's float32 log/sin/cos may differ from glibc's in the last bit: only uniform values fold
for _name, _dist in (("StatelessRandomUniform", "uniform"), ("StatelessRandomNormal", "normal"),
                     ("StatelessTruncatedNormal", "truncated_normal")):
    for _base, _suffix in ((_StatelessV1, ""), (_StatelessV2, "V2")):
        register(type(_name + _suffix, (_base,), {"dist": _dist, "name": _name + _suffix,
                                                  "foldable": _dist == "uniform"}))


# ---- integers: tf.random.stateless_uniform with an integer dtype --------------------------

def fill_int(n, key, counter, out_dtype, lo=None, hi=None):
    """n integers of `out_dtype`, TF's UniformFullIntDistribution (the raw bits) or, given
    lo < hi, its UniformDistribution: lo + bits % (hi - lo), the range and the sum taken in
    unsigned arithmetic (no overflow; the modulo bias is TF's). A 32-bit value takes one word of
    the stream, a 64-bit value two (low word first)."""
    out = dt.numpy_dtype(out_dtype)
    if out.itemsize == 8:
        w = words(2 * n, key, counter).astype(np.uint64)
        bits = w[0::2] | w[1::2] << np.uint64(32)
    else:
        bits = words(n, key, counter)
    if lo is not None:
        lo_u, hi_u = (np.asarray(v, out).reshape(1).view(bits.dtype) for v in (lo, hi))
        bits = bits % (hi_u - lo_u) + lo_u          # wraps modulo 2**bits like TF's SignedAdd
    return bits.view(out)


def _check_bound_shapes(shapes, out, name):
    """minval and maxval must be scalars, when the result is not empty (TF looks no further)."""
    if 0 in out:
        return
    for what, shape in zip(("minval", "maxval"), shapes):
        if len(shape):
            raise ValueError(f"{name}: {what} must be 0-D, got shape {list(shape)}")


def _bounds(xs, name):
    lo, hi = (np.asarray(x).reshape(()) for x in xs)
    if not lo < hi:
        raise ValueError(f"{name}: Need minval < maxval, got {lo} >= {hi}")
    return lo, hi


class _StatelessInt:
    """The integer ops' shared part; `bounds_at`: the input index of minval (then maxval)."""
    ranged = True
    bounds_at = None

    def shapes(self, shapes, attrs):
        out = super().shapes(shapes, attrs)
        if self.ranged:
            _check_bound_shapes(shapes[self.bounds_at:self.bounds_at + 2], out[0], self.name)
        return out

    def compute(self, xs, attrs):
        shape = _shape(attrs, self.name)
        n = int(np.prod(shape))
        out_dtype = attrs.get("dtype", dt.DT_INT64 if self.ranged else dt.DT_UINT64)
        if n == 0:                                  # TF returns before any check of values
            return np.zeros(shape, dt.numpy_dtype(out_dtype))
        bounds = _bounds(xs[self.bounds_at:self.bounds_at + 2], self.name) if self.ranged else ()
        key, counter = self.stream(xs[:self.bounds_at], attrs)
        return fill_int(n, key, counter, out_dtype, *bounds).reshape(shape)


class _StatelessIntV2(_StatelessInt, _StatelessV2):
    """shape (const), key, counter, alg (const)[, minval, maxval] -> integers of `dtype`."""
    type_attrs = {"dtype": INT, "Tshape": INDEX}
    bounds_at = 2

    def stream(self, xs, attrs):
        _check_alg(attrs, self.name)
        return _key_counter_inputs(xs)


class _StatelessIntV1(_StatelessInt, _StatelessV1):
    """shape (const), seed[, minval, maxval] -> integers of `dtype`."""
    type_attrs = {"dtype": INT, "T": INDEX, "Tseed": INT}
    bounds_at = 1

    def stream(self, xs, attrs):
        return key_counter_from_seed(xs[0])


for _base, _suffix in ((_StatelessIntV1, ""), (_StatelessIntV2, "V2")):
    for _name, _ranged in (("StatelessRandomUniformInt", True),
                           ("StatelessRandomUniformFullInt", False)):
        _types = dict(_base.type_attrs, dtype=INT if _ranged else FULL_INT)
        register(type(_name + _suffix, (_base,), {"name": _name + _suffix, "ranged": _ranged,
                                                  "type_attrs": _types}))


# ---- tf.random.stateless_categorical ------------------------------------------------------

def tf_intra_op_threads():
    """The size of TF's CPU intra-op thread pool as TF sizes it unless told otherwise:
    $TF_NUM_INTRAOP_THREADS when it is a positive integer, else the CPUs this process may run
    on. (A pool sized by tf.config.threading.set_intra_op_parallelism_threads is not visible
    here; StatelessMultinomial's rows past the first block then differ from TF's.)"""
    try:
        n = int(os.environ.get("TF_NUM_INTRAOP_THREADS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else len(os.sched_getaffinity(0))


def multinomial_row_blocks(batch, num_samples, num_classes, threads):
    """The row blocks [start, end) TF's CPU StatelessMultinomial runs, as its work sharder and
    Eigen's ThreadPoolDevice::parallelFor cut `batch` rows for `threads` threads (with TF's
    cost estimate per row). Each block restarts the stream, so the blocks decide the result."""
    cost = int(50 * (num_samples * math.log(num_classes) / math.log(2) + num_classes))
    wanted = min(threads, max(1, int((batch * float(cost) - 100000) / 100000 + 0.9)))
    if batch <= 1 or threads <= 1 or wanted == 1:
        return [(0, batch)]
    ceil = lambda a, b: -(-a // b)                              # noqa: E731
    efficiency = lambda count: count / (ceil(count, threads) * threads)   # noqa: E731
    size = min(batch, max(ceil(batch, 4 * threads), int(1.0 / (float(cost) / 40000))))
    largest = min(batch, 2 * size)
    count = ceil(batch, size)
    best = efficiency(count)
    prev = count
    while best < 1.0 and prev > 1:              # coarser blocks while efficiency holds
        coarser = ceil(batch, prev - 1)
        if coarser > largest:
            break
        prev = ceil(batch, coarser)
        if efficiency(prev) + 0.01 >= best:
            size, count, best = coarser, prev, max(best, efficiency(prev))
    return [(s, min(s + size, batch)) for s in range(0, batch, size)]


def multinomial(logits, num_samples, seed, threads):
    """TF's CPU StatelessMultinomial: int64 [batch, num_samples]. Per row: an unnormalized CDF
    in double of exp(logit - max finite logit) over the finite logits, and for each sample the
    first class whose CDF exceeds u * total, u a double from two stream words (20 + 32 mantissa
    bits). A row block [s, e) starts at Philox call s * (num_samples + 3) // 4 and its rows
    read the stream on from there, 2 * num_samples words each."""
    key, counter = key_counter_from_seed(seed)
    batch, classes = logits.shape
    out = np.zeros((batch, num_samples), np.int64)
    if out.size == 0:
        return out
    for s, e in multinomial_row_blocks(batch, num_samples, classes, threads):
        w = words(2 * num_samples * (e - s), key, counter, s * (num_samples + 3) // 4)
        w = w.astype(np.uint64)
        mantissa = (w[0::2] & np.uint64(0xFFFFF)) << np.uint64(32) | w[1::2]
        u = (mantissa | np.uint64(1023 << 52)).view(np.float64) - 1.0
        for r, row_u in zip(range(s, e), u.reshape(e - s, num_samples)):
            row = logits[r].astype(np.float64)
            finite = np.isfinite(row)
            top = row[finite].max() if finite.any() else 0.0   # no finite logit: total 0
            cdf = np.cumsum(np.where(finite, np.exp(row - top), 0.0))
            out[r] = np.searchsorted(cdf, row_u * cdf[-1], side="right")
    return out


@register
class StatelessMultinomial(Op):
    """logits [batch, classes], num_samples (const), seed [2] -> class indices [batch, num_samples]."""
    type_attrs = {"T": FLOAT, "Tseed": INT, "output_dtype": INT}
    const_inputs = ("num_samples",)

    def shapes(self, shapes, attrs):
        logits, seed = (tuple(s) for s in shapes)
        if seed != (2,):                    # TF's order of checks
            raise ValueError(f"{self.name}: seed must have shape [2], not {list(seed)}")
        if len(logits) != 2:
            raise ValueError(f"{self.name}: logits should be a matrix, got shape {list(logits)}")
        if np.size(attrs["num_samples"]) != 1:
            raise ValueError(f"{self.name}: num_samples should be a scalar")
        num_samples = scalar(attrs, "num_samples")
        if num_samples < 0:
            raise ValueError(f"{self.name}: num_samples should be non-negative, got {num_samples}")
        if logits[1] <= 0:
            raise ValueError(f"{self.name}: num_classes should be positive, got {logits[1]}")
        return [(logits[0], num_samples)]

    def compute(self, xs, attrs):
        self.shapes([np.shape(x) for x in xs], attrs)
        # float16/bfloat16 logits arrive widened to float32; their max, CDF and draws are the same
        return multinomial(np.asarray(xs[0]), scalar(attrs, "num_samples"), xs[1],
                           tf_intra_op_threads())
