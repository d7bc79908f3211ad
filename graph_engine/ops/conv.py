"""2-D convolution, depthwise convolution, and their gradients (NHWC or NCHW; HWIO filters).

Conv2D is grouped when its filter [h, w, C / G, OC] sees a part of the input channels: G = C /
the filter's input depth groups, and output channels [g * OC/G, (g+1) * OC/G) see only input
channels [g * C/G, (g+1) * C/G) (TF's rule; Keras' Conv2D(groups=G)). The gradients take the
same grouping from their input and filter shapes.
"""
import numpy as np

from graph_engine.ops.errors import UnsupportedError
from graph_engine.ops.base import FLOAT, Op, register
from graph_engine.ops.spatial import Geometry, nhwc_shape


def _conv_geometry(attrs, x_shape, f_shape, what, forward=False):
    """(window geometry, batch, output channels, groups) of a Conv2D-family node."""
    if len(f_shape) != 4:
        raise ValueError(f"{what}: filter must be 4-D [h, w, in, out], got {list(f_shape)}")
    n, h, w, c = nhwc_shape(attrs, x_shape, what)
    kh, kw, ci, co = f_shape
    if forward and ci == 0:
        raise ValueError(f"{what}: filter depth must be strictly positive, got 0")
    if not forward and 0 in tuple(f_shape):
        # TF's gradient kernels give zeros or fail depending on the build (oneDNN or Eigen)
        raise UnsupportedError(f"{what}: an empty filter {list(f_shape)} is not supported")
    if c % ci:
        raise ValueError(f"{what}: input depth must be evenly divisible by filter depth: "
                         f"{c} vs {ci}")
    groups = c // ci
    if groups and co % groups:
        raise ValueError(f"{what}: output depth must be evenly divisible by number of groups: "
                         f"{co} vs {groups}")
    g = Geometry(attrs, (h, w), (kh, kw), what)
    if forward and n * g.out[0] * g.out[1] * co == 0:
        return g, n, co, groups      # TF checks nothing more when there is no output
    if 0 in (kh, kw):
        raise ValueError(f"{what}: filter must not have zero elements (i.e. all dimensions must "
                         f"be non-zero), got {list(f_shape)}")
    if groups == 0:
        # TF returns zeros (nothing to contract); not worth a kernel path of its own
        raise UnsupportedError(f"{what}: an input with no channels and a filter of depth {ci} "
                               f"is not supported")
    return g, n, co, groups


def _grouped(a, groups):
    """[..., G * k] -> [..., G, k]: the channels of each group on their own axis."""
    return a.reshape(*a.shape[:-1], groups, a.shape[-1] // groups)


def _ungrouped(a):
    return a.reshape(*a.shape[:-2], a.shape[-2] * a.shape[-1])


@register
class Conv2D(Op):
    mixlist = "white"
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        g, n, co, _ = _conv_geometry(attrs, shapes[0], shapes[1], self.name, forward=True)
        return [g.shape_out(n, co)]

    def compute(self, xs, attrs):
        x, f = xs
        g, n, co, groups = _conv_geometry(attrs, x.shape, f.shape, self.name, forward=True)
        y = np.zeros((n, *g.out, co), np.float32)
        if y.size == 0:
            return g.from_nhwc(y)
        xp = g.pad(g.to_nhwc(x))
        for kh, kw, index in g.taps():
            if groups == 1:
                y += xp[index] @ f[kh, kw]
            else:                       # per group: its input channels x its filter columns
                y += _ungrouped(np.einsum("...gc,cgo->...go", _grouped(xp[index], groups),
                                          _grouped(f[kh, kw], groups)))
        return g.from_nhwc(y)


@register
class Conv2DBackpropInput(Op):
    """d(loss)/d(input) of Conv2D: each tap's output gradient times the filter, scattered back."""
    mixlist = "white"
    type_attrs = {"T": FLOAT}
    const_inputs = ("input_sizes",)

    def shapes(self, shapes, attrs):
        f, dy = shapes
        x_shape = tuple(int(d) for d in attrs["input_sizes"])
        g, n, co, _ = _conv_geometry(attrs, x_shape, f, self.name)
        _check_out_backprop(self.name, g, n, co, dy)
        return [x_shape]

    def compute(self, xs, attrs):
        f, dy = xs
        x_shape = tuple(int(d) for d in attrs["input_sizes"])
        g, n, co, groups = _conv_geometry(attrs, x_shape, f.shape, self.name)
        dy = g.to_nhwc(dy)
        nhwc = nhwc_shape(attrs, x_shape, self.name)
        dxp = g.pad(np.zeros(nhwc, np.float32))
        for kh, kw, index in g.taps():
            if groups == 1:
                dxp[index] += dy @ f[kh, kw].T
            else:
                dxp[index] += _ungrouped(np.einsum("...go,cgo->...gc", _grouped(dy, groups),
                                                   _grouped(f[kh, kw], groups)))
        return g.from_nhwc(g.crop(dxp))


@register
class Conv2DBackpropFilter(Op):
    """d(loss)/d(filter) of Conv2D: per tap, input patches^T x output gradient."""
    mixlist = "white"
    type_attrs = {"T": FLOAT}
    const_inputs = ("filter_sizes",)

    def shapes(self, shapes, attrs):
        x, dy = shapes
        f_shape = tuple(int(d) for d in attrs["filter_sizes"])
        g, n, co, _ = _conv_geometry(attrs, x, f_shape, self.name)
        _check_out_backprop(self.name, g, n, co, dy)
        return [f_shape]

    def compute(self, xs, attrs):
        x, dy = xs
        f_shape = tuple(int(d) for d in attrs["filter_sizes"])
        g, n, co, groups = _conv_geometry(attrs, x.shape, f_shape, self.name)
        xp = g.pad(g.to_nhwc(x))
        dy2 = g.to_nhwc(dy).reshape(-1, co)
        df = np.zeros(f_shape, np.float32)
        for kh, kw, index in g.taps():
            patches = xp[index].reshape(-1, groups * f_shape[2])
            if groups == 1:
                df[kh, kw] = patches.T @ dy2
            else:                       # [pixels, G, C/G] x [pixels, G, OC/G] per group
                df[kh, kw] = _ungrouped(np.einsum("pgc,pgo->cgo", _grouped(patches, groups),
                                                  _grouped(dy2, groups)))
        return df


def _depthwise_geometry(attrs, x_shape, f_shape, what):
    """Depthwise: filter [h, w, C, M]; output channel c*M + m sees only input channel c."""
    if len(f_shape) != 4:
        raise ValueError(f"{what}: filter must be 4-D [h, w, in, multiplier], got {list(f_shape)}")
    n, h, w, c = nhwc_shape(attrs, x_shape, what)
    if f_shape[2] != c:
        raise ValueError(f"{what}: input has {c} channels but the filter expects {f_shape[2]}")
    if 0 in tuple(f_shape[:2]):
        # TF computes an output (of zeros) from an empty window, sized by its own rule
        raise UnsupportedError(f"{what}: a filter with an empty window {list(f_shape)} is not "
                               f"supported")
    return Geometry(attrs, (h, w), f_shape[:2], what), n, c, f_shape[3]


def _check_out_backprop(what, g, n, c_out, dy_shape):
    if tuple(dy_shape) != g.shape_out(n, c_out):
        raise ValueError(f"{what}: out_backprop {list(dy_shape)} does not match the "
                         f"convolution output {list(g.shape_out(n, c_out))}")


@register
class DepthwiseConv2dNative(Op):
    mixlist = "white"
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        g, n, c, m = _depthwise_geometry(attrs, shapes[0], shapes[1], self.name)
        return [g.shape_out(n, c * m)]

    def compute(self, xs, attrs):
        x, f = xs
        g, n, c, m = _depthwise_geometry(attrs, x.shape, f.shape, self.name)
        xp = g.pad(g.to_nhwc(x))
        y = np.zeros((n, *g.out, c, m), np.float32)
        for kh, kw, index in g.taps():
            y += xp[index][..., None] * f[kh, kw]
        return g.from_nhwc(y.reshape(n, *g.out, c * m))


@register
class DepthwiseConv2dNativeBackpropInput(Op):
    mixlist = "white"
    type_attrs = {"T": FLOAT}
    const_inputs = ("input_sizes",)

    def shapes(self, shapes, attrs):
        f, dy = shapes
        x_shape = tuple(int(d) for d in attrs["input_sizes"])
        g, n, c, m = _depthwise_geometry(attrs, x_shape, f, self.name)
        _check_out_backprop(self.name, g, n, c * m, dy)
        return [x_shape]

    def compute(self, xs, attrs):
        f, dy = xs
        x_shape = tuple(int(d) for d in attrs["input_sizes"])
        g, n, c, m = _depthwise_geometry(attrs, x_shape, f.shape, self.name)
        dy = g.to_nhwc(dy).reshape(n, *g.out, c, m)
        dxp = g.pad(np.zeros(nhwc_shape(attrs, x_shape, self.name), np.float32))
        for kh, kw, index in g.taps():
            dxp[index] += (dy * f[kh, kw]).sum(axis=-1)
        return g.from_nhwc(g.crop(dxp))


@register
class DepthwiseConv2dNativeBackpropFilter(Op):
    mixlist = "white"
    type_attrs = {"T": FLOAT}
    const_inputs = ("filter_sizes",)

    def shapes(self, shapes, attrs):
        x, dy = shapes
        f_shape = tuple(int(d) for d in attrs["filter_sizes"])
        g, n, c, m = _depthwise_geometry(attrs, x, f_shape, self.name)
        _check_out_backprop(self.name, g, n, c * m, dy)
        return [f_shape]

    def compute(self, xs, attrs):
        x, dy = xs
        f_shape = tuple(int(d) for d in attrs["filter_sizes"])
        g, n, c, m = _depthwise_geometry(attrs, x.shape, f_shape, self.name)
        xp = g.pad(g.to_nhwc(x))
        dy = g.to_nhwc(dy).reshape(n, *g.out, c, m)
        df = np.zeros(f_shape, np.float32)
        for kh, kw, index in g.taps():
            df[kh, kw] = np.einsum("nijc,nijcm->cm", xp[index], dy)
        return df
