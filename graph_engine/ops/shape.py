"""Ops whose results follow from static shapes: with concrete shapes they always fold to
constants, so at run time they cost nothing and need no runtime kernel."""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import ALL, INDEX, Op, register


class ShapeOp(Op):
    type_attrs = {"T": ALL, "out_type": INDEX}
    trivial = True
    runtime_kernel = False

    def value_from_shapes(self, shapes, attrs, out_dtypes):
        return [np.asarray(v, dt.numpy_dtype(t))
                for v, t in zip(self.values(shapes), out_dtypes)]

    def shapes(self, shapes, attrs):
        return [np.shape(v) for v in self.values(shapes)]

    def compute(self, xs, attrs):
        return self.values([x.shape for x in xs])


@register
class Shape(ShapeOp):
    values = staticmethod(lambda shapes: [list(shapes[0])])


@register
class ShapeN(ShapeOp):
    values = staticmethod(lambda shapes: [list(s) for s in shapes])


@register
class Size(ShapeOp):
    values = staticmethod(lambda shapes: [int(np.prod(shapes[0]))])


@register
class Rank(ShapeOp):
    type_attrs = {"T": ALL}
    values = staticmethod(lambda shapes: [len(shapes[0])])


@register
class BroadcastGradientArgs(Op):
    """The axes each operand of a broadcasting binary op was broadcast along (its gradient sums
    over them). TF's rule: none if the shapes are equal, else every axis where the operand,
    left-padded with 1s, has size 1."""
    type_attrs = {"T": INDEX}
    const_inputs = ("s0", "s1")
    trivial = True
    runtime_kernel = False

    def _axes(self, attrs):
        s0, s1 = [int(d) for d in attrs["s0"]], [int(d) for d in attrs["s1"]]
        np.broadcast_shapes(tuple(s0), tuple(s1))     # raises if incompatible
        if s0 == s1:
            return [], []
        n = max(len(s0), len(s1))
        pad = lambda s: [1] * (n - len(s)) + s
        return [[i for i, d in enumerate(pad(s)) if d == 1] for s in (s0, s1)]

    def shapes(self, shapes, attrs):
        return [(len(r),) for r in self._axes(attrs)]

    def compute(self, xs, attrs):
        return [np.asarray(r, np.int64) for r in self._axes(attrs)]
