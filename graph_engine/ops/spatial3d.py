"""Shared geometry of 3-D convolutions and pools (NDHWC or NCDHW): output sizes, SAME/VALID
padding, window taps. The references compute channels-last; each tap (kd, kh, kw) of the window
is a strided view of the padded input covering every output position (as spatial.py for 2-D).
"""
import itertools

import numpy as np

from graph_engine.ops.errors import UnsupportedError
from graph_engine.ops.spatial import window_output_size


class Geometry3D:
    """window: the 3 spatial window sizes; out_channels: the output's channel count."""

    def __init__(self, attrs, x_shape, window, out_channels, what):
        fmt = attrs.get("data_format", "NDHWC")
        if fmt not in ("NDHWC", "NCDHW"):
            raise ValueError(f"{what}: data_format {fmt!r} not supported; allowed: NDHWC, NCDHW")
        self.ncdhw = fmt == "NCDHW"
        if len(x_shape) != 5:
            raise ValueError(f"{what}: input must be 5-D, got {list(x_shape)}")
        x_shape = self.channels_last_shape(x_shape)
        self.n, self.c, self.co, self.k = x_shape[0], x_shape[4], out_channels, tuple(window)
        spatial = (2, 3, 4) if self.ncdhw else (1, 2, 3)
        strides, dilations = list(attrs.get("strides", [1] * 5)), list(attrs.get("dilations", [1] * 5))
        if len(strides) != 5 or len(dilations) != 5 or min(strides + dilations) < 1:
            raise ValueError(f"{what}: strides {strides} and dilations {dilations} must be 5 "
                             f"positive entries")
        c = 1 if self.ncdhw else 4
        if (strides[0], strides[c], dilations[0], dilations[c]) != (1, 1, 1, 1):
            raise UnsupportedError(f"{what}: strides {strides} and dilations {dilations} in the "
                                   f"batch and depth dimensions are not supported")
        self.stride = [strides[i] for i in spatial]
        self.dilation = [dilations[i] for i in spatial]
        padding = attrs.get("padding", "VALID")
        if padding not in ("VALID", "SAME"):
            raise ValueError(f"{what}: padding {padding!r} not supported; allowed: VALID, SAME")
        self.pads, self.out = [], []
        for n, k, s, d in zip(x_shape[1:4], self.k, self.stride, self.dilation):
            span = (k - 1) * d + 1
            total = max((-(-n // s) - 1) * s + span - n, 0) if padding == "SAME" else 0
            out = window_output_size(n + total, span, s, what)
            self.pads.append((total // 2, total - total // 2))
            self.out.append(out)

    def channels_last_shape(self, shape):
        return (shape[0], *shape[2:], shape[1]) if self.ncdhw else tuple(shape)

    def to_last(self, x):
        return np.moveaxis(x, 1, -1) if self.ncdhw else x

    def from_last(self, x):
        return np.moveaxis(x, -1, 1) if self.ncdhw else x

    def out_shape(self):
        return (self.n, self.co, *self.out) if self.ncdhw else (self.n, *self.out, self.co)

    def pad(self, x, value=0):
        return np.pad(x, ((0, 0), *self.pads, (0, 0)), constant_values=value)

    def crop(self, xp):
        return xp[(slice(None), *(slice(b, xp.shape[i + 1] - a) for i, (b, a) in enumerate(self.pads)))]

    def taps(self):
        """(tap index (kd, kh, kw), view of the padded channels-last input for every output)."""
        for tap in itertools.product(*(range(k) for k in self.k)):
            yield tap, (slice(None), *(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in
                                       zip(tap, self.dilation, self.out, self.stride)))
