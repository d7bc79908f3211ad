"""2-D max and average pooling and their gradients (NHWC or NCHW)."""
import numpy as np

from graph_engine.ops.base import FLOAT, Op, register
from graph_engine.ops.spatial import Geometry, nhwc_shape, window_attrs


def _pool_geometry(attrs, x_shape, what):
    n, h, w, c = nhwc_shape(attrs, x_shape, what)
    return Geometry(attrs, (h, w), window_attrs(attrs, what), what), n, c


def _check_grad(what, g, n, c, grad_shape):
    if tuple(grad_shape) != g.shape_out(n, c):
        raise ValueError(f"{what}: grad {list(grad_shape)} does not match the pool output "
                         f"{list(g.shape_out(n, c))}")


def _avg_counts(g, n_h_w_c):
    """How many real (non-padding) inputs each window covers: TF's average divisor."""
    ones = g.pad(np.ones((1, *n_h_w_c[1:3], 1), np.float32))
    return sum(ones[index] for _, _, index in g.taps())


class _Pool(Op):
    """Forward pooling: one output window per position of the pooling geometry."""
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        g, n, c = _pool_geometry(attrs, shapes[0], self.name)
        return [g.shape_out(n, c)]


@register
class MaxPool(_Pool):
    mixlist = "gray"
    def compute(self, xs, attrs):
        g, n, c = _pool_geometry(attrs, xs[0].shape, self.name)
        # As TF's CPU kernel: the maximum starts at the dtype's lowest finite value and NaN never
        # wins (a window of NaN or -inf pools to that lowest value).
        xp = g.pad(g.to_nhwc(xs[0]), -np.inf)
        lowest = np.finfo(xp.dtype).min
        return g.from_nhwc(np.fmax(np.fmax.reduce([xp[index] for _, _, index in g.taps()]), lowest))


def _window_argmax(g, xp, out_shape):
    """Per output position, the tap of the first window maximum (row-major), like TF."""
    best = np.full(out_shape, -np.inf, np.float32)
    arg = np.full(out_shape, -1)
    for t, (_, _, index) in enumerate(g.taps()):
        better = (xp[index] > best) | (arg < 0)
        best, arg = np.where(better, xp[index], best), np.where(better, t, arg)
    return arg


@register
class MaxPoolGrad(Op):
    """Each output gradient goes to the first maximum of its window (row-major), like TF."""
    mixlist = "gray"
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        g, n, c = _pool_geometry(attrs, shapes[0], self.name)
        if tuple(shapes[1]) != g.shape_out(n, c):                # TF's check and message
            raise ValueError(f"{self.name}: Expected orig_output shape to be "
                             f"{list(g.shape_out(n, c))}, but got {list(shapes[1])}")
        _check_grad(self.name, g, n, c, shapes[2])
        return [shapes[0]]

    def compute(self, xs, attrs):
        x, _, grad = xs
        g, n, c = _pool_geometry(attrs, x.shape, self.name)
        xp, grad = g.pad(g.to_nhwc(x), -np.inf), g.to_nhwc(grad)
        arg = _window_argmax(g, xp, grad.shape)
        dxp = np.zeros(xp.shape, np.float32)
        for t, (_, _, index) in enumerate(g.taps()):
            dxp[index] += np.where(arg == t, grad, 0)
        return g.from_nhwc(g.crop(dxp))


@register
class MaxPoolGradGrad(Op):
    """The gradient of MaxPoolGrad: each output position takes the input-shaped gradient at its
    window's first maximum (orig_input, orig_output, grad shaped like orig_input)."""
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        g, n, c = _pool_geometry(attrs, shapes[0], self.name)
        _check_grad(self.name, g, n, c, shapes[1])
        if tuple(shapes[2]) != tuple(shapes[0]):
            raise ValueError(f"{self.name}: grad {list(shapes[2])} must have the input shape "
                             f"{list(shapes[0])}")
        return [g.shape_out(n, c)]

    def compute(self, xs, attrs):
        # As TF's CPU kernel: the first window element equal to orig_output (none: 0).
        x, y, grad = xs
        g, n, c = _pool_geometry(attrs, x.shape, self.name)
        xp, gp, y = g.pad(g.to_nhwc(x), np.nan), g.pad(g.to_nhwc(grad)), g.to_nhwc(y)
        out = np.zeros(y.shape, np.float32)
        found = np.zeros(y.shape, bool)
        for _, _, index in g.taps():
            hit = ~found & (xp[index] == y)
            out = np.where(hit, gp[index], out)
            found |= hit
        return g.from_nhwc(out)


@register
class AvgPool(_Pool):
    mixlist = "gray"
    def compute(self, xs, attrs):
        g, n, c = _pool_geometry(attrs, xs[0].shape, self.name)
        x = g.to_nhwc(xs[0])
        xp = g.pad(x)
        total = sum(xp[index] for _, _, index in g.taps())
        return g.from_nhwc(total / _avg_counts(g, x.shape))


@register
class AvgPoolGrad(Op):
    mixlist = "gray"
    type_attrs = {"T": FLOAT}
    const_inputs = ("orig_input_shape",)

    def shapes(self, shapes, attrs):
        x_shape = tuple(int(d) for d in attrs["orig_input_shape"])
        g, n, c = _pool_geometry(attrs, x_shape, self.name)
        _check_grad(self.name, g, n, c, shapes[0])
        return [x_shape]

    def compute(self, xs, attrs):
        x_shape = tuple(int(d) for d in attrs["orig_input_shape"])
        g, n, c = _pool_geometry(attrs, x_shape, self.name)
        nhwc = nhwc_shape(attrs, x_shape, self.name)
        share = g.to_nhwc(xs[0]) / _avg_counts(g, nhwc)
        dxp = g.pad(np.zeros(nhwc, np.float32))
        for _, _, index in g.taps():
            dxp[index] += share
        return g.from_nhwc(g.crop(dxp))
