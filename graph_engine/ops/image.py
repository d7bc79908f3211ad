"""Image ops (tf.image): crops, projective transforms (Keras RandomRotation/RandomZoom/
RandomTranslation), color conversions and adjustments, scale-and-translate resampling (resize
with antialias, lanczos, gaussian, mitchellcubic). Kernels: runtime/kernels/image.cc (crops,
transforms), runtime/kernels/image_color.cc and runtime/kernels/scale_translate.cc.

Positions are computed in float32 exactly as TF's CPU kernels compute them, so the pixels a
sample reads are TF's; scalar parameters that do not fix shapes (fill_value, delta, scale,
contrast_factor) are data inputs."""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import FLOAT, INT, NUMBER, Op, register
from graph_engine.ops.errors import OutOfRangeInputError

F32 = (dt.DT_FLOAT,)
CROP_T = (dt.DT_FLOAT, dt.DT_HALF) + INT     # TF's CropAndResize: no bfloat16


def _attr(attrs, name, default):
    v = attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


# ---- CropAndResize ------------------------------------------------------------------------------

def _check_boxes(what, boxes, box_ind):
    if len(boxes) != 2 or boxes[1] != 4:
        raise ValueError(f"{what}: boxes must be 2-D [num_boxes, 4], got {list(boxes)}")
    if len(box_ind) != 1 or box_ind[0] != boxes[0]:
        raise ValueError(f"{what}: box_ind must be 1-D [num_boxes = {boxes[0]}], got {list(box_ind)}")


def _check_method(what, attrs, allowed=("bilinear", "nearest")):
    if _attr(attrs, "method", "bilinear") not in allowed:
        raise ValueError(f"{what}: method must be {' or '.join(repr(m) for m in allowed)}, got "
                         f"{_attr(attrs, 'method', 'bilinear')!r}")


def _check_box_values(boxes, box_ind, batch):
    if not np.all(np.isfinite(boxes)):
        raise ValueError("Boxes contains at least one element that is not finite")
    if np.any((box_ind < 0) | (box_ind >= batch)):
        raise OutOfRangeInputError(f"box_index has values outside [0, batch_size = {batch})")


def nan_samples(boxes, h, w, ch, cw, ratio_form=False):
    """Whether a crop of boxes samples at a NaN position (a non-finite box coordinate; crops of
    ch x cw from an image of h x w). TF's CropAndResize gradients do not check the boxes: such a
    position passes their range check and indexes pixel floor(NaN), out of bounds (undefined), so
    the NPU raises InvalidArgumentError for it (tools/fuzz/ops.py TF_UNCHECKED)."""
    with np.errstate(all="ignore"):
        for y1, x1, y2, x2 in np.asarray(boxes, np.float32).reshape(-1, 4):
            py, px = _crop_positions(y1, y2, h, ch, ratio_form), _crop_positions(x1, x2, w, cw, ratio_form)
            ny, nx = np.isnan(py).any(), np.isnan(px).any()
            iy, ix = ((py >= 0) & (py <= h - 1)).any(), ((px >= 0) & (px <= w - 1)).any()
            if (ny and (nx or ix)) or (nx and iy):
                return True
    return False


def _check_grad_boxes(boxes, box_ind, batch, h, w, ch, cw, ratio_form=False):
    if nan_samples(boxes, h, w, ch, cw, ratio_form):
        raise ValueError("Boxes sample the image at NaN positions (a box coordinate is not finite)")
    if np.any((box_ind < 0) | (box_ind >= batch)):
        raise OutOfRangeInputError(f"box_index has values outside [0, batch_size = {batch})")


def _crop_positions(lo, hi, size, crop, ratio_form=False):
    """TF's sampling positions of one box along one axis (float32): lo * (size - 1) + i * scale,
    or the box's middle for a crop of 1. CropAndResizeGradBoxes computes scale as
    (hi - lo) * ((size - 1) / (crop - 1)), the others as (hi - lo) * (size - 1) / (crop - 1)."""
    f = np.float32
    if crop == 1:      # TF: 0.5 * (lo + hi) in double of the float32 sum
        return np.array([f(0.5 * float(f(lo) + f(hi)) * (size - 1))], np.float32)
    if ratio_form:
        scale = f(hi - lo) * (f(size - 1) / f(crop - 1))
    else:
        scale = f(f(hi - lo) * f(size - 1)) / f(crop - 1)
    i = np.arange(crop, dtype=np.float32)
    return (f(lo) * f(size - 1) + i * f(scale)).astype(np.float32)


def _crop_taps(pos, size):
    """(valid, low index, high index, weight of high) of sampling positions."""
    valid = (pos >= 0) & (pos <= size - 1)
    p = np.where(valid, pos, 0).astype(np.float32)
    lo = np.floor(p)
    return valid, lo.astype(np.int64), np.ceil(p).astype(np.int64), (p - lo).astype(np.float32)


def _nearest(pos, size):
    """roundf: half away from zero; positions outside [0, size - 1] (masked by the callers) read
    pixel 0."""
    inside = (pos >= 0) & (pos <= size - 1)
    return np.floor(np.where(inside, pos, 0).astype(np.float64) + 0.5).astype(np.int64)


@register
class CropAndResize(Op):
    """(image [B, H, W, D], boxes [N, 4] normalized (y1, x1, y2, x2), box_ind [N]) -> float32
    crops [N, crop_h, crop_w, D], sampled bilinearly or at the nearest pixel; samples outside the
    image are extrapolation_value."""
    type_attrs = {"T": CROP_T}
    const_inputs = ("crop_size",)

    def shapes(self, shapes, attrs):
        img, boxes, box_ind = shapes
        _check_method(self.name, attrs)
        if len(img) != 4:
            raise ValueError(f"{self.name}: input image must be 4-D, got {list(img)}")
        if img[1] <= 0 or img[2] <= 0:
            raise ValueError(f"{self.name}: image dimensions must be positive, got {list(img)}")
        _check_boxes(self.name, boxes, box_ind)
        crop = [int(v) for v in attrs["crop_size"]]
        if len(crop) != 2 or min(crop) <= 0:
            raise ValueError(f"{self.name}: crop dimensions must be positive, got {crop}")
        return [(boxes[0], *crop, img[3])]

    def compute(self, xs, attrs):
        img, boxes, box_ind = xs[0].astype(np.float32), xs[1], xs[2]
        _check_box_values(boxes, box_ind, img.shape[0])
        (ch, cw), (h, w) = [int(v) for v in attrs["crop_size"]], img.shape[1:3]
        out = np.full((len(boxes), ch, cw, img.shape[3]), np.float32(attrs.get("extrapolation_value", 0.0)),
                      np.float32)
        for n, ((y1, x1, y2, x2), b) in enumerate(zip(boxes, box_ind)):
            py, px = _crop_positions(y1, y2, h, ch), _crop_positions(x1, x2, w, cw)
            vy, y0, y1_, fy = _crop_taps(py, h)
            vx, x0, x1_, fx = _crop_taps(px, w)
            if _attr(attrs, "method", "bilinear") == "nearest":
                val = img[b][_nearest(py, h)][:, _nearest(px, w)]
            else:
                fx_ = fx[None, :, None]
                top = img[b][y0][:, x0] + (img[b][y0][:, x1_] - img[b][y0][:, x0]) * fx_
                bottom = img[b][y1_][:, x0] + (img[b][y1_][:, x1_] - img[b][y1_][:, x0]) * fx_
                val = top + (bottom - top) * fy[:, None, None]
            mask = (vy[:, None] & vx[None, :])[:, :, None]
            out[n] = np.where(mask, val, out[n])
        return out


@register
class CropAndResizeGradImage(Op):
    """(grads [N, crop_h, crop_w, D] float32, boxes, box_ind) -> the gradient for the image
    [image_size], in T: each crop gradient goes back to the pixels its sample read."""
    type_attrs = {"T": (dt.DT_FLOAT, dt.DT_HALF)}
    const_inputs = ("image_size",)

    def shapes(self, shapes, attrs):
        g, boxes, box_ind = shapes
        _check_method(self.name, attrs)
        if len(g) != 4:
            raise ValueError(f"{self.name}: grads image must be 4-D, got {list(g)}")
        if g[1] <= 0 or g[2] <= 0:
            raise ValueError(f"{self.name}: grads dimensions must be positive, got {list(g)}")
        _check_boxes(self.name, boxes, box_ind)
        if g[0] != boxes[0]:
            raise ValueError(f"{self.name}: boxes and grads have incompatible shape")
        size = [int(v) for v in attrs["image_size"]]
        if len(size) != 4:
            raise ValueError(f"{self.name}: image_size must have 4 elements, got {size}")
        if size[1] <= 0 or size[2] <= 0:
            raise ValueError(f"{self.name}: image dimensions must be positive, got {size}")
        if size[3] != g[3]:
            raise ValueError(f"{self.name}: image_size and grads are incompatible")
        if size[0] == 0 and boxes[0] > 0:       # the empty result skips the kernel's check
            raise ValueError(f"{self.name}: box_index has values outside [0, batch_size = 0)")
        return [tuple(size)]

    def compute(self, xs, attrs):
        g, boxes, box_ind = xs
        size = [int(v) for v in attrs["image_size"]]
        (h, w), (ch, cw) = size[1:3], g.shape[1:3]
        _check_grad_boxes(boxes, box_ind, size[0], h, w, ch, cw)
        out = np.zeros(size, np.float64)
        for n, ((y1, x1, y2, x2), b) in enumerate(zip(boxes, box_ind)):
            py, px = _crop_positions(y1, y2, h, ch), _crop_positions(x1, x2, w, cw)
            vy, y0, y1_, fy = _crop_taps(py, h)
            vx, x0, x1_, fx = _crop_taps(px, w)
            gm = g[n] * (vy[:, None] & vx[None, :])[:, :, None]
            if _attr(attrs, "method", "bilinear") == "nearest":
                taps = [(_nearest(py, h), _nearest(px, w), np.ones_like(fy), np.ones_like(fx))]
            else:
                taps = [(ys, xs_, wy, wx) for ys, wy in ((y0, 1 - fy), (y1_, fy))
                        for xs_, wx in ((x0, 1 - fx), (x1_, fx))]
            for ys, xs_, wy, wx in taps:
                np.add.at(out[b], (ys[:, None], xs_[None, :]), gm * (wy[:, None] * wx[None, :])[:, :, None])
        return out.astype(np.float32)


@register
class CropAndResizeGradBoxes(Op):
    """(grads [N, crop_h, crop_w, D] float32, image, boxes, box_ind) -> d loss / d boxes [N, 4]
    float32, of bilinear sampling (TF uses it for "nearest" crops too)."""
    type_attrs = {"T": CROP_T}

    def shapes(self, shapes, attrs):
        g, img, boxes, box_ind = shapes
        _check_method(self.name, attrs, ("bilinear",))
        if len(g) != 4 or g[1] <= 0 or g[2] <= 0:
            raise ValueError(f"{self.name}: grads must be 4-D with positive dimensions, got {list(g)}")
        if len(img) != 4 or img[1] <= 0 or img[2] <= 0:
            raise ValueError(f"{self.name}: input image must be 4-D with positive dimensions, got "
                             f"{list(img)}")
        if img[3] != g[3]:
            raise ValueError(f"{self.name}: image, grads depth differ")
        _check_boxes(self.name, boxes, box_ind)
        if g[0] != boxes[0]:
            raise ValueError(f"{self.name}: boxes and grads have incompatible shape")
        return [(boxes[0], 4)]

    def compute(self, xs, attrs):
        g, img, boxes, box_ind = xs[0], xs[1].astype(np.float32), xs[2], xs[3]
        (h, w), (ch, cw) = img.shape[1:3], g.shape[1:3]
        _check_grad_boxes(boxes, box_ind, img.shape[0], h, w, ch, cw, True)
        out = np.zeros((len(boxes), 4), np.float64)
        for n, ((y1, x1, y2, x2), b) in enumerate(zip(boxes, box_ind)):
            vy, y0, y1_, fy = _crop_taps(_crop_positions(y1, y2, h, ch, True), h)
            vx, x0, x1_, fx = _crop_taps(_crop_positions(x1, x2, w, cw, True), w)
            tl, tr = img[b][y0][:, x0], img[b][y0][:, x1_]
            bl, br = img[b][y1_][:, x0], img[b][y1_][:, x1_]
            fy_, fx_ = fy[:, None, None], fx[None, :, None]
            mask = (vy[:, None] & vx[None, :])[:, :, None]
            gy = ((1 - fx_) * (bl - tl) + fx_ * (br - tr)) * g[n] * mask
            gx = ((1 - fy_) * (tr - tl) + fy_ * (br - bl)) * g[n] * mask
            # d position / d (lo, hi) per crop row and column
            for axis, grad, size, crop, (i_lo, i_hi) in ((0, gy, h, ch, (0, 2)), (1, gx, w, cw, (1, 3))):
                s = grad.sum(axis=(1, 2) if axis == 0 else (0, 2))
                if crop > 1:
                    ratio = np.float32(size - 1) / np.float32(crop - 1)
                    i = np.arange(crop) * ratio
                    out[n, i_lo] += np.sum(s * (size - 1 - i))
                    out[n, i_hi] += np.sum(s * i)
                else:
                    out[n, i_lo] += np.sum(s) * 0.5 * (size - 1)
                    out[n, i_hi] += np.sum(s) * 0.5 * (size - 1)
        return out.astype(np.float32)


# ---- ImageProjectiveTransformV2/V3 ---------------------------------------------------------------

_I64_MIN = np.iinfo(np.int64).min


def _to_index(v, bits=64):
    """DenseIndex(v) (int(v) for bits=32) of float32 values as TF's x86 build computes it
    (cvttss2si): truncation; the integer minimum for NaN and out-of-range values."""
    v = np.asarray(v, np.float32)
    ok = (v >= np.float32(-2.0 ** (bits - 1))) & (v < np.float32(2.0 ** (bits - 1)))
    return np.where(ok, np.where(ok, v, 0).astype(np.int64), np.iinfo(f"int{bits}").min)


def _wrap_mul(n, i):
    """float(n * i) in wrapping DenseIndex arithmetic."""
    with np.errstate(over="ignore"):
        return (np.int64(n) * i).astype(np.float32)


def _map_coordinate(c, n, mode):
    """TF's MapCoordinate (scipy's ndimage modes) of float32 coordinates along an axis of n, in
    its mixed float32 / DenseIndex arithmetic (huge and infinite coordinates too); NaN stays."""
    f = np.float32
    c = c.astype(np.float32)
    if mode == "CONSTANT":
        return c
    out = c.copy()
    with np.errstate(all="ignore"):
        if mode in ("REFLECT", "WRAP") and n <= 1:
            out[(c < 0) | (c > n - 1)] = 0
        elif mode == "REFLECT":
            sz2 = 2 * n
            neg = c < 0
            v = _wrap_mul(sz2, _to_index(-c[neg] / f(sz2))) + c[neg]
            out[neg] = np.where(v < -n, v + f(sz2), -v - f(1))
            pos = c > n - 1
            v = c[pos] - _wrap_mul(sz2, _to_index(c[pos] / f(sz2)))
            out[pos] = np.where(v >= n, f(sz2) - v - f(1), v)
        elif mode == "WRAP":
            neg = c < 0
            out[neg] = c[neg] + _wrap_mul(n, _to_index(-c[neg] / f(n - 1)) + 1)
            pos = c > n - 1
            out[pos] = c[pos] - _wrap_mul(n, _to_index(c[pos] / f(n - 1)))
    return np.minimum(np.maximum(out, f(0)), f(n - 1))      # NaN stays NaN, as std::max / min


def projective_transform(images, transforms, out_hw, interpolation, mode, fill):
    """out[b, y, x] = images[b] sampled at the transform of (x, y): (a0 x + a1 y + a2) / k,
    (b0 x + b1 y + b2) / k with k = c0 x + c1 y + 1, mapped into the image by the fill mode;
    fill_value where k is 0, and for reads outside the image (CONSTANT mode: a bilinear sample
    near the edge blends its inside neighbors with it, as TF 2.21). In float32 as TF: a NaN
    coordinate samples NaN (bilinear) or fill_value (nearest); integer results convert as T()."""
    f = np.float32
    n, h, w, c = images.shape
    oh, ow = out_hw
    integer = np.issubdtype(images.dtype, np.integer)
    out = np.empty((n, oh, ow, c), images.dtype if integer else np.float32)
    yy, xx = np.meshgrid(np.arange(oh, dtype=np.float32), np.arange(ow, dtype=np.float32), indexing="ij")

    def read(img, y, x):
        inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
        v = img[np.where(inside, y, 0), np.where(inside, x, 0)]
        return np.where(inside[..., None], v, np.asarray(fill).astype(img.dtype))

    for b in range(n):
        t = transforms[0 if len(transforms) == 1 else b].astype(np.float32)
        with np.errstate(all="ignore"):
            k = t[6] * xx + t[7] * yy + f(1)
            # flushed to (signed) zero when denormal, as TF's and the NPU's float unit do
            ftz = lambda v: np.where(np.abs(v) < np.finfo(np.float32).tiny, v * f(0), v)  # noqa: E731
            x = _map_coordinate(ftz((t[0] * xx + t[1] * yy + t[2]) / k), w, mode)
            y = _map_coordinate(ftz((t[3] * xx + t[4] * yy + t[5]) / k), h, mode)
            if interpolation == "NEAREST":
                r = lambda v: np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)  # noqa: E731
                val = read(images[b], _to_index(r(y)), _to_index(r(x)))
            else:
                img = images[b].astype(np.float32)
                y0, x0 = np.floor(y), np.floor(x)
                y1, x1 = y0 + f(1), x0 + f(1)
                iy0, ix0, iy1, ix1 = (_to_index(v) for v in (y0, x0, y1, x1))
                wx0, wx1, wy0, wy1 = ((v)[..., None] for v in (x1 - x, x - x0, y1 - y, y - y0))
                val = (wy0 * (wx0 * read(img, iy0, ix0) + wx1 * read(img, iy0, ix1)) +
                       wy1 * (wx0 * read(img, iy1, ix0) + wx1 * read(img, iy1, ix1)))
                if integer:
                    val = _to_index(val, images.dtype.itemsize * 8)
        out[b] = np.where((k == 0)[..., None], np.asarray(fill).astype(out.dtype), val)
    return out


class _ProjectiveTransform(Op):
    type_attrs = {"dtype": (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16) + INT}
    const_inputs = ("output_shape",)

    def shapes(self, shapes, attrs):
        img, t = shapes[:2]
        if len(img) != 4:
            raise ValueError(f"{self.name}: Input images must have rank 4, got {list(img)}")
        if len(t) != 2 or t[1] != 8 or t[0] not in (1, img[0]):
            raise ValueError(f"{self.name}: Input transform should be num_images x 8 or 1 x 8, got "
                             f"{list(t)}")
        if _attr(attrs, "interpolation", "") not in ("NEAREST", "BILINEAR"):
            raise ValueError(f"{self.name}: Invalid interpolation {_attr(attrs, 'interpolation', '')}")
        if _attr(attrs, "fill_mode", "CONSTANT") not in ("REFLECT", "WRAP", "CONSTANT", "NEAREST"):
            raise ValueError(f"{self.name}: Invalid fill_mode {_attr(attrs, 'fill_mode', '')}")
        size = [int(v) for v in attrs["output_shape"]]
        if len(size) != 2 or min(size) <= 0:
            raise ValueError(f"{self.name}: output shape must be 2 positive ints, got {size}")
        return [(img[0], *size, img[3])]

    def compute(self, xs, attrs):
        fill = np.float32(xs[2] if len(xs) > 2 else 0.0)
        if np.issubdtype(xs[0].dtype, np.integer):        # TF's T(fill_value)
            fill = _to_index(fill, xs[0].dtype.itemsize * 8)
        return projective_transform(xs[0], xs[1], [int(v) for v in attrs["output_shape"]],
                                    _attr(attrs, "interpolation", ""), _attr(attrs, "fill_mode", "CONSTANT"),
                                    fill)


@register
class ImageProjectiveTransformV2(_ProjectiveTransform):
    pass


@register
class ImageProjectiveTransformV3(_ProjectiveTransform):
    """V2 with fill_value (a float32 scalar input): the value of samples outside the image."""

    def shapes(self, shapes, attrs):
        if len(shapes[2]) != 0:
            raise ValueError(f"{self.name}: fill_value must be a scalar, got {list(shapes[2])}")
        return super().shapes(shapes, attrs)


# ---- color ----------------------------------------------------------------------------------------

def _check_rgb(what, shape, min_rank=1):
    if len(shape) < min_rank:
        raise ValueError(f"{what}: input must be at least {min_rank}-D, got {list(shape)}")
    if shape[-1] != 3:
        raise ValueError(f"{what}: input must have 3 channels but instead has "
                         f"{shape[-1] if shape else 0} channels.")


def _check_scalar(what, name, shape):
    if len(shape) != 0:
        raise ValueError(f"{what}: {name} must be scalar: {list(shape)}")


def rgb_to_hsv(x):
    """TF's RGBToHSV (colorspace_op.h), in float32: h, s, v in [0, 1]."""
    f = np.float32
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    # TF's channel max/min fold acc = std::max(t, acc): a NaN replaces acc, a later number a NaN
    v, lo = r, r
    for c in (g, b):
        v = np.where(c < v, v, c)
        lo = np.where(lo < c, lo, c)
    rng = v - lo
    with np.errstate(all="ignore"):
        s = np.where(v > 0, rng / v, f(0))
        norm = (f(1) / rng) * (f(1) / f(6))
        h = np.where(r == v, norm * (g - b),
                     np.where(g == v, norm * (b - r) + f(2) / f(6), norm * (r - g) + f(4) / f(6)))
    h = np.where(rng > 0, h, f(0))
    h = np.where(h < 0, h + f(1), h)
    return np.stack([h, s, v], axis=-1).astype(np.float32)


def hsv_to_rgb(x):
    """TF's HSVToRGB (colorspace_op.h), in float32."""
    f = np.float32
    h, s, v = x[..., 0], x[..., 1], x[..., 2]
    dh = h * f(6)
    dr = np.clip(np.abs(dh - f(3)) - f(1), 0, 1)
    dg = np.clip(-np.abs(dh - f(2)) + f(2), 0, 1)
    db = np.clip(-np.abs(dh - f(4)) + f(2), 0, 1)
    one_s = -s + f(1)
    return np.stack([(one_s + s * d) * v for d in (dr, dg, db)], axis=-1).astype(np.float32)


class _Color(Op):
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        _check_rgb(self.name, shapes[0])
        return [tuple(shapes[0])]


@register
class RGBToHSV(_Color):
    def compute(self, xs, attrs):
        return rgb_to_hsv(xs[0].astype(np.float32))


@register
class HSVToRGB(_Color):
    def compute(self, xs, attrs):
        return hsv_to_rgb(xs[0].astype(np.float32))


def _hv_range(p):
    """TF's AdjustHue rgb_to_hv_range per pixel: hue in [0, 6), min and max."""
    r, g, b = (float(np.float32(c)) for c in p)
    f = np.float32
    if r < g:
        vmax, mid, vmin, cat = (g, r, b, 1) if b < r else (b, g, r, 3) if b > g else (g, b, r, 2)
    else:
        vmax, mid, vmin, cat = (r, g, b, 0) if b < g else (b, r, g, 4) if b > r else (r, b, g, 5)
    if vmax == vmin:
        return f(0), f(vmin), f(vmax)
    ratio = f(f(mid - vmin) / f(vmax - vmin))
    return f(cat + (ratio if cat % 2 == 0 else f(1) - ratio)), f(vmin), f(vmax)


def _rgb_from_hv_range(h, vmin, vmax):
    f = np.float32
    cat = int(h) if h == h else 6         # NaN: TF's cast gives INT_MIN, the default sector
    ratio = f(h - f(cat))
    if cat % 2:
        ratio = f(1) - ratio
    mid = f(vmin + ratio * f(vmax - vmin))
    return {0: (vmax, mid, vmin), 1: (mid, vmax, vmin), 2: (vmin, vmax, mid), 3: (vmin, mid, vmax),
            4: (mid, vmin, vmax)}.get(cat, (vmax, vmin, mid))


@register
class AdjustHue(Op):
    """Rotates hue by delta (a float32 scalar input; a full turn is 1). TF has no gradient."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        _check_rgb(self.name, shapes[0], 3)
        _check_scalar(self.name, "delta", shapes[1])
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, delta = xs[0].astype(np.float32), np.float32(xs[1])
        out = np.empty_like(x).reshape(-1, 3)
        for i, p in enumerate(x.reshape(-1, 3)):
            h, vmin, vmax = _hv_range(p)
            h = np.float32(h + delta * np.float32(6))
            if not 2**25 <= abs(h) < 2**27:          # as the kernel: TF's loops, or one exact fmod
                h = np.float32(np.fmod(h, np.float32(6)))
            while h < 0:
                h = np.float32(h + 6)
            while h >= 6:
                h = np.float32(h - 6)
            out[i] = _rgb_from_hv_range(h, vmin, vmax)
        return out.reshape(x.shape)


@register
class AdjustSaturation(Op):
    """Scales saturation by scale (a float32 scalar input), clamped to [0, 1]. TF has no gradient."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        _check_rgb(self.name, shapes[0], 3)
        _check_scalar(self.name, "scale", shapes[1])
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, scale = xs[0].astype(np.float32), np.float32(xs[1])
        f = np.float32
        hsv = rgb_to_hsv(x)
        # AdjustSaturation's own conversion: norm = 1 / (6 range), and its HSV -> RGB by sectors
        v = np.max(x, axis=-1)
        rng = v - np.min(x, axis=-1)
        with np.errstate(all="ignore"):
            norm = f(1) / (f(6) * rng)
        r, g, b = x[..., 0], x[..., 1], x[..., 2]
        with np.errstate(all="ignore"):
            h = np.where(r == v, norm * (g - b), np.where(g == v, norm * (b - r) + f(2.0 / 6.0),
                                                          norm * (r - g) + f(4.0 / 6.0)))
        h = np.where(rng <= 0, f(0), h)
        h = np.where(h < 0, h + f(1), h).astype(np.float32)
        s = np.clip(hsv[..., 1] * scale, 0, 1).astype(np.float32)
        c = (s * v).astype(np.float32)
        m = (v - c).astype(np.float32)
        dh = (h * f(6)).astype(np.float32)
        cat = np.trunc(dh).astype(np.int64)
        fmodu = np.mod(dh, f(2)).astype(np.float32)
        xx = (c * (f(1) - np.abs(fmodu - f(1)))).astype(np.float32)
        z = np.zeros_like(c)
        table = {0: (c, xx, z), 1: (xx, c, z), 2: (z, c, xx), 3: (z, xx, c), 4: (xx, z, c), 5: (c, z, xx)}
        out = np.repeat(m[..., None], 3, axis=-1)          # any other sector: (0, 0, 0) + m
        for k, rgb in table.items():
            for ch in range(3):
                out[..., ch] = np.where(cat == k, rgb[ch] + m, out[..., ch])
        return out


@register
class AdjustContrastv2(Op):
    """(x - mean) * contrast_factor + mean, the mean per image and channel over height and width
    (contrast_factor a float32 scalar input). TF has no gradient."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        if len(shapes[0]) < 3:
            raise ValueError(f"{self.name}: input must be at least 3-D, got {list(shapes[0])}")
        _check_scalar(self.name, "contrast_factor", shapes[1])
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, factor = xs[0].astype(np.float32), np.float32(xs[1])
        mean = x.astype(np.float64).mean(axis=(-3, -2), keepdims=True).astype(np.float32)
        return ((x - mean) * factor + mean).astype(np.float32)


# ---- ScaleAndTranslate: tf.image.resize with antialias=True, lanczos3/5, gaussian, mitchellcubic --

def _lanczos(radius):
    def k(x):
        pi, r = np.float32(3.14159265359), np.float32(radius)
        v = r * np.sin(pi * x) * np.sin(pi * x / r) / (pi * pi * x * x)
        return np.where(x > r, 0, np.where(x <= np.float32(1e-3), 1, v))
    return k


def _gaussian(x):         # radius 1.5, sigma 0.5; the exponent in double, as TF
    v = np.exp((-x * x).astype(np.float64) / (2.0 * 0.5 * 0.5))
    return np.where(x >= np.float32(1.5), 0, v)


def _cubic(a3, a2, a1, a0, b3, b2, b0):
    """|x| < 1: ((b3 x + b2) x) x + b0; 1 <= |x| < 2: ((a3 x + a2) x + a1) x + a0; else 0."""
    f = np.float32

    def k(x):
        near = ((f(b3) * x + f(b2)) * x) * x + f(b0)
        far = ((f(a3) * x + f(a2)) * x + f(a1)) * x + f(a0)
        return np.where(x >= 2, 0, np.where(x >= 1, far, near))
    return k


_F = np.float32
# TF's sampling kernels (sampling_kernels.h): name -> (radius, kernel of |x| in float32)
SAMPLING_KERNELS = {
    "lanczos1": (1.0, _lanczos(1)), "lanczos3": (3.0, _lanczos(3)), "lanczos5": (5.0, _lanczos(5)),
    "gaussian": (1.5, _gaussian),
    "box": (1.0, lambda x: np.where(x < 0.5, 1, np.where(x == 0.5, 0.5, 0))),
    "triangle": (1.0, lambda x: np.where(x < 1, 1 - x, 0)),
    "keyscubic": (2.0, _cubic(-0.5, 2.5, -4.0, 2.0, 1.5, -2.5, 1.0)),
    "mitchellcubic": (2.0, _cubic(_F(-7) / _F(18), 2.0, -(_F(10) / _F(3)), _F(16) / _F(9),
                                  _F(7) / _F(6), -2.0, _F(8) / _F(9))),
}


def _sampling_kernel(name, attrs):
    kernel = _attr(attrs, "kernel_type", "lanczos3").lower()
    if kernel not in SAMPLING_KERNELS:
        raise ValueError(f"{name}: Unrecognized kernel type: {_attr(attrs, 'kernel_type', '')}")
    return SAMPLING_KERNELS[kernel]


def scale_translate_spans(kernel, out_size, in_size, scale, translate, antialias):
    """TF's spans of one axis (float32 throughout, as scale_and_translate_op.cc): output x samples
    the input at (x + 0.5) / scale - translate / scale with the kernel widened by 1 / scale when
    downscaling with antialias; its weights (normalized to sum 1) cover input pixels
    starts[x] ... starts[x] + span_size - 1 (those past the edge are zero). A sample outside
    [0, in_size] has all-zero weights. -> (span_size, starts [out], weights [out, span_size])"""
    radius, fn = kernel
    f = np.float32
    with np.errstate(all="ignore"):
        inv_scale = f(1.0 / float(scale))
        inv_translate = f(-inv_scale) * f(translate)
        kernel_scale = max(inv_scale, f(1)) if antialias else f(1)
        reach = f(radius) * kernel_scale
        size = min(2 * int(np.ceil(reach)) + 1, in_size)
        starts = np.zeros(out_size, np.int64)
        weights = np.zeros((out_size, max(size, 0)), np.float32)
        for x in range(out_size):
            sample = f(f(x) + f(0.5)) * inv_scale + inv_translate
            if not (sample >= 0 and sample <= in_size):       # outside, or NaN (no weights)
                continue
            start = min(max(int(np.ceil(sample - reach - f(0.5))), 0), in_size - 1)
            end = min(max(int(np.floor(sample + reach - f(0.5))), 0), in_size - 1) + 1
            if end - start > size:
                raise ValueError(f"Span is too large: {end - start} vs {size}.")
            pos = np.arange(start, end).astype(np.float32) + f(0.5) - sample
            w = fn(np.abs(pos * (f(1) / kernel_scale))).astype(np.float32)
            total = f(0)
            for v in w:                                          # in order, in float32
                total = f(total + v)
            if abs(total) >= f(1000) * np.finfo(np.float32).tiny:
                weights[x, :end - start] = w * (f(1) / total)
            starts[x] = start
    return size, starts, weights


def _grad_spans(spans, fwd_out, fwd_in):
    """The spans of the gradient (TF's ComputeGradSpansCore): for each forward input pixel, the
    forward outputs that weigh it (nonzero), from the first such output on."""
    size, starts, weights = spans
    parts = [[] for _ in range(fwd_in)]
    for o in range(fwd_out):
        for j in range(size):
            if weights[o, j] != 0 and starts[o] + j < fwd_in:
                parts[starts[o] + j].append((o, weights[o, j]))
    gsize = max((p[-1][0] - p[0][0] + 1 for p in parts if p), default=0)
    gstarts = np.array([p[0][0] if p else 0 for p in parts], np.int64)
    gweights = np.zeros((fwd_in, gsize), np.float32)
    for i, p in enumerate(parts):
        for o, w in p:
            gweights[i, o - p[0][0]] += w
    return gsize, gstarts, gweights


def _gather(x, axis, spans):
    """out[.., o, ..] = sum over j < the span's real size of weights[o, j] * x[.., start + j, ..],
    summed in order in float32 (zero weights included: 0 * inf is NaN, as in TF)."""
    size, starts, weights = spans
    n = x.shape[axis]
    x = np.moveaxis(x, axis, 0)
    out = np.zeros((len(starts),) + x.shape[1:], np.float32)
    with np.errstate(all="ignore"):
        for o, s in enumerate(starts):
            for j in range(min(s + size, n) - s):
                out[o] = out[o] + weights[o, j] * x[s + j]
    return np.moveaxis(out, 0, axis)


def _check_pair(name, what, shape):
    if len(shape) != 1 or shape[0] != 2:
        raise ValueError(f"{name}: {what} must be a 1-D tensor of two elements, got {list(shape)}")


def _scale_translation(name, xs):
    (sy, sx), (ty, tx) = (np.asarray(v, np.float32).reshape(2) for v in xs)
    if not (sy > 0 and sx > 0):
        raise ValueError(f"{name}: Scale must be greater than zero.")
    return (sy, sx), (ty, tx)


@register
class ScaleAndTranslate(Op):
    """(images [B, H, W, C], size [2] (const), scale [2], translation [2]) -> float32
    [B, size[0], size[1], C]: rows then columns resampled with TF's spans (scale_translate_spans)."""
    type_attrs = {"T": NUMBER}
    const_inputs = ("size",)
    checks_values = True          # TF rejects a scale <= 0 even for an empty batch

    def shapes(self, shapes, attrs):
        img, scale, translation = shapes
        _sampling_kernel(self.name, attrs)
        if len(img) != 4:
            raise ValueError(f"{self.name}: input must be 4-dimensional, got {list(img)}")
        size = [int(v) for v in attrs["size"]]
        if len(size) != 2:
            raise ValueError(f"{self.name}: size must have two elements, got {size}")
        if min(size) <= 0:
            raise ValueError(f"{self.name}: output dimensions must be positive, got {size}")
        if img[3] <= 0:
            raise ValueError(f"{self.name}: image must have at least one channel")
        if img[1] <= 0 or img[2] <= 0:
            raise ValueError(f"{self.name}: input image must be of non-zero size, got {list(img)}")
        _check_pair(self.name, "scale", scale)
        _check_pair(self.name, "translation", translation)
        return [(img[0], *size, img[3])]

    def compute(self, xs, attrs):
        kernel, antialias = _sampling_kernel(self.name, attrs), attrs.get("antialias", True)
        (sy, sx), (ty, tx) = _scale_translation(self.name, xs[1:])
        img = xs[0].astype(np.float32)
        (oh, ow), (h, w) = [int(v) for v in attrs["size"]], img.shape[1:3]
        if img.shape[0] == 0:
            return np.zeros((0, oh, ow, img.shape[3]), np.float32)
        cols = scale_translate_spans(kernel, ow, w, sx, tx, antialias)
        rows = scale_translate_spans(kernel, oh, h, sy, ty, antialias)
        return _gather(_gather(img, 1, rows), 2, cols)


@register
class ScaleAndTranslateGrad(Op):
    """(grads [B, h, w, C] of a ScaleAndTranslate of original_image [., H, W, .], scale,
    translation) -> [B, H, W, C]: the transposed resampling (TF's gradient spans)."""
    type_attrs = {"T": F32}
    checks_values = True

    def shapes(self, shapes, attrs):
        grads, orig, scale, translation = shapes
        _sampling_kernel(self.name, attrs)
        if len(grads) != 4:
            raise ValueError(f"{self.name}: input_grad must be 4-dimensional, got {list(grads)}")
        if len(orig) != 4:
            raise ValueError(f"{self.name}: original_image must be 4-dimensional, got {list(orig)}")
        _check_pair(self.name, "scale", scale)
        _check_pair(self.name, "translation", translation)
        return [(grads[0], orig[1], orig[2], grads[3])]

    def compute(self, xs, attrs):
        kernel, antialias = _sampling_kernel(self.name, attrs), attrs.get("antialias", True)
        (sy, sx), (ty, tx) = _scale_translation(self.name, xs[2:])
        grads = xs[0].astype(np.float32)
        (b, oh, ow, c), (h, w) = grads.shape, xs[1].shape[1:3]
        if b * h * w * c == 0:
            return np.zeros((b, h, w, c), np.float32)
        cols = _grad_spans(scale_translate_spans(kernel, ow, w, sx, tx, antialias), ow, w)
        rows = _grad_spans(scale_translate_spans(kernel, oh, h, sy, ty, antialias), oh, h)
        return _gather(_gather(grads, 1, rows), 2, cols)
