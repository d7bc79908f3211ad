"""Batch-norm training statistics, GE-internal kernels made by
graph_engine/compiler/passes/fusion/batch_norm_training.py (docs/fusion.md), with their numpy
references (runtime kernel: runtime/kernels/moments.cc).

Both reduce over every axis of x but the channel axis `axis`, as Keras' BatchNormalization does
(axes [0, 1, 2] of NHWC): the results have x's rank with the reduced axes 1 (`keep_dims`) or
are 1-D [C] (`keep_dims` false, channels-last only).

  NpuMoments(x) -> (mean, variance)                 tf.nn.moments: the population variance
                                                    of the centred values
  NpuBatchNormGradSums(dy, x) -> (sum(dy), sum(dy * x))
                                                    the two sums BN's gradient reads
"""
import numpy as np

from graph_engine.ops.base import FLOAT, Op, norm_axis, register


class _ChannelStats(Op):
    internal = True
    type_attrs = {"T": FLOAT}
    n_inputs = 1

    def _axes(self, shape, attrs):
        if not shape:
            raise ValueError(f"{self.name}: x must have rank >= 1, got a scalar")
        axis = norm_axis(int(attrs.get("axis", -1)), len(shape))
        if not attrs.get("keep_dims", True) and axis != len(shape) - 1:
            raise ValueError(f"{self.name}: keep_dims false needs the channel axis last, got axis "
                             f"{attrs.get('axis')} of {list(shape)}")
        return axis, tuple(a for a in range(len(shape)) if a != axis)

    def shapes(self, shapes, attrs):
        if len(shapes) != self.n_inputs or any(tuple(s) != tuple(shapes[0]) for s in shapes):
            raise ValueError(f"{self.name}: needs {self.n_inputs} input(s) of one shape, got "
                             f"{[list(s) for s in shapes]}")
        x = tuple(shapes[0])
        axis, _ = self._axes(x, attrs)
        out = tuple(d if a == axis else 1 for a, d in enumerate(x)) \
            if attrs.get("keep_dims", True) else (x[axis],)
        return [out, out]

    def compute(self, xs, attrs):
        _, axes = self._axes(xs[0].shape, attrs)
        keep = bool(attrs.get("keep_dims", True))
        return [np.asarray(o, xs[0].dtype) for o in self.stats([x.astype(np.float64) for x in xs],
                                                               axes, keep)]


@register
class NpuMoments(_ChannelStats):
    """x -> (mean, variance): Mean(x), Mean(SquaredDifference(x, mean)) over the reduced axes."""

    @staticmethod
    def stats(xs, axes, keep):
        x = xs[0]
        count = np.prod([x.shape[a] for a in axes])
        mean = x.sum(axis=axes, keepdims=True) / count      # 0/0 = NaN for an empty batch, as Mean
        var = np.square(x - mean).sum(axis=axes, keepdims=keep) / count
        return [mean if keep else mean.reshape(-1), var]


@register
class NpuBatchNormGradSums(_ChannelStats):
    """(dy, x) -> (Sum(dy), Sum(dy * x)) over the reduced axes: the beta and scale gradients'
    reductions, one pass over dy and x."""
    n_inputs = 2

    @staticmethod
    def stats(xs, axes, keep):
        dy, x = xs
        return [dy.sum(axis=axes, keepdims=keep), (dy * x).sum(axis=axes, keepdims=keep)]
