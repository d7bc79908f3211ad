"""Cumsum, Cumprod and CumulativeLogsumexp (tf.math.cumsum/cumprod/cumulative_logsumexp; also
the gradients of Cumprod and Prod).
Kernel: runtime/kernels/scan.cc.

exclusive: element i combines the elements before i (the first is 0 or 1); reverse: scans from
the end of the axis. TF's gradients are scans themselves (Cumsum's is a Cumsum in the other
direction; Cumprod's and Prod's use Cumprod, Cumsum and DivNoNan), so no gradient op is needed.
"""
import numpy as np

from graph_engine.ops.base import FLOAT, INDEX, NUMBER, Op, norm_axis, register, scalar


class _Scan(Op):
    ufunc = None
    type_attrs = {"T": NUMBER, "Tidx": INDEX}
    const_inputs = ("axis",)

    def _axis(self, attrs, rank):
        if rank == 0:
            raise ValueError(f"{self.name}: input must have rank >= 1, got a scalar")
        return norm_axis(scalar(attrs, "axis"), rank)

    def shapes(self, shapes, attrs):
        self._axis(attrs, len(shapes[0]))
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x = xs[0]
        axis = self._axis(attrs, x.ndim)
        if attrs.get("reverse", False):
            x = np.flip(x, axis)
        out = self.ufunc.accumulate(x, axis=axis, dtype=x.dtype)
        if attrs.get("exclusive", False):
            first = np.full_like(np.take(out, [0], axis=axis), self.ufunc.identity)
            out = np.concatenate([first, np.delete(out, -1, axis=axis)], axis=axis)
        return np.flip(out, axis) if attrs.get("reverse", False) else out


@register
class Cumsum(_Scan):
    ufunc = np.add


@register
class Cumprod(_Scan):
    ufunc = np.multiply


@register
class CumulativeLogsumexp(_Scan):
    """log(cumsum(exp(x))) along axis, computed stably step by step as TF's scan:
    acc = max + log1p(exp(min - max)) with Eigen's min/max (a NaN element leaves both at acc);
    an exclusive scan starts at -inf."""
    type_attrs = {"T": FLOAT, "Tidx": INDEX}

    def compute(self, xs, attrs):
        x = xs[0]
        axis = self._axis(attrs, x.ndim)
        rev, excl = attrs.get("reverse", False), attrs.get("exclusive", False)
        xm = np.moveaxis(np.flip(x, axis) if rev else x, axis, 0)
        out = np.empty_like(xm)
        acc = np.full(xm.shape[1:], -np.inf, x.dtype)
        for i in range(xm.shape[0]):
            if excl:
                out[i] = acc
            lo, hi = np.where(xm[i] < acc, xm[i], acc), np.where(acc < xm[i], xm[i], acc)
            acc = np.where(hi < np.finfo(np.float32).min, hi, hi + np.log1p(np.exp(lo - hi)))
            if not excl:
                out[i] = acc
        out = np.moveaxis(out, 0, axis)
        return np.flip(out, axis) if rev else out
