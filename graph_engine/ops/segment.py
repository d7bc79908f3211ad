"""Segment reductions, bincounts and other ops with static output shapes whose results depend on
index values read at run time. Kernel: runtime/kernels/segment.cc.

The output's size is a const input (num_segments, output_dim0, size, nbins), so shapes stay
static; the ids/indices are data, checked by the kernel as TF's CPU kernels check them (an id out
of range or unsorted ids are InvalidArgumentErrors, even when the result would be empty).
Segments nobody writes hold the reduction's identity as in TF: 0 (sums, means), 1 (products),
the dtype's lowest/highest finite value (max/min; float16 -65504, not -inf).

The segment ops with data-dependent output sizes (SegmentSum, SparseSegmentSum ...) and Where,
Unique, DynamicPartition ... are plugin kernels instead: tf_plugin_cc/dynamic_shape_ops.cc.
"""
import ml_dtypes
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import FLOAT, INDEX, NUMBER, Op, norm_axis, register, scalar


COUNTED = (dt.DT_INT32, dt.DT_INT64, dt.DT_FLOAT)   # TF's bincount/histogram types on the NPU


def _extreme(attrs, sign):
    """TF's initial value of a Max (sign -1) / Min (+1) segment: the stored dtype's lowest /
    highest finite value (Eigen::NumTraits<T>::lowest()/highest())."""
    t = dt.numpy_dtype(attrs["T"])
    info = np.iinfo(t) if np.issubdtype(t, np.integer) else ml_dtypes.finfo(t)  # bfloat16 too
    return info.min if sign < 0 else info.max


def _segment_shape(name, d, n_ids, segments):
    if segments < 0:
        raise ValueError(f"{name}: num_segments {segments} must not be negative")
    return (segments,) + tuple(d[n_ids:])


# ---- UnsortedSegment{Max,Min,Prod} (UnsortedSegmentSum: ops/array.py) -----------------------

class _UnsortedSegment(Op):
    """data[i...] combined into output[segment_ids[i]]; negative ids are dropped, ids past the
    last segment are an error whenever data is not empty (as TF's CPU kernel)."""
    type_attrs = {"T": NUMBER, "Tindices": INDEX, "Tnumsegments": INDEX}
    const_inputs = ("num_segments",)
    checks_values = True

    def init(self, attrs):
        raise NotImplementedError

    def step(self, acc, x):
        raise NotImplementedError

    def shapes(self, shapes, attrs):
        d, ids = shapes
        if tuple(d[:len(ids)]) != tuple(ids):
            raise ValueError(f"{self.name}: segment_ids {list(ids)} must be a prefix of data "
                             f"{list(d)}")
        return [_segment_shape(self.name, d, len(ids), scalar(attrs, "num_segments"))]

    def compute(self, xs, attrs):
        data, ids = xs
        n = scalar(attrs, "num_segments")
        flat_ids = ids.reshape(-1)
        bad = np.flatnonzero(flat_ids >= n)
        if data.size and bad.size:
            raise ValueError(f"segment_ids[{bad[0]}] = {flat_ids[bad[0]]} is out of range [0, {n})")
        rows = data.reshape((flat_ids.size,) + data.shape[ids.ndim:])
        out = np.full((n,) + data.shape[ids.ndim:], self.init(attrs), data.dtype)
        for i, s in enumerate(flat_ids):          # in index order, as the kernel
            if 0 <= s < n:
                out[s] = self.step(out[s], rows[i])
        return out


@register
class UnsortedSegmentMax(_UnsortedSegment):
    def init(self, attrs):
        return _extreme(attrs, -1)

    def step(self, acc, x):
        return np.where(x < acc, acc, x)         # Eigen's maxi: a NaN in data is taken


@register
class UnsortedSegmentMin(_UnsortedSegment):
    def init(self, attrs):
        return _extreme(attrs, 1)

    def step(self, acc, x):
        return np.where(acc < x, acc, x)


@register
class UnsortedSegmentProd(_UnsortedSegment):
    def init(self, attrs):
        return 1

    def step(self, acc, x):
        return acc * x


# ---- SparseSegment{Sum,Mean,SqrtN}WithNumSegments and their gradients ------------------------

_NORMS = {"Sum": lambda n: 1.0, "Mean": lambda n: 1.0 / max(n, 1),
          "SqrtN": lambda n: 1.0 / np.sqrt(max(n, 1))}


class _SparseSegment(Op):
    """output[segment_ids[i]] += data[indices[i]], scaled per segment by 1, 1/n or 1/sqrt(n).
    segment_ids must be sorted (TF's CPU kernel checks it); empty segments are 0."""
    type_attrs = {"T": FLOAT, "Tidx": INDEX, "Tsegmentids": INDEX, "Tnumsegments": INDEX}
    const_inputs = ("num_segments",)
    checks_values = True
    norm = "Sum"

    def shapes(self, shapes, attrs):
        d, i, s = shapes
        if len(i) != 1 or len(s) != 1:
            raise ValueError(f"{self.name}: indices {list(i)} and segment_ids {list(s)} must be "
                             f"vectors")
        if i[0] != s[0]:
            raise ValueError(f"{self.name}: segment_ids and indices should have same size.")
        if len(d) < 1:
            raise ValueError(f"{self.name}: data must be at least 1-D, got a scalar")
        return [_segment_shape(self.name, d, 1, scalar(attrs, "num_segments"))]

    def compute(self, xs, attrs):
        data, indices, ids = xs
        n = scalar(attrs, "num_segments")
        if ids.size and ids[-1] >= n:
            raise ValueError("segment ids must be < num_segments")
        if np.any(np.diff(ids) < 0):
            raise ValueError("segment ids are not increasing")
        if ids.size and ids[0] < 0:
            raise ValueError(f"Segment id {ids[0]} out of range [0, {n}), possibly because "
                             f"'segment_ids' input is not sorted.")
        bad = np.flatnonzero((indices < 0) | (indices >= data.shape[0]))
        if bad.size:
            raise ValueError(f"Bad: indices[{bad[0]}] == {indices[bad[0]]} out of range "
                             f"[0, {data.shape[0]})")
        out = np.zeros((n,) + data.shape[1:], data.dtype)
        np.add.at(out, ids, data[indices])
        counts = np.bincount(ids, minlength=n)
        scale = np.array([_NORMS[self.norm](c) for c in counts], data.dtype)
        return out * scale.reshape((n,) + (1,) * (data.ndim - 1))


@register
class SparseSegmentSumWithNumSegments(_SparseSegment):
    type_attrs = {"T": NUMBER, "Tidx": INDEX, "Tsegmentids": INDEX, "Tnumsegments": INDEX}


@register
class SparseSegmentMeanWithNumSegments(_SparseSegment):
    norm = "Mean"


@register
class SparseSegmentSqrtNWithNumSegments(_SparseSegment):
    norm = "SqrtN"


class _SparseSegmentGrad(Op):
    """The gradient of SparseSegment<norm>: output[indices[i]] += grad[segment_ids[i]] * scale of
    that segment (segment_ids need not be sorted); output has output_dim0 rows. Nothing is
    checked when the output or the index list is empty, as in TF."""
    type_attrs = {"T": FLOAT, "Tidx": INDEX, "Tsegmentids": INDEX}
    const_inputs = ("output_dim0",)
    checks_values = True
    norm = "Sum"

    def shapes(self, shapes, attrs):
        g, i, s = shapes
        if len(i) != 1 or len(s) != 1 or i[0] != s[0]:
            raise ValueError(f"{self.name}: indices {list(i)} and segment_ids {list(s)} must be "
                             f"vectors of the same size")
        if len(g) < 1:
            raise ValueError(f"{self.name}: grad must be at least 1-D, got a scalar")
        dim0 = scalar(attrs, "output_dim0")
        if dim0 < 0:
            raise ValueError(f"{self.name}: output_dim0 {dim0} must not be negative")
        return [(dim0,) + tuple(g[1:])]

    def compute(self, xs, attrs):
        grad, indices, ids = xs
        dim0 = scalar(attrs, "output_dim0")
        if dim0 == 0 or ids.size == 0:     # TF returns before any check (output unwritten)
            return np.zeros((dim0,) + grad.shape[1:], grad.dtype)
        if ids[-1] >= grad.shape[0]:
            raise ValueError("Invalid number of segments")
        bad = np.flatnonzero((ids < 0) | (ids >= grad.shape[0]))
        if bad.size:
            raise ValueError(f"Segment id {ids[bad[0]]} out of range [0, {grad.shape[0]}).")
        bad = np.flatnonzero((indices < 0) | (indices >= dim0))
        if bad.size:
            raise ValueError(f"Index {indices[bad[0]]} out of range [0, {dim0}).")
        counts = np.bincount(ids, minlength=grad.shape[0])
        scale = np.array([_NORMS[self.norm](c) for c in counts], grad.dtype)
        rows = grad * scale.reshape((-1,) + (1,) * (grad.ndim - 1))
        out = np.zeros((dim0,) + grad.shape[1:], grad.dtype)
        np.add.at(out, indices, rows[ids])
        return out


@register
class SparseSegmentSumGrad(_SparseSegmentGrad):
    pass


@register
class SparseSegmentMeanGrad(_SparseSegmentGrad):
    norm = "Mean"


@register
class SparseSegmentSqrtNGrad(_SparseSegmentGrad):
    norm = "SqrtN"


# ---- Bincount, DenseBincount, HistogramFixedWidth --------------------------------------------

def _bincount(name, arr, weights, size, binary):
    """Rows of arr counted into `size` bins (values >= size are dropped, negatives an error):
    weights summed per bin, 1 per occurrence without weights, 1 per bin hit with binary."""
    if np.any(arr < 0):
        raise ValueError("Input arr must be non-negative!" if name == "Bincount" else
                         f"Input 'in' must be non-negative! Negative input value found: "
                         f"{arr[arr < 0][0]}")
    rows = arr if arr.ndim == 2 else arr.reshape(1, -1)      # (reshape(-1, 0) is ambiguous)
    w = weights.reshape(rows.shape) if weights.size else None
    out = np.zeros((rows.shape[0], size), weights.dtype)
    for r, row in enumerate(rows):
        keep = row < size
        if binary:
            out[r, row[keep]] = 1
        else:
            np.add.at(out[r], row[keep], 1 if w is None else w[r][keep])
    return out


def _check_weights(name, a, w, message):
    if tuple(w) not in ((0,), tuple(a)):
        raise ValueError(f"{name}: {message} (arr {list(a)}, weights {list(w)})")


def _check_size(name, size):
    if size < 0:
        raise ValueError(f"{name}: size ({size}) must be non-negative")


@register
class Bincount(Op):
    type_attrs = {"T": COUNTED}
    const_inputs = ("size",)
    checks_values = True

    def shapes(self, shapes, attrs):
        a, w = shapes
        if int(np.prod(a)) != int(np.prod(w)) and tuple(w) != (0,):
            raise ValueError(f"{self.name}: Input indices and weights must have the same size. "
                             f"(arr {list(a)}, weights {list(w)})")
        _check_size(self.name, scalar(attrs, "size"))
        return [(scalar(attrs, "size"),)]

    def compute(self, xs, attrs):
        arr, weights = xs
        flat = arr.reshape(1, -1)
        w = weights.reshape(1, -1) if weights.size else weights
        return _bincount(self.name, flat, w, scalar(attrs, "size"), False)[0]


@register
class DenseBincount(Op):
    type_attrs = {"T": COUNTED, "Tidx": INDEX}
    const_inputs = ("size",)
    checks_values = True

    def shapes(self, shapes, attrs):
        a, w = shapes
        if len(a) > 2:
            raise ValueError(f"{self.name}: Shape must be at most rank 2 but is rank {len(a)}")
        _check_weights(self.name, a, w, "`weights` must be the same shape as `arr` or a "
                       "length-0 `Tensor`")
        size = scalar(attrs, "size")
        _check_size(self.name, size)
        return [(a[0], size) if len(a) == 2 else (size,)]

    def compute(self, xs, attrs):
        arr, weights = xs
        out = _bincount(self.name, arr, weights, scalar(attrs, "size"),
                        bool(attrs.get("binary_output", False)))
        return out if arr.ndim == 2 else out[0]


@register
class HistogramFixedWidth(Op):
    """Counts of values in nbins equal-width bins of value_range; values outside fall into the
    first/last bin. The bin is computed in double, as TF's CPU kernel."""
    type_attrs = {"T": COUNTED, "dtype": INDEX}
    const_inputs = ("nbins",)
    checks_values = True

    def shapes(self, shapes, attrs):
        if tuple(shapes[1]) != (2,):
            raise ValueError(f"{self.name}: value_range must have shape [2], got "
                             f"{list(shapes[1])}")
        nbins = scalar(attrs, "nbins")
        if nbins <= 0:
            raise ValueError(f"nbins should be a positive number, but got '{nbins}'")
        return [(nbins,)]

    def compute(self, xs, attrs):
        values, vr = xs
        nbins = scalar(attrs, "nbins")
        lo, hi = vr[0], vr[1]
        if not lo < hi:
            raise ValueError(f"value_range should satisfy value_range[0] < value_range[1], but "
                             f"got '[{lo}, {hi}]'")
        v = values.reshape(-1).astype(np.float64)
        if np.isnan(v).any():
            raise ValueError("Histogram values must not contain NaN")
        step = float(hi - lo) / nbins
        idx = np.clip((v - float(lo)) / step, 0, nbins - 1).astype(np.int64)
        return np.bincount(idx, minlength=nbins)


# ---- EuclideanNorm ------------------------------------------------------

@register
class EuclideanNorm(Op):
    """sqrt(sum(x * x)) over constant axes; integers square, sum and take the root in the
    integer type as TF (the root truncated)."""
    type_attrs = {"T": NUMBER, "Tidx": INDEX}
    const_inputs = ("reduction_indices",)

    def _axes(self, attrs, rank):
        axes = [norm_axis(int(a), rank) for a in attrs["reduction_indices"]]
        if len(set(axes)) != len(axes):
            raise ValueError(f"{self.name}: reduction axes {list(attrs['reduction_indices'])} "
                             f"contain a duplicate dimension (input rank {rank})")
        return tuple(sorted(axes))

    def shapes(self, shapes, attrs):
        s = shapes[0]
        axes = self._axes(attrs, len(s))
        if attrs.get("keep_dims"):
            return [tuple(1 if i in axes else d for i, d in enumerate(s))]
        return [tuple(d for i, d in enumerate(s) if i not in axes)]

    def compute(self, xs, attrs):
        x = xs[0]
        axes = self._axes(attrs, x.ndim)
        s = np.sum(x * x, axis=axes, keepdims=bool(attrs.get("keep_dims")), dtype=x.dtype)
        if np.issubdtype(x.dtype, np.integer):
            return np.sqrt(s.astype(np.float64)).astype(x.dtype)
        return np.sqrt(s)
