"""Shared geometry of 2-D convolutions and pools: output sizes, padding, window taps.

The references compute in NHWC; NCHW operands are transposed in and out. A window is walked
tap by tap ((kh, kw) in row-major order), each tap a strided view of the padded input: it
keeps the numpy simple and maps onto one matmul per tap for convolutions.
"""
import numpy as np

from graph_engine.ops.errors import UnsupportedError


def is_nchw(attrs, what):
    fmt = attrs.get("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise ValueError(f"{what}: data_format {fmt!r} not supported; allowed: NHWC, NCHW")
    return fmt == "NCHW"


def nhwc_shape(attrs, shape, what):
    """(N, H, W, C) of a 4-D shape in the op's data format."""
    if len(shape) != 4:
        raise ValueError(f"{what}: expected a 4-D shape, got {list(shape)}")
    return (shape[0], shape[2], shape[3], shape[1]) if is_nchw(attrs, what) else tuple(shape)


def window_output_size(padded, span, stride, what):
    """TF's output size of a window of `span` (dilated) over `padded` inputs: C division of
    padded - span + stride, so a window a little larger than its input gives an empty output
    and only a negative size is an error. An empty output is TF's empty result (shape
    inference folds it: no kernel runs)."""
    v = padded - span + stride
    out = v // stride if v >= 0 else -(-v // stride)
    if out < 0:
        raise ValueError(f"{what}: computed output size would be negative: {out} [input size "
                         f"(padded): {padded}, effective window size: {span}, stride: {stride}]")
    return out


class Geometry:
    """Sizes of one 2-D window op from TF attrs and the NHWC input/filter spatial sizes."""

    def __init__(self, attrs, in_hw, k_hw, what):
        self.nchw = is_nchw(attrs, what)
        hw = (2, 3) if self.nchw else (1, 2)
        strides = list(attrs.get("strides", [1, 1, 1, 1]))
        dilations = list(attrs.get("dilations", [1, 1, 1, 1]))
        if len(strides) != 4 or len(dilations) != 4:
            raise ValueError(f"{what}: strides and dilations need 4 entries, got {strides}, "
                             f"{dilations}")
        c = 1 if self.nchw else 3
        if (strides[0], strides[c], dilations[0], dilations[c]) != (1, 1, 1, 1):
            raise UnsupportedError(f"{what}: strides {strides} and dilations {dilations} in the "
                                   f"batch and depth dimensions are not supported")
        self.stride = [strides[i] for i in hw]
        self.dilation = [dilations[i] for i in hw]
        if min(self.stride) < 1 or min(self.dilation) < 1:
            raise ValueError(f"{what}: strides {strides} and dilations {dilations} must be "
                             f"positive in the spatial dimensions")
        self.k = list(k_hw)
        padding = attrs.get("padding", "VALID")
        explicit = list(attrs.get("explicit_paddings", []))
        if padding == "EXPLICIT" and (len(explicit) != 8 or min(explicit) < 0):
            raise ValueError(f"{what}: explicit_paddings {explicit} must be 8 non-negative ints")
        self.pads, self.out = [], []
        for axis, (n, k, s, d) in enumerate(zip(in_hw, self.k, self.stride, self.dilation)):
            span = (k - 1) * d + 1
            if padding == "VALID":
                before = after = 0
            elif padding == "SAME":
                out = -(-n // s)
                total = max((out - 1) * s + span - n, 0)
                before, after = total // 2, total - total // 2
            elif padding == "EXPLICIT":
                before, after = explicit[2 * hw[axis]], explicit[2 * hw[axis] + 1]
            else:
                raise ValueError(f"{what}: padding {padding!r} not supported; allowed: "
                                 f"VALID, SAME, EXPLICIT")
            out = window_output_size(n + before + after, span, s, what)
            self.pads.append((before, after))
            self.out.append(out)

    def to_nhwc(self, x):
        return np.transpose(x, (0, 2, 3, 1)) if self.nchw else x

    def from_nhwc(self, x):
        return np.transpose(x, (0, 3, 1, 2)) if self.nchw else x

    def shape_out(self, n, c):
        """The output shape in the op's data format."""
        return (n, c, *self.out) if self.nchw else (n, *self.out, c)

    def pad(self, x, value=0):
        return np.pad(x, ((0, 0), *self.pads, (0, 0)), constant_values=value)

    def crop(self, x_padded):
        (t, b), (l, r) = self.pads
        return x_padded[:, t:x_padded.shape[1] - b, l:x_padded.shape[2] - r, :]

    def taps(self):
        """(kh, kw, index) with `index` selecting, for every output position, that tap's input
        element in the padded NHWC input."""
        (oh, ow), (sh, sw), (dh, dw) = self.out, self.stride, self.dilation
        for kh in range(self.k[0]):
            for kw in range(self.k[1]):
                yield kh, kw, (slice(None), slice(kh * dh, kh * dh + (oh - 1) * sh + 1, sh),
                               slice(kw * dw, kw * dw + (ow - 1) * sw + 1, sw), slice(None))


def window_attrs(attrs, what):
    """Pools: ksize/strides in the data format's order, over H and W only."""
    fmt = attrs.get("data_format", "NHWC")
    ksize, strides = list(attrs["ksize"]), list(attrs["strides"])
    c = 1 if fmt == "NCHW" else 3
    if len(ksize) != 4 or len(strides) != 4:
        raise ValueError(f"{what}: ksize {ksize} and strides {strides} must have 4 entries")
    if ksize[0] != 1 or ksize[c] != 1 or strides[0] != 1 or strides[c] != 1:
        raise UnsupportedError(f"{what}: pooling across the batch or channel dimension (ksize "
                               f"{ksize}, strides {strides}) is not supported")
    hw = (2, 3) if fmt == "NCHW" else (1, 2)
    if min(ksize[i] for i in hw) < 1 or min(strides[i] for i in hw) < 1:
        raise ValueError(f"{what}: ksize {ksize} and strides {strides} must be positive")
    return [ksize[i] for i in hw]
