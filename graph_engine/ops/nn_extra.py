"""More neural-network ops: fused batch norm, LRN, pooling variants, dilation, fake quantization.

Kernels: runtime/kernels/nn_extra.cc (L2Loss, data-format maps, LRN, BiasAddV1 and the V2 pools,
which reuse the BiasAdd and pooling kernels), fake_quant.cc (FakeQuant*, QuantizeAndDequantize*),
batch_norm.cc (FusedBatchNorm*), window_max.cc (MaxPoolWithArgmax*, Dilation2D*, NthElement).
"""
import numpy as np

from graph_engine.ops import pool
from graph_engine.ops.spatial import Geometry
from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import FLOAT, INT, NUMBER, Op, check_same_shapes, register, scalar
from graph_engine.ops.nn import BiasAdd

F32 = np.float32


@register
class L2Loss(Op):
    """sum(x ** 2) / 2, a scalar."""
    mixlist = "black"
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        return [()]

    def compute(self, xs, attrs):
        return np.sum(np.square(xs[0], dtype=np.float64)) / 2


@register
class BiasAddV1(BiasAdd):
    """BiasAdd with the bias along the last axis (no data_format). Not fusible: the elementwise
    fusion knows BiasAdd's broadcasting by name only; its kernel is BiasAdd's."""
    fusible = False
    functor = None


# ---- data-format maps ------------------------------------------------------------------------

def _formats(attrs):
    """(src, dst) data-format strings, checked as TF does."""
    src, dst = attrs.get("src_format", "NHWC"), attrs.get("dst_format", "NCHW")
    if len(src) not in (4, 5):
        raise ValueError(f"Source format must be of length 4 or 5, received src_format = {src}")
    if len(dst) not in (4, 5):
        raise ValueError(f"Destination format must be of length 4 or 5, received dst_format = "
                         f"{dst}")
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        raise ValueError(f"Destination and source format must determine a permutation, got "
                         f"{src} and {dst}")
    return src, dst


@register
class DataFormatDimMap(Op):
    """Each dimension index of src_format -> its index in dst_format. As TF's select chain:
    m = (x + rank) % rank, the sum wrapping in T and the remainder truncating; an m outside
    [0, rank - 1) (x < -rank, INT_MIN) maps as the last dimension."""
    type_attrs = {"T": INT}

    def shapes(self, shapes, attrs):
        _formats(attrs)
        return [shapes[0]]

    def compute(self, xs, attrs):
        src, dst = _formats(attrs)
        table = np.array([dst.index(ch) for ch in src], xs[0].dtype)
        with np.errstate(over="ignore"):
            wrapped = (xs[0] + xs[0].dtype.type(len(src))).astype(np.int64)
        m = np.fmod(wrapped, len(src))
        return table[np.where((m >= 0) & (m < len(src) - 1), m, len(src) - 1)]


@register
class DataFormatVecPermute(Op):
    """A vector (or the rows of an [n, 2] matrix) of per-dimension values permuted from
    src_format to dst_format; 2 rows (4 for 5-D formats) are the spatial dimensions only."""
    type_attrs = {"T": INT}

    def permutation(self, shape, attrs):
        src, dst = _formats(attrs)
        full, spatial = len(src), len(src) - 2
        if len(shape) not in (1, 2):
            raise ValueError(f"input must be a vector or 2D tensor, but got shape {list(shape)}")
        if shape[0] not in (spatial, full):
            what = "1D input" if len(shape) == 1 else "First dimension of 2D input"
            raise ValueError(f"{what} must be of size {spatial} or {full}, but got shape "
                             f"{list(shape)}")
        if len(shape) == 2 and shape[1] != 2:
            raise ValueError(f"Second dimension of 2D input must be of size 2, but got shape "
                             f"{list(shape)}")
        if shape[0] == spatial:
            src, dst = (s.replace("N", "").replace("C", "") for s in (src, dst))
        return [src.index(ch) for ch in dst]

    def shapes(self, shapes, attrs):
        self.permutation(shapes[0], attrs)
        return [shapes[0]]

    def compute(self, xs, attrs):
        return xs[0][self.permutation(xs[0].shape, attrs)]


# ---- pooling with ksize and strides as inputs --------------------------------------------------

@register
class MaxPoolV2(pool.MaxPool):
    const_inputs = ("ksize", "strides")


@register
class MaxPoolGradV2(pool.MaxPoolGrad):
    const_inputs = ("ksize", "strides")


@register
class MaxPoolGradGradV2(pool.MaxPoolGradGrad):
    const_inputs = ("ksize", "strides")


# ---- window maxima with their position: MaxPoolWithArgmax, Dilation2D ---------------------------
# As TF's CPU kernels: a window's maximum starts at the dtype's lowest value and a strictly
# greater value replaces it, so the first maximum in scan order (rows, then columns) wins;
# window elements in the padding are skipped.

def _lowest(dtype):
    return np.finfo(dtype).min if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _window_max(geometry, x, add=None, first_always=False):
    """(max, row, col) per output position of the NHWC window geometry (the maxima of x plus
    `add`[kh, kw, c] per tap); row/col index x (-1 where nothing was taken). first_always:
    MaxPoolWithArgmax's rule, the window's first element is taken whatever its value."""
    n, h, w, c = x.shape
    (oh, ow), (sh, sw), (dh, dw) = geometry.out, geometry.stride, geometry.dilation
    (top, _), (left, _) = geometry.pads
    best = np.full((n, oh, ow, c), _lowest(x.dtype), x.dtype)
    rows, cols = np.full(best.shape, -1), np.full(best.shape, -1)
    for kh in range(geometry.k[0]):
        for kw in range(geometry.k[1]):
            iy = np.broadcast_to(np.arange(oh)[:, None] * sh + kh * dh - top, (oh, ow))[None, :, :, None]
            ix = np.broadcast_to(np.arange(ow)[None, :] * sw + kw * dw - left, (oh, ow))[None, :, :, None]
            inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            v = x[:, np.clip(iy[0, :, :, 0], 0, h - 1), np.clip(ix[0, :, :, 0], 0, w - 1), :]
            if add is not None:     # in x's dtype, as TF: integer sums wrap
                with np.errstate(over="ignore"):
                    v = v + add[kh, kw]
            take = inside & ((v > best) | (first_always & (rows < 0)))
            best, rows, cols = np.where(take, v, best), np.where(take, iy, rows), np.where(take, ix, cols)
    return best, rows, cols


def _argmax_pool(attrs, shape, what):
    if attrs.get("data_format", "NHWC") != "NHWC" or len(shape) != 4:
        raise ValueError(f"{what}: input must be 4-D NHWC, got {list(shape)}")
    return Geometry(attrs, shape[1:3], pool.window_attrs(attrs, what), what)


def _flat_index(rows, cols, shape, with_batch):
    n, h, w, c = shape
    b = np.arange(rows.shape[0])[:, None, None, None] if with_batch else 0
    return ((b * h + rows) * w + cols) * c + np.arange(c)


@register
class MaxPoolWithArgmax(Op):
    """(output, argmax): argmax the flat index of the first maximum of each window, (y * W + x)
    * C + c, plus b * H * W * C with include_batch_in_index."""
    type_attrs = {"T": NUMBER, "Targmax": INT}

    def shapes(self, shapes, attrs):
        g = _argmax_pool(attrs, shapes[0], self.name)
        if 0 in shapes[0]:
            raise ValueError("tensor_in must not be empty")                  # TF's check
        out = g.shape_out(shapes[0][0], shapes[0][3])
        return [out, out]

    def compute(self, xs, attrs):
        g = _argmax_pool(attrs, xs[0].shape, self.name)
        best, rows, cols = _window_max(g, xs[0], first_always=True)
        return best, _flat_index(rows, cols, xs[0].shape, attrs.get("include_batch_in_index", False))


@register
class MaxPoolGradWithArgmax(Op):
    """(input, grad, argmax) -> each grad element added at its argmax position of input."""
    type_attrs = {"T": NUMBER, "Targmax": (dt.DT_INT64,)}      # TF's CPU kernel: int64 only
    checks_values = True

    def shapes(self, shapes, attrs):
        g = _argmax_pool(attrs, shapes[0], self.name)
        out = g.shape_out(shapes[0][0], shapes[0][3])
        for name, s in (("grad", shapes[1]), ("argmax", shapes[2])):
            if tuple(s) != out:
                raise ValueError(f"{self.name}: {name} must have the pooled shape {list(out)}, got {list(s)}")
        return [shapes[0]]

    def compute(self, xs, attrs):
        x, grad, argmax = xs
        per_batch = int(np.prod(x.shape[1:]))
        index = argmax.reshape(len(x), -1).astype(np.int64)
        if not attrs.get("include_batch_in_index", False):
            index = index + np.arange(len(x))[:, None] * per_batch
        lo = np.arange(len(x))[:, None] * per_batch
        if np.any((index < lo) | (index >= lo + per_batch)):
            raise ValueError("Invalid output gradient index: out of the range of the input")
        out = np.zeros(x.size, grad.dtype)
        np.add.at(out, index.ravel(), grad.ravel())
        return out.reshape(x.shape)


def _dilation(attrs, x_shape, f_shape, what):
    if len(x_shape) != 4:                                          # TF's checks and messages
        raise ValueError(f"input must be 4-dimensional, got {list(x_shape)}")
    if len(f_shape) != 3:
        raise ValueError(f"filter must be 3-dimensional, got {list(f_shape)}")
    if x_shape[3] != f_shape[2]:
        raise ValueError(f"input and filter must have the same depth: {x_shape[3]} vs {f_shape[2]}")
    return Geometry({**attrs, "dilations": attrs.get("rates", [1, 1, 1, 1])}, x_shape[1:3],
                    f_shape[:2], what)


@register
class Dilation2D(Op):
    """Grayscale dilation: the maximum over the (rate-dilated) window of input + filter."""
    type_attrs = {"T": NUMBER}

    def shapes(self, shapes, attrs):
        g = _dilation(attrs, shapes[0], shapes[1], self.name)
        return [g.shape_out(shapes[0][0], shapes[0][3])]

    def compute(self, xs, attrs):
        return _window_max(_dilation(attrs, xs[0].shape, xs[1].shape, self.name), xs[0], xs[1])[0]


class _DilationBackprop(Op):
    """(input, filter, out_backprop): each output gradient goes to the input element (or the
    filter tap) of its window's first maximum."""
    type_attrs = {"T": NUMBER}
    to_filter = False

    def shapes(self, shapes, attrs):
        g = _dilation(attrs, shapes[0], shapes[1], self.name)
        out = g.shape_out(shapes[0][0], shapes[0][3])
        if tuple(shapes[2]) != out:
            raise ValueError(f"{self.name}: out_backprop must have shape {list(out)}, got {list(shapes[2])}")
        return [shapes[1] if self.to_filter else shapes[0]]

    def compute(self, xs, attrs):
        x, f, dy = xs
        g = _dilation(attrs, x.shape, f.shape, self.name)
        _, rows, cols = _window_max(g, x, f)
        (sh, sw), (dh, dw) = g.stride, g.dilation
        (top, _), (left, _) = g.pads
        n, oh, ow, c = dy.shape
        b, y, xx, ch = np.meshgrid(np.arange(n), np.arange(oh), np.arange(ow), np.arange(c), indexing="ij")
        taken = rows >= 0
        if self.to_filter:        # the tap: its input row/column back to the window offset
            kh = np.where(taken, (rows - y * sh + top) // dh, 0)
            kw = np.where(taken, (cols - xx * sw + left) // dw, 0)
            out = np.zeros(f.shape, dy.dtype)
            np.add.at(out, (kh, kw, ch), dy)
            return out
        # TF: a window with nothing taken sends its gradient to the clamped window start
        rows = np.where(taken, rows, np.maximum(y * sh - top, 0))
        cols = np.where(taken, cols, np.maximum(xx * sw - left, 0))
        out = np.zeros(x.shape, dy.dtype)
        np.add.at(out, (b, rows, cols, ch), dy)
        return out


@register
class Dilation2DBackpropInput(_DilationBackprop):
    pass


@register
class Dilation2DBackpropFilter(_DilationBackprop):
    to_filter = True


@register
class NthElement(Op):
    """The n-th smallest (reverse: largest) value along the last axis."""
    type_attrs = {"T": NUMBER}
    const_inputs = ("n",)

    def shapes(self, shapes, attrs):
        x, n = shapes[0], scalar(attrs, "n")
        if n < 0:                                                  # TF's checks and messages
            raise ValueError(f"n must be non-negative but is {n}")
        if len(x) < 1:
            raise ValueError(f"Input must be >= 1-D but is {len(x)}-D")
        if x[-1] <= n:
            raise ValueError(f"Input must have last dimension > n = {n}")
        return [tuple(x[:-1])]

    def compute(self, xs, attrs):
        n = scalar(attrs, "n")
        s = np.sort(xs[0], axis=-1)
        return s[..., -1 - n] if attrs.get("reverse", False) else s[..., n]


# ---- local response normalization --------------------------------------------------------------

def _lrn_attrs(attrs):
    return (int(attrs.get("depth_radius", 5)), F32(attrs.get("bias", 1.0)),
            F32(attrs.get("alpha", 1.0)), F32(attrs.get("beta", 0.5)))


def _band(depth, radius):
    """[depth, depth] 0/1: whether k lies in the window [d - radius, d + radius] of d."""
    d = np.arange(depth)
    return (np.abs(d[:, None] - d[None, :]) <= radius).astype(np.float64)


def _lrn_norm(x, attrs):
    """bias + alpha * the window sums of x^2 (float32 squares), as TF's band-matrix product: an
    inf square meets the band's zeros outside its window (NaN there), a NaN reaches every
    position. (TF's kernel sums by a sliding window past depth 384 with beta 0.5 or 1: see
    nn_extra.cc.)"""
    radius, bias, alpha, _ = _lrn_attrs(attrs)
    sq = np.square(x.astype(F32)).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        sums = (sq[..., :, None] * _band(x.shape[-1], radius)).sum(axis=-2).astype(F32)
        return sums * alpha + bias


def _window_terms(depth, radius):
    """For each offset o of a window: (ok, j), j = k - o the position whose window holds k
    (clipped into range) and ok whether it exists."""
    k = np.arange(depth)
    return [((k - o >= 0) & (k - o < depth), np.clip(k - o, 0, depth - 1))
            for o in range(-radius, radius + 1)]


def _check_4d(what, shape):
    if len(shape) != 4:
        raise ValueError(f"in must be 4-dimensional, got {list(shape)}")          # TF's message


@register
class LRN(Op):
    """x / (bias + alpha * sum of x^2 over depth_radius neighbours in depth) ** beta (NHWC)."""
    type_attrs = {"T": (dt.DT_FLOAT, dt.DT_HALF)}

    def shapes(self, shapes, attrs):
        _check_4d(self.name, shapes[0])
        return [shapes[0]]

    def compute(self, xs, attrs):
        beta = _lrn_attrs(attrs)[3]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return xs[0] * np.exp(np.log(_lrn_norm(xs[0], attrs)) * -beta)


@register
class LRNGrad(Op):
    """(input_grads, input_image, output_image) -> d(input): TF's loop, for each depth position
    j and each k in its window, dx[k] += g[j] * (-2 alpha beta x[k] y[j] / norm[j], plus
    norm[j]^-beta where k == j)."""
    type_attrs = {"T": (dt.DT_FLOAT, dt.DT_HALF)}

    def shapes(self, shapes, attrs):
        _check_4d(self.name, shapes[0])
        check_same_shapes(self.name, shapes)
        return [shapes[0]]

    def compute(self, xs, attrs):
        g, x, y = (a.astype(np.float64) for a in xs)
        radius, bias, alpha, beta = (float(v) for v in _lrn_attrs(attrs))
        dx, norm = np.zeros_like(x), np.zeros_like(x)
        terms = _window_terms(x.shape[-1], int(radius))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            for ok, j in terms:
                norm += np.where(ok, np.square(x[..., j]), 0)
            norm = alpha * norm + bias
            for ok, j in terms:
                dx += np.where(ok, -2 * alpha * beta * x * y[..., j] / norm[..., j] * g[..., j], 0)
            return dx + g * norm ** -beta


# ---- fake quantization -------------------------------------------------------------------------

def _quant_range(attrs):
    num_bits = int(attrs.get("num_bits", 8))
    if not 2 <= num_bits <= 16:
        raise ValueError(f"num_bits must be between 2 and 16, inclusive, got {num_bits}")
    return (1 if attrs.get("narrow_range", False) else 0), (1 << num_bits) - 1


def _nudge(lo, hi, attrs):
    """TF's Nudge in float32, per element of lo/hi: (nudged_min, nudged_max, scale, inv_scale),
    the range moved so that 0 is exactly representable."""
    qmin, qmax = _quant_range(attrs)
    lo, hi = np.asarray(lo, F32), np.asarray(hi, F32)
    steps = F32(qmax - qmin)
    scale, inv = (hi - lo) / steps, steps / (hi - lo)
    zero = F32(qmin) - lo / scale
    rounded = np.floor(zero.astype(np.float64) + 0.5).astype(F32)   # std::round: zero >= qmin
    # a NaN zero point (min -inf) converts to TF's uint16_t as x86 truncates it: to 0
    zp = np.where(zero < qmin, F32(qmin), np.where(zero > qmax, F32(qmax),
                                                   np.where(np.isnan(zero), F32(0), rounded)))
    return (F32(qmin) - zp) * scale, (F32(qmax) - zp) * scale, scale, inv


def _clamp(x, lo, hi):
    """std::max(std::min(x, hi), lo), as Eigen's cwiseMin/cwiseMax: a NaN bound leaves x as it
    is, a NaN x stays NaN."""
    with np.errstate(invalid="ignore"):
        return np.where(x < lo, lo, np.where(hi < x, hi, x))


def _zero_range(lo, hi):
    """As TF's Vars kernels: a range of [0, 0] quantizes everything to 0 and passes the whole
    gradient to the input."""
    return (np.asarray(lo) == 0) & (np.asarray(hi) == 0)


def _fake_quant(x, lo, hi, attrs, divide=False):
    """TF's functors' float32 arithmetic: steps counted from the nudged min, less the zero's
    step; the scalar Vars kernel divides by scale where the others multiply by its inverse."""
    nmin, nmax, scale, inv = _nudge(lo, hi, attrs)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        zero_step = np.floor(-nmin * inv + F32(0.5))
        clamped = _clamp(x, nmin, nmax)
        steps = (clamped - nmin) / scale if divide else (clamped - nmin) * inv
        y = (np.floor(steps - zero_step + F32(0.5)) * scale).astype(F32)
    return np.where(_zero_range(lo, hi), F32(0), y)


def _fake_quant_grad(g, x, lo, hi, attrs, reduce_axes):
    """(d input, d min, d max): the gradient passes inside the nudged range; below it goes to
    min, above it to max (summed over `reduce_axes`); TF's g * 0/1 masks, so NaN stays NaN."""
    nmin, nmax, _, _ = _nudge(lo, hi, attrs)
    zero = _zero_range(lo, hi)
    with np.errstate(invalid="ignore"):
        inside = np.where(zero, F32(1), ((x >= nmin) & (x <= nmax)).astype(F32))
        below = np.where(zero, F32(0), (x < nmin).astype(F32))
        above = np.where(zero, F32(0), (x > nmax).astype(F32))
        return (g * inside, np.sum(g * below, axis=reduce_axes, dtype=np.float64).astype(F32),
                np.sum(g * above, axis=reduce_axes, dtype=np.float64).astype(F32))


def _args_range(attrs):
    lo, hi = float(attrs.get("min", -6.0)), float(attrs.get("max", 6.0))
    if not lo < hi:
        raise ValueError(f"min has to be smaller than max, was: {lo} >= {hi}")
    return lo, hi


@register
class FakeQuantWithMinMaxArgs(Op):
    def shapes(self, shapes, attrs):
        _args_range(attrs)
        _quant_range(attrs)
        return [shapes[0]]

    def compute(self, xs, attrs):
        return _fake_quant(xs[0], *_args_range(attrs), attrs)


@register
class FakeQuantWithMinMaxArgsGradient(Op):
    def shapes(self, shapes, attrs):
        _args_range(attrs)
        _quant_range(attrs)
        check_same_shapes(self.name, shapes)
        return [shapes[0]]

    def compute(self, xs, attrs):
        return _fake_quant_grad(*xs, *_args_range(attrs), attrs, None)[0]


def _check_min_max(what, shapes, per_channel):
    """Vars: min and max scalars; PerChannel: [d] each, d the input's last dimension."""
    x, lo, hi = shapes[:3]
    want = (x[-1],) if per_channel and x else ()
    if per_channel and not x:
        raise ValueError(f"{what}: inputs must be at least 1-D, got {list(x)}")
    for name, s in (("min", lo), ("max", hi)):
        if tuple(s) != want:
            raise ValueError(f"{what}: {name} must have shape {list(want)}, got {list(s)}")
    return want


@register
class FakeQuantWithMinMaxVars(Op):
    """(inputs, min, max): the range is a scalar input each."""
    per_channel = False

    def shapes(self, shapes, attrs):
        _quant_range(attrs)
        _check_min_max(self.name, shapes, self.per_channel)
        return [shapes[0]]

    def compute(self, xs, attrs):
        return _fake_quant(*xs, attrs, divide=not self.per_channel)


@register
class FakeQuantWithMinMaxVarsPerChannel(FakeQuantWithMinMaxVars):
    """(inputs [..., d], min [d], max [d]): one range per position of the last axis."""
    per_channel = True


@register
class FakeQuantWithMinMaxVarsGradient(Op):
    """(gradients, inputs, min, max) -> (d inputs, d min, d max)."""
    per_channel = False

    def shapes(self, shapes, attrs):
        _quant_range(attrs)
        check_same_shapes(self.name, shapes[:2])
        r = _check_min_max(self.name, shapes[1:], self.per_channel)
        return [shapes[0], r, r]

    def compute(self, xs, attrs):
        g = xs[0]
        axes = tuple(range(g.ndim - 1)) if self.per_channel else None
        return _fake_quant_grad(*xs, attrs, axes)


@register
class FakeQuantWithMinMaxVarsPerChannelGradient(FakeQuantWithMinMaxVarsGradient):
    per_channel = True


# ---- quantize and dequantize -------------------------------------------------------------------

def _qdq_bits(attrs):
    num_bits = scalar(attrs, "num_bits") if "num_bits" in attrs else 8   # V3: an input
    signed = bool(attrs.get("signed_input", True))
    if not 0 < num_bits < (62 if signed else 63):
        raise ValueError(f"num_bits is out of range: {num_bits} with signed_input_ {signed}")
    if signed:
        narrow = bool(attrs.get("narrow_range", False))
        return -(1 << (num_bits - 1)) + narrow, (1 << (num_bits - 1)) - 1
    return 0, (1 << num_bits) - 1


def _qdq_axis(what, shapes, attrs, scalar_range=False):
    """The quantization axis (None: one range for the tensor), min/max shapes checked.
    `scalar_range`: TF's V2/V4 kernels take a given range only as scalars, whatever the axis."""
    x = shapes[0]
    axis = int(attrs.get("axis", -1))
    if scalar_range and attrs.get("range_given", False) and (axis != -1 or shapes[1] != ()):
        raise ValueError("input_min must be a scalar.")
    if axis < -1:
        raise ValueError(f"Axis must be at least -1. Found {axis}")
    if axis >= len(x):
        raise ValueError(f"Axis requested is larger than input dimensions. Axis: {axis}, Input "
                         f"Dimensions: {len(x)}")
    want = () if axis == -1 else (x[axis],)
    for name, s in (("input_min", shapes[1]), ("input_max", shapes[2])):
        if tuple(s) != want:
            raise ValueError(f"{what}: {name} must have shape {list(want)}, got {list(s)}")
    return None if axis == -1 else axis


def _round_mode(attrs):
    mode = attrs.get("round_mode", "HALF_TO_EVEN")
    if mode not in ("HALF_TO_EVEN", "HALF_UP"):
        raise ValueError(f"Round mode string must be 'HALF_UP' or 'HALF_TO_EVEN', is '{mode}'")
    return mode


def _channels_last(x, axis):
    return x if axis is None else np.moveaxis(x, axis, -1)


def _scalar_extremes(values, lo, hi):
    """Eigen's scalar min/max loop: a NaN replaces the running extreme, the next number a NaN."""
    for t in values:
        lo, hi = (lo if lo < t else t), (hi if t < hi else t)
    return lo, hi


def _input_range(x, axis):
    """The input's own range as TF's Eigen reductions find it (see fake_quant.cc): per channel
    the scalar loop in memory order; per tensor 8-wide NaN-skipping packets over the leading
    multiple of 8 elements and the scalar loop over the rest, a NaN from it winning."""
    big = np.finfo(F32).max
    if axis is not None:
        v = x.reshape(int(np.prod(x.shape[:axis])), x.shape[axis],      # [outer, C, inner]
                      int(np.prod(x.shape[axis + 1:])))
        rows = [_scalar_extremes(v[:, c, :].reshape(-1), big, -big) for c in range(x.shape[axis])]
        return np.array([r[0] for r in rows], F32), np.array([r[1] for r in rows], F32)
    flat = x.reshape(-1)
    head = flat[:flat.size // 8 * 8]
    packets = head[~np.isnan(head)]
    lo, hi = _scalar_extremes(flat[head.size:], big, -big)
    lo = lo if np.isnan(lo) else min(lo, packets.min(initial=big))
    hi = hi if np.isnan(hi) else max(hi, packets.max(initial=-big))
    return F32(lo), F32(hi)


@register
class QuantizeAndDequantizeV2(Op):
    """(input, input_min, input_max): input quantized to num_bits integers and back, with TF's
    range adjustment (the scale fixed by the side of the range that limits it, 0 exact); the
    range is the input's own (per `axis` channel) unless range_given."""
    type_attrs = {"T": (dt.DT_FLOAT,)}
    scalar_range = True
    checks_values = True     # a given range, even for an empty input

    def shapes(self, shapes, attrs):
        _qdq_bits(attrs)
        _round_mode(attrs)
        _qdq_axis(self.name, shapes, attrs, self.scalar_range)
        return [shapes[0]]

    def compute(self, xs, attrs):
        x, lo, hi = xs
        axis = _qdq_axis(self.name, [a.shape for a in xs], attrs)
        qmin, qmax = _qdq_bits(attrs)
        v = _channels_last(x, axis)
        given = bool(attrs.get("range_given", False))
        if not given:
            lo, hi = _input_range(x, axis)
        elif axis is None and not lo <= hi:      # as TF: one scalar pair only; NaN fails
            raise ValueError(f"Invalid range: input_min {lo} > input_max {hi}")
        lo, hi = np.asarray(lo, F32), np.asarray(hi, F32)
        big = np.finfo(F32).max
        with np.errstate(divide="ignore", invalid="ignore"):
            from_min = np.where(qmin * lo > 0, F32(qmin) / lo, big)
            from_max = np.where(qmax * hi > 0, F32(qmax) / hi, big)
            use_min = from_min < from_max
            scale = np.where(use_min, from_min, from_max).astype(F32)
            inv = np.where(use_min, lo / F32(qmin or 1), hi / F32(qmax)).astype(F32)
        lo = np.where(use_min, lo, F32(qmin) * inv)
        hi = np.where(use_min, F32(qmax) * inv, hi)
        if given:
            v = _clamp(v, lo, hi)
        v = v * scale
        v = np.rint(v) if _round_mode(attrs) == "HALF_TO_EVEN" else np.floor(v + F32(0.5))
        return _channels_last(v * inv, axis)


@register
class QuantizeAndDequantizeV4(QuantizeAndDequantizeV2):
    """V2 with a gradient that is zero outside [input_min, input_max]."""


@register
class QuantizeAndDequantizeV3(QuantizeAndDequantizeV2):
    """V2 with num_bits an input (and round_mode HALF_TO_EVEN); a given range may be per axis."""
    const_inputs = ("num_bits",)
    scalar_range = False


@register
class QuantizeAndDequantizeV4Grad(Op):
    """(gradients, input, input_min, input_max) -> the gradient where input lies in
    [input_min, input_max] (per `axis` channel), and zeros for the range."""
    type_attrs = {"T": (dt.DT_FLOAT,)}

    def shapes(self, shapes, attrs):
        check_same_shapes(self.name, shapes[:2])
        _qdq_axis(self.name, shapes[1:], attrs)
        return [shapes[0], shapes[2], shapes[3]]

    def compute(self, xs, attrs):
        g, x, lo, hi = xs
        axis = _qdq_axis(self.name, [a.shape for a in xs[1:]], attrs)
        v = _channels_last(x, axis)
        inside = _channels_last((v >= lo) & (v <= hi), axis)
        return g * inside.astype(F32), np.zeros_like(lo), np.zeros_like(hi)   # NaN g stays NaN


# ---- fused batch norm --------------------------------------------------------------------------
# x and y are T, the per-channel values U (float32). Reserve spaces as TF's (Eigen) CPU kernel
# fills them: 1 and 2 the mean and (population) variance the gradient reads, V3's 3 a zero
# scalar; the gradients' last two outputs are empty placeholders.

_BN_FORMATS = {"NHWC": 3, "NCHW": 1, "NDHWC": 4, "NCDHW": 1}     # -> the channel axis


def _bn_axis(what, attrs, shape):
    fmt = attrs.get("data_format", "NHWC")
    if fmt not in _BN_FORMATS or len(shape) != len(fmt):
        raise ValueError(f"{what}: x {list(shape)} does not match data_format {fmt}")
    return _BN_FORMATS[fmt]


def _bn_check(what, channels, named):
    for name, s in named:
        if tuple(s) != (channels,):                                # TF's message
            raise ValueError(f"{name} must have the same number of elements as the channels of "
                             f"x, got {int(np.prod(s))} and {channels}")


def _per_channel(x, axis):
    """x as [rows, channels] (float64) and the function that puts such a matrix back."""
    moved = np.moveaxis(x, axis, -1)
    back = lambda m: np.moveaxis(m.reshape(moved.shape), -1, axis)
    return moved.reshape(-1, moved.shape[-1]).astype(np.float64), back


def _bn_epsilon(attrs):
    return float(F32(attrs.get("epsilon", 1e-4)))


@register
class FusedBatchNorm(Op):
    """(x, scale, offset, mean, variance) -> (y, batch_mean, batch_variance, reserve_space_1,
    reserve_space_2[, reserve_space_3]). Training: normalized with the batch's moments, the
    running mean/variance (sample variance) blended by exponential_avg_factor; inference:
    with the given mean and variance, which are passed through."""
    mixlist = "gray"
    type_attrs = {"T": (dt.DT_FLOAT,)}
    reserve_3 = False

    def shapes(self, shapes, attrs):
        axis = _bn_axis(self.name, attrs, shapes[0])
        c = shapes[0][axis]
        _bn_check(self.name, c, [("scale", shapes[1]), ("offset", shapes[2])])
        training = attrs.get("is_training", True)
        if not (training and float(attrs.get("exponential_avg_factor", 1.0)) == 1.0
                and all(int(np.prod(s)) == 0 for s in shapes[3:5])):   # unused then: may be empty
            _bn_check(self.name, c, [("mean", shapes[3]), ("variance", shapes[4])])
        return [shapes[0]] + [(c,)] * 4 + ([()] if self.reserve_3 else [])

    def compute(self, xs, attrs):
        x, scale, offset, old_mean, old_var = xs
        m, back = _per_channel(x, _bn_axis(self.name, attrs, x.shape))
        if attrs.get("is_training", True):
            mean, var = m.mean(axis=0), np.square(m - m.mean(axis=0)).mean(axis=0)
            f = float(attrs.get("exponential_avg_factor", 1.0))
            adjust = len(m) / max(len(m) - 1, 1)
            run_mean = mean if f == 1 else (1 - f) * old_mean + f * mean
            run_var = var * adjust if f == 1 else (1 - f) * old_var + f * adjust * var
        else:
            mean, var = old_mean.astype(np.float64), old_var.astype(np.float64)
            run_mean, run_var = mean, var
        y = (m - mean) / np.sqrt(var + _bn_epsilon(attrs)) * scale + offset
        if not m.size:    # as TF: an empty x's moments are NaN (TF leaves 3 and 4 unwritten)
            run_mean = run_var = mean = var = np.full(scale.shape, np.nan, F32)
        return [back(y), run_mean, run_var, mean, var] + ([F32(0)] if self.reserve_3 else [])


@register
class FusedBatchNormV2(FusedBatchNorm):
    type_attrs = {"T": FLOAT, "U": (dt.DT_FLOAT,)}


@register
class FusedBatchNormV3(FusedBatchNormV2):
    reserve_3 = True


@register
class FusedBatchNormGrad(Op):
    """(y_backprop, x, scale, reserve_space_1, reserve_space_2[, reserve_space_3]) ->
    (x_backprop, scale_backprop, offset_backprop, two empty placeholders). Training: the
    reserve spaces are the batch's mean and variance, through which x's gradient also flows;
    inference: the population mean and variance (constants)."""
    mixlist = "gray"
    type_attrs = {"T": (dt.DT_FLOAT,)}

    def shapes(self, shapes, attrs):
        check_same_shapes(self.name, shapes[:2])
        axis = _bn_axis(self.name, attrs, shapes[1])
        if not attrs.get("is_training", True) and axis == 1:        # TF's CPU kernel
            raise ValueError("The implementation of FusedBatchNormGrad with is_training=False only "
                             "support NHWC tensor format for now.")
        c = shapes[1][axis]
        _bn_check(self.name, c, [("scale", shapes[2]), ("reserve_space_1", shapes[3]),
                                 ("reserve_space_2", shapes[4])])
        return [shapes[0], (c,), (c,), (0,), (0,)]

    def compute(self, xs, attrs):
        dy, x, scale, mean, var = xs[:5]
        axis = _bn_axis(self.name, attrs, x.shape)
        (g, back), (m, _) = _per_channel(dy, axis), _per_channel(x, axis)
        inv = 1 / np.sqrt(var.astype(np.float64) + _bn_epsilon(attrs))
        centered = m - mean
        d_offset, d_scale = g.sum(axis=0), (g * centered).sum(axis=0) * inv
        if not g.size:    # as TF: an empty batch's gradients are zeros, whatever the variance
            d_scale = np.zeros_like(d_offset)
        if attrs.get("is_training", True):
            dx = scale * inv * (g - g.mean(axis=0) - centered * inv * inv * (g * centered).mean(axis=0))
        else:
            dx = g * scale * inv
        empty = np.zeros(0, F32)
        return [back(dx), d_scale, d_offset, empty, empty]


@register
class FusedBatchNormGradV2(FusedBatchNormGrad):
    type_attrs = {"T": FLOAT, "U": (dt.DT_FLOAT,)}


@register
class FusedBatchNormGradV3(FusedBatchNormGradV2):
    def shapes(self, shapes, attrs):
        return super().shapes(shapes[:5], attrs)
