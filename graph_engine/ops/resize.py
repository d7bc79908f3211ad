"""Image resizing (tf.image.resize, Keras UpSampling2D/Resizing) and the gradients TF takes of it,
NHWC: bilinear, nearest neighbor, bicubic and area. Kernels: runtime/kernels/resize.cc.

TF's sampling: scale = (in - 1) / (out - 1) with align_corners (and out > 1), else in / out;
output pixel i samples at i * scale, or (i + 0.5) * scale - 0.5 with half_pixel_centers, between
rows floor and ceil of that (clamped to the image) with weight frac(position).

Bicubic and area resizing are separable: along each axis an output position reads a few source
positions with float weights ("taps", below, computed exactly as TF's kernels compute them, in
float32), and out = post * sum_y wy * (sum_x wx * in). The kernel gets the same taps; the
references here apply them as dense [out, in] matrices."""
import numpy as np

from graph_engine.ops.base import FLOAT, INT, NUMBER, Op, register


def _check(attrs, what):
    if attrs.get("align_corners") and attrs.get("half_pixel_centers"):
        raise ValueError(f"{what}: align_corners and half_pixel_centers cannot both be true")


def _taps(in_size, out_size, attrs):
    """(lower index, upper index, weight of upper) per output position along one axis."""
    align = attrs.get("align_corners", False)
    scale = (in_size - 1) / (out_size - 1) if align and out_size > 1 else in_size / out_size
    i = np.arange(out_size, dtype=np.float64)
    pos = (i + 0.5) * scale - 0.5 if attrs.get("half_pixel_centers", False) else i * scale
    pos = pos.astype(np.float32)                 # TF computes the positions in float
    lo = np.floor(pos)
    return (np.maximum(lo, 0).astype(np.int64), np.minimum(np.ceil(pos), in_size - 1).astype(np.int64),
            (pos - lo).astype(np.float32))


def _size(attrs, what):
    size = [int(v) for v in attrs["size"]]
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"{what}: size must be 2 positive ints [height, width], got {size}")
    return size


@register
class ResizeBilinear(Op):
    type_attrs = {"T": NUMBER}
    const_inputs = ("size",)

    def shapes(self, shapes, attrs):
        _check(attrs, self.name)
        if len(shapes[0]) != 4:
            raise ValueError(f"{self.name}: images must be 4-D NHWC, got {list(shapes[0])}")
        n, h, w, c = shapes[0]
        size = _size(attrs, self.name)
        if c <= 0:                                  # TF's checks and messages
            raise ValueError(f"{self.name}: image must have at least one channel, got "
                             f"{list(shapes[0])}")
        if h <= 0 or w <= 0:
            raise ValueError(f"{self.name}: input image must be of non-zero size, got "
                             f"{list(shapes[0])}")
        return [(n, *size, c)]

    def compute(self, xs, attrs):
        x = xs[0].astype(np.float32)
        (h, w), (oh, ow) = x.shape[1:3], _size(attrs, self.name)
        y0, y1, fy = _taps(h, oh, attrs)
        x0, x1, fx = _taps(w, ow, attrs)
        fx = fx[None, None, :, None]
        top = x[:, y0][:, :, x0] + (x[:, y0][:, :, x1] - x[:, y0][:, :, x0]) * fx
        bottom = x[:, y1][:, :, x0] + (x[:, y1][:, :, x1] - x[:, y1][:, :, x0]) * fx
        return top + (bottom - top) * fy[None, :, None, None]


@register
class ResizeBilinearGrad(Op):
    """(grads [N, OH, OW, C] float32, original_image) -> the gradient for the image: each output
    gradient goes back to its four source pixels with the forward's weights."""
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        _check(attrs, self.name)
        g, img = shapes
        if len(g) != 4 or len(img) != 4:
            raise ValueError(f"{self.name}: grads {list(g)} and original_image {list(img)} must be "
                             f"4-D NHWC")
        if g[1] <= 0 or g[2] <= 0:
            raise ValueError(f"{self.name}: resized dimensions must be positive, got grads "
                             f"{list(g)}")
        if img[1] <= 0 or img[2] <= 0:
            raise ValueError(f"{self.name}: original dimensions must be positive, got "
                             f"original_image {list(img)}")
        # As TF: batch and channels from the gradient, height and width from the image.
        return [(g[0], img[1], img[2], g[3])]

    def compute(self, xs, attrs):
        g, img = xs[0].astype(np.float32), xs[1]
        (h, w), (oh, ow) = img.shape[1:3], g.shape[1:3]
        y0, y1, fy = _taps(h, oh, attrs)
        x0, x1, fx = _taps(w, ow, attrs)
        out = np.zeros((g.shape[0], h, w, g.shape[3]), np.float32)
        for ys, wy in ((y0, 1 - fy), (y1, fy)):
            for xs_, wx in ((x0, 1 - fx), (x1, fx)):
                weights = (wy[:, None] * wx[None, :])[None, :, :, None]
                np.add.at(out, (slice(None), ys[:, None], xs_[None, :]), g * weights)
        return out


# ---- nearest neighbor, bicubic, area ------------------------------------------------------------

def _scale(in_size, out_size, align):
    """TF's CalculateResizeScale, in float32."""
    if align and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _image_dims(shape, what):
    """TF's ImageResizerState checks of an image [N, H, W, C]."""
    if len(shape) != 4:
        raise ValueError(f"{what}: input must be 4-dimensional, got {list(shape)}")
    if shape[3] <= 0:
        raise ValueError(f"{what}: image must have at least one channel, got {list(shape)}")
    if shape[1] <= 0 or shape[2] <= 0:
        raise ValueError(f"{what}: input image must be of non-zero size, got {list(shape)}")


def nearest_indices(in_size, out_size, align, half_pixel):
    """TF's source index per output position: floor (round with align_corners, half away from
    zero) of i * scale, or of (i + 0.5) * scale with half_pixel_centers, clamped to the image."""
    scale = _scale(in_size, out_size, align)
    i = np.arange(out_size, dtype=np.float32)
    pos = ((i + np.float32(0.5)) * scale if half_pixel else i * scale).astype(np.float64)
    idx = np.floor(pos + 0.5) if align else np.floor(pos)      # exact: pos is a float32
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


_TABLE = 1024      # TF's bicubic coefficient table: 1024 steps of the fractional position


def _cubic_table(a):
    """TF's InitCoeffsTable: [k/1024 -> (weight at distance x, weight at distance x + 1)]."""
    x = np.arange(_TABLE + 1, dtype=np.float64) / _TABLE          # exact in float32 too
    x1 = (x.astype(np.float32) + np.float32(1)).astype(np.float64)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
    return near.astype(np.float32), far.astype(np.float32)


def bicubic_taps(in_size, out_size, align, half_pixel):
    """Per output position, 4 (source index, weight) pairs as TF's GetWeightsAndIndices: Keys'
    a = -0.5 with half_pixel_centers (taps outside the image get weight 0, the rest renormalized),
    else a = -0.75 with the taps clamped to the edge."""
    scale = _scale(in_size, out_size, align)
    near, far = _cubic_table(-0.5 if half_pixel else -0.75)
    taps = []
    for i in range(out_size):
        pos = (np.float32(i) + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel \
            else np.float32(i) * scale
        loc = int(np.floor(pos))
        off = int(np.rint(np.float32(pos - np.float32(loc)) * np.float32(_TABLE)))
        ws = [far[off], near[off], near[_TABLE - off], far[_TABLE - off]]
        idx = [loc - 1, loc, loc + 1, loc + 2]
        bounded = [min(max(j, 0), in_size - 1) for j in idx]
        if half_pixel:
            ws = [w if b == j else np.float32(0) for w, b, j in zip(ws, bounded, idx)]
            total = np.float32(ws[0] + ws[1] + ws[2] + ws[3])
            if abs(total) >= 1000 * np.finfo(np.float32).tiny:
                ws = [w * (np.float32(1) / total) for w in ws]
        taps.append(list(zip(bounded, ws)))
    return taps


def _area_scale(in_size, out_size, align):
    """TF 2.21's area kernel does not align the corners of a 1-pixel axis (the aligned scale
    would be 0): in / out there, as its results show."""
    return _scale(in_size, out_size, align and in_size > 1)


def area_taps(in_size, out_size, align):
    """Per output position, the source pixels its box [i * scale, (i + 1) * scale) covers and the
    part of each covered (TF's ResizeArea, indices clamped to the image)."""
    scale = _area_scale(in_size, out_size, align)
    taps = []
    for i in range(out_size):
        lo, hi = np.float32(i) * scale, np.float32(i + 1) * scale
        row = []
        for j in range(int(np.floor(lo)), int(np.ceil(hi))):
            if j < lo:
                w = scale if j + 1 > hi else np.float32(j + 1) - lo
            else:
                w = hi - np.float32(j) if j + 1 > hi else np.float32(1)
            row.append((min(max(j, 0), in_size - 1), np.float32(w)))
        taps.append(row)
    return taps


def _matrix(taps, in_size):
    m = np.zeros((len(taps), in_size))
    for i, row in enumerate(taps):
        for j, w in row:
            m[i, j] += w
    return m


def _separable(x, ty, tx, post=1.0):
    """out[n, i, j, c] = post * sum wy * wx * x[n, y, x, c] over the taps of i and j."""
    wy, wx = _matrix(ty, x.shape[1]), _matrix(tx, x.shape[2])
    return (np.einsum("ih,jw,nhwc->nijc", wy, wx, x.astype(np.float64)) * post).astype(np.float32)


def _separable_grad(g, ty, tx, h, w):
    wy, wx = _matrix(ty, h), _matrix(tx, w)
    return np.einsum("ih,jw,nijc->nhwc", wy, wx, g.astype(np.float64)).astype(np.float32)


@register
class ResizeNearestNeighbor(Op):
    type_attrs = {"T": NUMBER}
    const_inputs = ("size",)

    def shapes(self, shapes, attrs):
        _check(attrs, self.name)
        _image_dims(shapes[0], self.name)
        if max(shapes[0][1:3]) >= 1 << 24:
            raise ValueError(f"{self.name}: nearest neighbor requires max height & width of 2^24")
        n, _, _, c = shapes[0]
        return [(n, *_size(attrs, self.name), c)]

    def compute(self, xs, attrs):
        x, (oh, ow) = xs[0], _size(attrs, self.name)
        flags = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
        ys, xs_ = nearest_indices(x.shape[1], oh, *flags), nearest_indices(x.shape[2], ow, *flags)
        return x[:, ys][:, :, xs_]


@register
class ResizeNearestNeighborGrad(Op):
    """(grads [N, OH, OW, C], size = the image's [H, W]): each output gradient goes back to the
    pixel the forward copied it from (TF's CPU kernel, in the gradient's dtype)."""
    type_attrs = {"T": FLOAT + (INT[0],)}
    const_inputs = ("size",)

    def shapes(self, shapes, attrs):
        g = shapes[0]
        if len(g) != 4:
            raise ValueError(f"{self.name}: input must be 4-dimensional, got {list(g)}")
        size = [int(v) for v in attrs["size"]]
        if len(size) != 2 or min(size) <= 0:
            raise ValueError(f"{self.name}: shape_t's elements must be positive, got {size}")
        return [(g[0], *size, g[3])]

    def compute(self, xs, attrs):
        g, (h, w) = xs[0], [int(v) for v in attrs["size"]]
        flags = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
        ys, xs_ = nearest_indices(h, g.shape[1], *flags), nearest_indices(w, g.shape[2], *flags)
        out = np.zeros((g.shape[0], h, w, g.shape[3]), g.dtype)
        np.add.at(out, (slice(None), ys[:, None], xs_[None, :]), g)
        return out


@register
class ResizeBicubic(Op):
    type_attrs = {"T": NUMBER}
    const_inputs = ("size",)

    def shapes(self, shapes, attrs):
        _check(attrs, self.name)
        _image_dims(shapes[0], self.name)
        n, _, _, c = shapes[0]
        return [(n, *_size(attrs, self.name), c)]

    def compute(self, xs, attrs):
        x, (oh, ow) = xs[0], _size(attrs, self.name)
        flags = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
        return _separable(x, bicubic_taps(x.shape[1], oh, *flags), bicubic_taps(x.shape[2], ow, *flags))


@register
class ResizeBicubicGrad(Op):
    """(grads [N, OH, OW, C] float32, original_image) -> the gradient for the image, float32 as
    TF's CPU kernel (float64 aside) allows."""
    type_attrs = {"T": (FLOAT[0],)}

    def shapes(self, shapes, attrs):
        return ResizeBilinearGrad.shapes(self, shapes, attrs)

    def compute(self, xs, attrs):
        g, (h, w) = xs[0], xs[1].shape[1:3]
        flags = attrs.get("align_corners", False), attrs.get("half_pixel_centers", False)
        return _separable_grad(g, bicubic_taps(h, g.shape[1], *flags), bicubic_taps(w, g.shape[2], *flags), h, w)


@register
class ResizeArea(Op):
    """Each output pixel is the mean of the input box it covers (TF has no gradient for it)."""
    type_attrs = {"T": NUMBER}
    const_inputs = ("size",)

    def shapes(self, shapes, attrs):
        return ResizeBicubic.shapes(self, shapes, attrs)

    def compute(self, xs, attrs):
        x, (oh, ow) = xs[0], _size(attrs, self.name)
        align = attrs.get("align_corners", False)
        sh, sw = _area_scale(x.shape[1], oh, align), _area_scale(x.shape[2], ow, align)
        post = np.float32(1.0 / float(np.float32(sh * sw)))
        return _separable(x, area_taps(x.shape[1], oh, align), area_taps(x.shape[2], ow, align), post)
