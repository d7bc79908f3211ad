"""3-D convolution (Keras Conv3D) and its gradients: NDHWC or NCDHW inputs, DHWIO filters.
Kernel: runtime/kernels/conv3d.cc.

Grouped as Conv2D is (conv.py): a filter [d, h, w, C / G, OC] makes G groups, group g's output
channels [g * OC/G, (g+1) * OC/G) seeing input channels [g * C/G, (g+1) * C/G) (Keras'
Conv3D(groups=G), which TF's CPU computes only through XLA).

As for 2-D, the references compute channels-last and walk the window tap by tap
(spatial3d.py): each (kd, kh, kw) is a strided view of the padded input and one matmul with
that tap's [in, out] filter slice.
"""
import numpy as np

from graph_engine.ops.errors import UnsupportedError
from graph_engine.ops.base import FLOAT, INDEX, Op, register
from graph_engine.ops.spatial3d import Geometry3D


def _geometry(attrs, x_shape, f_shape, what, forward=False):
    """The window geometry, with `groups` (input channels / the filter's input depth) set."""
    if len(f_shape) != 5:
        raise ValueError(f"{what}: filter must be 5-D [d, h, w, in, out], got {list(f_shape)}")
    if forward and 0 in tuple(f_shape):                     # TF's check and message
        raise ValueError(f"{what}: filter must not have zero elements (i.e. all dimensions must "
                         f"be non-zero), got {list(f_shape)}")
    if not forward and 0 in tuple(f_shape):
        # TF's gradient kernels compute zeros from an empty filter: leave those to TF
        raise UnsupportedError(f"{what}: an empty filter {list(f_shape)} is not supported")
    g = Geometry3D(attrs, x_shape, f_shape[:3], f_shape[4], what)
    if g.c == 0:
        raise UnsupportedError(f"{what}: an input with no channels is not supported")
    if g.c % f_shape[3]:
        raise ValueError(f"{what}: input depth must be evenly divisible by filter depth: "
                         f"{g.c} vs {f_shape[3]}")
    g.groups = g.c // f_shape[3]
    if g.co % g.groups:
        raise ValueError(f"{what}: output depth must be evenly divisible by number of groups: "
                         f"{g.co} vs {g.groups}")
    return g


def _grouped(a, groups):
    """[..., G * k] -> [..., G, k]: the channels of each group on their own axis."""
    return a.reshape(*a.shape[:-1], groups, a.shape[-1] // groups)


def _matmul(a, b, groups):
    """a [..., C] @ b [C / G, OC] per group: group g's columns of a times its columns of b."""
    if groups == 1:
        return a @ b
    y = np.einsum("...gc,cgo->...go", _grouped(a, groups), _grouped(b, groups))
    return y.reshape(*a.shape[:-1], b.shape[-1])


def _matmul_t(dy, b, groups):
    """dy [..., OC] @ b^T per group: the input gradient's [..., C]."""
    if groups == 1:
        return dy @ b.T
    dx = np.einsum("...go,cgo->...gc", _grouped(dy, groups), _grouped(b, groups))
    return dx.reshape(*dy.shape[:-1], b.shape[0] * groups)


def _check_out_backprop(what, g, shape):
    if tuple(shape) != g.out_shape():
        raise ValueError(f"{what}: out_backprop {list(shape)} does not match the convolution "
                         f"output {list(g.out_shape())}")


def _sizes(attrs, name, what):
    sizes = tuple(int(d) for d in attrs[name])
    if len(sizes) != 5:
        raise ValueError(f"{what}: {name} must have 5 entries, got {list(sizes)}")
    return sizes


@register
class Conv3D(Op):
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        return [_geometry(attrs, shapes[0], shapes[1], self.name, forward=True).out_shape()]

    def compute(self, xs, attrs):
        x, f = xs
        g = _geometry(attrs, x.shape, f.shape, self.name)
        xp = g.pad(g.to_last(x))
        y = np.zeros((g.n, *g.out, g.co), np.float32)
        for tap, index in g.taps():
            y += _matmul(xp[index], f[tap], g.groups)
        return g.from_last(y)


@register
class Conv3DBackpropInputV2(Op):
    """d(loss)/d(input): each tap's output gradient times the filter, scattered back."""
    type_attrs = {"T": FLOAT, "Tshape": INDEX}
    const_inputs = ("input_sizes",)

    def shapes(self, shapes, attrs):
        x_shape = _sizes(attrs, "input_sizes", self.name)
        _check_out_backprop(self.name, _geometry(attrs, x_shape, shapes[0], self.name), shapes[1])
        return [x_shape]

    def compute(self, xs, attrs):
        f, dy = xs
        g = _geometry(attrs, _sizes(attrs, "input_sizes", self.name), f.shape, self.name)
        dy = g.to_last(dy)
        dxp = g.pad(np.zeros((g.n, *g.channels_last_shape(attrs["input_sizes"])[1:4], g.c), np.float32))
        for tap, index in g.taps():
            dxp[index] += _matmul_t(dy, f[tap], g.groups)
        return g.from_last(g.crop(dxp))


@register
class Conv3DBackpropFilterV2(Op):
    """d(loss)/d(filter): per tap, the input view transposed times the output gradient."""
    type_attrs = {"T": FLOAT}
    const_inputs = ("filter_sizes",)

    def shapes(self, shapes, attrs):
        f_shape = _sizes(attrs, "filter_sizes", self.name)
        _check_out_backprop(self.name, _geometry(attrs, shapes[0], f_shape, self.name), shapes[1])
        return [f_shape]

    def compute(self, xs, attrs):
        x, dy = xs
        g = _geometry(attrs, x.shape, _sizes(attrs, "filter_sizes", self.name), self.name)
        xp, dy = g.pad(g.to_last(x)), g.to_last(dy).reshape(-1, g.co)
        df = np.zeros((*g.k, g.c // g.groups, g.co), np.float32)
        for tap, index in g.taps():
            x_tap = _grouped(xp[index].reshape(-1, g.c), g.groups)           # [P, G, C/G]
            df[tap] = np.einsum("pgc,pgo->cgo", x_tap, _grouped(dy, g.groups)).reshape(df[tap].shape)
        return df
