"""Reductions over constant axes (reduction_indices / dimension)."""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import COMPLEX, INDEX, NUMBER, Op, norm_axis, register, scalar


def _axes(attrs, rank):
    axes = [norm_axis(int(a), rank) for a in attrs["reduction_indices"]]
    if len(set(axes)) != len(axes):
        raise ValueError(f"reduction axes {list(attrs['reduction_indices'])} contain a "
                         f"duplicate dimension (input rank {rank})")
    return tuple(sorted(axes))


class Reduce(Op):
    type_attrs = {"T": NUMBER, "Tidx": INDEX}
    const_inputs = ("reduction_indices",)
    fn = None

    def shapes(self, shapes, attrs):
        s = shapes[0]
        axes = _axes(attrs, len(s))
        if attrs.get("keep_dims"):
            return [tuple(1 if i in axes else d for i, d in enumerate(s))]
        return [tuple(d for i, d in enumerate(s) if i not in axes)]

    def compute(self, xs, attrs):
        axes = _axes(attrs, xs[0].ndim)
        return type(self).fn(xs[0], axes, bool(attrs.get("keep_dims")))


@register
class Sum(Reduce):
    mixlist = "black"
    type_attrs = {"T": NUMBER + COMPLEX, "Tidx": INDEX}     # complex64: FFT gradients
    fn = staticmethod(lambda x, a, k: np.sum(x, axis=a, keepdims=k, dtype=x.dtype))


@register
class Prod(Reduce):
    mixlist = "black"
    fn = staticmethod(lambda x, a, k: np.prod(x, axis=a, keepdims=k, dtype=x.dtype))


def _lowest(dtype, sign):
    """The identity of Max (sign -1) / Min (+1) over an empty axis, as TF: -inf/+inf for floats,
    the integer type's lowest/highest."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return info.min if sign < 0 else info.max
    return sign * np.inf


@register
class Max(Reduce):
    fn = staticmethod(lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_lowest(x.dtype, -1)))


@register
class Min(Reduce):
    fn = staticmethod(lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_lowest(x.dtype, 1)))


@register
class Mean(Reduce):
    mixlist = "black"
    @staticmethod
    def fn(x, axes, keep):
        count = int(np.prod([x.shape[a] for a in axes]))
        if np.issubdtype(x.dtype, np.integer):          # TF truncates toward zero
            s = np.sum(x, axis=axes, keepdims=keep)
            return np.sign(s) * (np.abs(s) // max(count, 1))
        return np.mean(x, axis=axes, keepdims=keep, dtype=x.dtype)


@register
class All(Reduce):
    type_attrs = {"Tidx": INDEX}
    fn = staticmethod(lambda x, a, k: np.all(x, axis=a, keepdims=k))


@register
class Any(Reduce):
    type_attrs = {"Tidx": INDEX}
    fn = staticmethod(lambda x, a, k: np.any(x, axis=a, keepdims=k))


_FLOAT_MAX = {dt.DT_HALF: 65504.0, dt.DT_BFLOAT16: 3.3895313892515355e38,
              dt.DT_FLOAT: float(np.finfo(np.float32).max), dt.DT_DOUBLE: float(np.finfo(np.float64).max)}


class ArgReduce(Op):
    type_attrs = {"T": NUMBER, "Tidx": INDEX, "output_type": INDEX}
    const_inputs = ("dimension",)
    fn = None

    sign = 1                 # ArgMax; ArgMin -1

    def shapes(self, shapes, attrs):
        s = shapes[0]
        axis = norm_axis(scalar(attrs, "dimension"), len(s), "dimension")
        if s[axis] == 0:
            raise ValueError(f"Reduction axis {axis} is empty in shape {list(s)}")
        return [s[:axis] + s[axis + 1:]]

    def compute(self, xs, attrs):
        """As TF (Eigen's ArgMax/ArgMinTupleReducer): the scan starts at index 0 holding the
        dtype's lowest (highest) finite value and an element takes over only when strictly
        greater (smaller): the first index of the extreme, NaN skipped ([nan, 1, 2] -> 2), 0
        when nothing beats the start (all NaN, -inf ...)."""
        x = xs[0]
        axis = norm_axis(scalar(attrs, "dimension"), x.ndim)
        v = x.astype(np.float64) if not np.issubdtype(x.dtype, np.integer) else x
        if np.issubdtype(x.dtype, np.integer):
            return np.argmax(v, axis=axis) if self.sign > 0 else np.argmin(v, axis=axis)
        # the storage dtype's largest finite value (float16/bfloat16 arrive widened to float32)
        big = _FLOAT_MAX.get(attrs.get("T"), float(np.finfo(x.dtype).max))
        beats = (v > -big) if self.sign > 0 else (v < big)        # False for NaN
        key = np.where(beats, v * self.sign, -np.inf)
        arg = np.argmax(key, axis=axis)
        return np.where(np.any(beats, axis=axis), arg, 0)


@register
class ArgMax(ArgReduce): pass
@register
class ArgMin(ArgReduce): sign = -1
