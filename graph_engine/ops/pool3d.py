"""3-D max and average pooling (Keras MaxPooling3D/AveragePooling3D) and their gradients,
NDHWC or NCDHW. Kernel: runtime/kernels/pool3d.cc.

TF's 3-D CPU kernels differ from the 2-D ones in one point kept here: MaxPool3DGrad gives the
gradient to every window element equal to the pooled maximum (ties all receive it), where 2-D
MaxPoolGrad picks the first. Averages divide by the in-range (non-padding) element count.
"""
import numpy as np

from graph_engine.ops.errors import UnsupportedError
from graph_engine.ops.base import FLOAT, Op, register
from graph_engine.ops.spatial3d import Geometry3D


def _geometry(attrs, x_shape, what):
    ncdhw = attrs.get("data_format", "NDHWC") == "NCDHW"
    ksize, strides = list(attrs["ksize"]), list(attrs["strides"])
    c = 1 if ncdhw else 4
    if len(ksize) != 5 or len(strides) != 5:
        raise ValueError(f"{what}: ksize {ksize} and strides {strides} must have 5 entries")
    if ksize[0] != 1 or ksize[c] != 1 or strides[0] != 1 or strides[c] != 1:
        raise UnsupportedError(f"{what}: pooling across the batch or channel dimension (ksize "
                               f"{ksize}, strides {strides}) is not supported")
    if min(ksize) < 1:
        raise ValueError(f"{what}: ksize {ksize} must be positive")
    if len(x_shape) != 5:
        raise ValueError(f"{what}: input must be 5-D, got {list(x_shape)}")
    window = ksize[2:] if ncdhw else ksize[1:4]
    return Geometry3D(attrs, x_shape, window, x_shape[c], what)


def _check(what, name, got, want):
    if tuple(got) != tuple(want):
        raise ValueError(f"{what}: {name} {list(got)} must have shape {list(want)}")


@register
class MaxPool3D(Op):
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        return [_geometry(attrs, shapes[0], self.name).out_shape()]

    def compute(self, xs, attrs):
        g = _geometry(attrs, xs[0].shape, self.name)
        xp = g.pad(g.to_last(xs[0]), -np.inf)
        return g.from_last(np.maximum.reduce([xp[index] for _, index in g.taps()]))


def _avg_divisor(g, x_last_shape):
    ones = g.pad(np.ones((1, *x_last_shape[1:4], 1), np.float32))
    return sum(ones[index] for _, index in g.taps())


@register
class AvgPool3D(Op):
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        return [_geometry(attrs, shapes[0], self.name).out_shape()]

    def compute(self, xs, attrs):
        g = _geometry(attrs, xs[0].shape, self.name)
        x = g.to_last(xs[0])
        xp = g.pad(x)
        return g.from_last(sum(xp[index] for _, index in g.taps()) / _avg_divisor(g, x.shape))


@register
class MaxPool3DGrad(Op):
    """(orig_input, orig_output, grad) -> d(input): every element equal to its window's
    pooled value receives that window's gradient."""
    type_attrs = {"T": FLOAT, "TInput": FLOAT}

    def shapes(self, shapes, attrs):
        g = _geometry(attrs, shapes[0], self.name)
        _check(self.name, "orig_output", shapes[1], g.out_shape())
        _check(self.name, "grad", shapes[2], g.out_shape())
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, y, grad = xs
        g = _geometry(attrs, x.shape, self.name)
        xp, y, grad = g.pad(g.to_last(x), np.nan), g.to_last(y), g.to_last(grad)
        dxp = np.zeros(xp.shape, np.float32)
        for _, index in g.taps():       # TF's test: |x - y| < 1e-5 (so never at an infinity)
            with np.errstate(invalid="ignore"):
                dxp[index] += np.where(np.abs(xp[index] - y) < 1e-5, grad, 0)
        return g.from_last(g.crop(dxp))


@register
class MaxPool3DGradGrad(Op):
    """(orig_input, orig_output, grad shaped like the input) -> one value per pooled position:
    grad at the window's first element equal to the pooled value."""
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        g = _geometry(attrs, shapes[0], self.name)
        _check(self.name, "orig_output", shapes[1], g.out_shape())
        _check(self.name, "grad", shapes[2], shapes[0])
        if 0 in tuple(shapes[0]):                                 # TF's check
            raise ValueError(f"{self.name}: received empty tensor tensor_in of shape "
                             f"{list(shapes[0])}")
        return [g.out_shape()]

    def compute(self, xs, attrs):
        x, y, grad = xs
        g = _geometry(attrs, x.shape, self.name)
        xp, gp, y = g.pad(g.to_last(x), np.nan), g.pad(g.to_last(grad)), g.to_last(y)
        out = np.zeros(y.shape, np.float32)
        found = np.zeros(y.shape, bool)
        for _, index in g.taps():
            hit = (xp[index] == y) & ~found
            out, found = np.where(hit, gp[index], out), found | hit
        return g.from_last(out)


@register
class AvgPool3DGrad(Op):
    type_attrs = {"T": FLOAT}
    const_inputs = ("orig_input_shape",)

    def shapes(self, shapes, attrs):
        x_shape = tuple(int(d) for d in attrs["orig_input_shape"])
        _check(self.name, "grad", shapes[0], _geometry(attrs, x_shape, self.name).out_shape())
        return [x_shape]

    def compute(self, xs, attrs):
        x_shape = tuple(int(d) for d in attrs["orig_input_shape"])
        g = _geometry(attrs, x_shape, self.name)
        last = g.channels_last_shape(x_shape)
        share = g.to_last(xs[0]) / _avg_divisor(g, last)
        dxp = g.pad(np.zeros(last, np.float32))
        for _, index in g.taps():
            dxp[index] += share
        return g.from_last(g.crop(dxp))
