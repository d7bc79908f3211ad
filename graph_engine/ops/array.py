"""Data-movement ops: reshape, transpose, concat/pack/unpack/split, slicing, fill, tile,
broadcast, pad, range. Their shape-like inputs are compile-time constants."""
import math

import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import ALL, COMPLEX, INDEX, NUMBER, Op, norm_axis, register, scalar, view_of


def _ints(v):
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _new_axis(axis, rank, what):
    """Where a new dimension goes into a rank-`rank` shape (ExpandDims, Pack): [-rank-1, rank]."""
    if not -rank - 1 <= axis <= rank:
        raise ValueError(f"{what} {axis} is out of range [{-rank - 1}, {rank}] for an input of "
                         f"rank {rank}")
    return axis % (rank + 1)


@register
class Reshape(Op):
    mixlist = "gray"
    reshapes = True
    type_attrs = {"T": ALL + COMPLEX, "Tshape": INDEX}
    const_inputs = ("shape",)

    def shapes(self, shapes, attrs):
        src, want = shapes[0], _ints(attrs["shape"])
        size = int(np.prod(src))
        for i, d in enumerate(want):
            if d < -1:
                raise ValueError(f"Reshape: size {i} of shape {want} must be non-negative or -1, "
                                 f"not {d}")
        if want.count(-1) > 1:
            raise ValueError(f"Reshape: at most one -1 in shape {want}")
        if -1 in want:
            known = int(np.prod([d for d in want if d != -1]))
            if known == 0 or size % known:
                raise ValueError(f"Reshape: cannot reshape {list(src)} into {want}")
            want[want.index(-1)] = size // known
        if int(np.prod(want)) != size:
            raise ValueError(f"Reshape: cannot reshape {list(src)} ({size} elements) into {want}")
        return [tuple(want)]

    def compute(self, xs, attrs):
        return xs[0].reshape(self.shapes([xs[0].shape], attrs)[0])


@register
class Squeeze(Op):
    mixlist = "gray"
    reshapes = True
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        s = shapes[0]
        dims = {norm_axis(int(a), len(s)) for a in attrs.get("squeeze_dims", [])}
        for a in dims:
            if s[a] != 1:
                raise ValueError(f"Squeeze: dimension {a} of {list(s)} is not 1")
        return [tuple(d for i, d in enumerate(s) if (i not in dims if dims else d != 1))]

    def compute(self, xs, attrs):
        return xs[0].reshape(self.shapes([xs[0].shape], attrs)[0])


@register
class ExpandDims(Op):
    mixlist = "gray"
    reshapes = True
    type_attrs = {"T": ALL, "Tdim": INDEX}
    const_inputs = ("dim",)

    def shapes(self, shapes, attrs):
        s = shapes[0]
        a = _new_axis(scalar(attrs, "dim"), len(s), "ExpandDims: dim")
        return [s[:a] + (1,) + s[a:]]

    def compute(self, xs, attrs):
        return xs[0].reshape(self.shapes([xs[0].shape], attrs)[0])


@register
class Transpose(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL, "Tperm": INDEX}
    const_inputs = ("perm",)

    def _perm(self, shape, attrs):
        """perm with negative entries counted from the end (TF accepts them)."""
        perm, rank = _ints(attrs["perm"]), len(shape)
        if len(perm) != rank:
            raise ValueError(f"Transpose: perm {perm} has {len(perm)} entries but the input "
                             f"{list(shape)} has rank {rank}")
        norm = [p + rank if p < 0 else p for p in perm]
        if sorted(norm) != list(range(rank)):
            raise ValueError(f"Transpose: perm {perm} is not a permutation of the {rank} axes "
                             f"of {list(shape)}")
        return norm

    def shapes(self, shapes, attrs):
        return [tuple(shapes[0][p] for p in self._perm(shapes[0], attrs))]

    def compute(self, xs, attrs):
        return np.transpose(xs[0], self._perm(xs[0].shape, attrs))


@register
class ConcatV2(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL, "Tidx": INDEX}
    const_inputs = ("axis",)

    def shapes(self, shapes, attrs):
        if not shapes[0]:
            raise ValueError("ConcatV2: cannot concatenate scalars (use tf.stack instead)")
        a = norm_axis(scalar(attrs, "axis"), len(shapes[0]))
        for s in shapes:
            if len(s) != len(shapes[0]):
                raise ValueError(f"ConcatV2: ranks of all inputs must match, got shapes "
                                 f"{[list(s) for s in shapes]}")
            if s[:a] + s[a + 1:] != shapes[0][:a] + shapes[0][a + 1:]:
                raise ValueError(f"ConcatV2: shapes {[list(s) for s in shapes]} differ outside "
                                 f"axis {a}")
        return [shapes[0][:a] + (sum(s[a] for s in shapes),) + shapes[0][a + 1:]]

    def compute(self, xs, attrs):
        return np.concatenate(xs, axis=norm_axis(scalar(attrs, "axis"), xs[0].ndim))


@register
class Pack(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"Pack: inputs must have equal shapes, got {[list(s) for s in shapes]}")
        a = _new_axis(attrs.get("axis", 0), len(shapes[0]), "Pack: axis")
        return [shapes[0][:a] + (len(shapes),) + shapes[0][a:]]

    def compute(self, xs, attrs):
        return np.stack(xs, axis=norm_axis(attrs.get("axis", 0), xs[0].ndim + 1))


@register
class Unpack(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        s = shapes[0]
        a = norm_axis(attrs.get("axis", 0), len(s))
        if s[a] != attrs["num"]:
            raise ValueError(f"Unpack: dimension {a} of {list(s)} is not num={attrs['num']}")
        return [s[:a] + s[a + 1:]] * attrs["num"]

    def compute(self, xs, attrs):
        a = norm_axis(attrs.get("axis", 0), xs[0].ndim)
        return [np.take(xs[0], i, axis=a) for i in range(attrs["num"])]


class _SplitBase(Op):
    def _sizes(self, shape, axis, attrs):
        raise NotImplementedError

    def shapes(self, shapes, attrs):
        s = shapes[0]
        a = norm_axis(scalar(attrs, "split_dim"), len(s), "split_dim")
        return [s[:a] + (n,) + s[a + 1:] for n in self._sizes(s, a, attrs)]

    def compute(self, xs, attrs):
        a = norm_axis(scalar(attrs, "split_dim"), xs[0].ndim)
        cuts = np.cumsum(self._sizes(xs[0].shape, a, attrs))[:-1]
        return np.split(xs[0], cuts, axis=a)


@register
class Split(_SplitBase):
    mixlist = "gray"
    type_attrs = {"T": ALL}
    const_inputs = ("split_dim",)

    def _sizes(self, shape, a, attrs):
        n = attrs["num_split"]
        if shape[a] % n:
            raise ValueError(f"Split: dimension {a} of {list(shape)} is not divisible by {n}")
        return [shape[a] // n] * n


@register
class SplitV(_SplitBase):
    mixlist = "gray"
    type_attrs = {"T": ALL, "Tlen": INDEX}
    const_inputs = ("size_splits", "split_dim")

    def _sizes(self, shape, a, attrs):
        sizes = _ints(attrs["size_splits"])
        if sizes.count(-1) > 1:
            raise ValueError(f"SplitV: size_splits {sizes} may contain only one -1")
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = shape[a] - (sum(sizes) + 1)
        if sum(sizes) != shape[a] or min(sizes) < 0:
            raise ValueError(f"SplitV: size_splits {sizes} do not add up to dimension {a} of "
                             f"{list(shape)}")
        return sizes


@register
class Slice(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL, "Index": INDEX}
    const_inputs = ("begin", "size")

    def _index(self, shape, attrs):
        begin, size = _ints(attrs["begin"]), _ints(attrs["size"])
        if len(begin) != len(shape) or len(size) != len(shape):
            raise ValueError(f"Slice: begin {begin} and size {size} must have {len(shape)} entries")
        index = []
        for d, b, n in zip(shape, begin, size):
            n = d - b if n == -1 else n
            if b < 0 or n < 0 or b + n > d:
                raise ValueError(f"Slice: begin {begin} size {size} out of bounds of {list(shape)}")
            index.append(slice(b, b + n))
        return tuple(index)

    def shapes(self, shapes, attrs):
        return [view_of(shapes[0])[self._index(shapes[0], attrs)].shape]

    def compute(self, xs, attrs):
        return xs[0][self._index(xs[0].shape, attrs)]


def strided_index(attrs):
    """TF StridedSlice (begin, end, strides and the five masks) as a numpy index tuple; numpy's
    basic indexing has the same clamping and implicit trailing ellipsis."""
    begin, end, strides = _ints(attrs["begin"]), _ints(attrs["end"]), _ints(attrs["strides"])
    if not len(begin) == len(end) == len(strides):
        raise ValueError(f"StridedSlice: begin {begin}, end {end} and strides {strides} must "
                         f"have the same length")
    index = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if attrs.get("ellipsis_mask", 0) & bit:       # TF ignores these entries' strides
            index.append(Ellipsis)
        elif attrs.get("new_axis_mask", 0) & bit:
            index.append(np.newaxis)
        elif s == 0:
            raise ValueError(f"StridedSlice: strides[{i}] must be non-zero, got strides {strides}")
        elif attrs.get("shrink_axis_mask", 0) & bit:
            if s < 0:                                  # TF's message
                raise ValueError(f"StridedSlice: only stride 1 allowed on non-range indexing "
                                 f"(strides[{i}] = {s} on a shrunk axis)")
            index.append(b)
        else:
            index.append(slice(None if attrs.get("begin_mask", 0) & bit else b,
                               None if attrs.get("end_mask", 0) & bit else e, s))
    return tuple(index)


def _strided_shape(shape, attrs):
    try:
        return view_of(shape)[strided_index(attrs)].shape
    except IndexError as e:
        raise ValueError(f"StridedSlice: {e} (input shape {list(shape)})") from None


@register
class StridedSlice(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL + COMPLEX, "Index": INDEX}      # complex64: FFT gradients
    const_inputs = ("begin", "end", "strides")

    def shapes(self, shapes, attrs):
        return [_strided_shape(shapes[0], attrs)]

    def compute(self, xs, attrs):
        return xs[0][strided_index(attrs)]


@register
class StridedSliceGrad(Op):
    """dy scattered into zeros of the forward input's shape."""
    mixlist = "gray"
    type_attrs = {"T": ALL + COMPLEX, "Index": INDEX}
    const_inputs = ("shape", "begin", "end", "strides")

    def shapes(self, shapes, attrs):
        out = tuple(_ints(attrs["shape"]))
        if _strided_shape(out, attrs) != tuple(shapes[0]):
            raise ValueError(f"StridedSliceGrad: dy {list(shapes[0])} does not match the slice "
                             f"of {list(out)}")
        return [out]

    def compute(self, xs, attrs):
        out = np.zeros(_ints(attrs["shape"]), xs[0].dtype)
        out[strided_index(attrs)] = xs[0]
        return out


@register
class Fill(Op):
    type_attrs = {"T": ALL, "index_type": INDEX}
    const_inputs = ("dims",)

    def shapes(self, shapes, attrs):
        if shapes[0] != ():
            raise ValueError(f"Fill: value must be a scalar, got shape {list(shapes[0])}")
        dims = _ints(attrs["dims"])
        if min(dims, default=0) < 0:
            raise ValueError(f"Fill: dims {dims} must be non-negative")
        return [tuple(dims)]

    def compute(self, xs, attrs):
        return np.full(_ints(attrs["dims"]), xs[0])


@register
class ZerosLike(Op):
    type_attrs = {"T": ALL + COMPLEX}    # complex64: gradients of complex TensorList reads
    fill = 0

    def shapes(self, shapes, attrs):
        return [shapes[0]]

    def compute(self, xs, attrs):
        return np.full_like(xs[0], self.fill)

    def value_from_shapes(self, shapes, attrs, out_dtypes):
        return [np.full(shapes[0], self.fill, dt.numpy_dtype(out_dtypes[0]))]


@register
class OnesLike(ZerosLike):
    fill = 1


@register
class Tile(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL + COMPLEX, "Tmultiples": INDEX}
    const_inputs = ("multiples",)

    def shapes(self, shapes, attrs):
        m = _ints(attrs["multiples"])
        if len(m) != len(shapes[0]) or min(m, default=0) < 0:
            raise ValueError(f"Tile: multiples {m} must be {len(shapes[0])} non-negative ints")
        return [tuple(d * k for d, k in zip(shapes[0], m))]

    def compute(self, xs, attrs):
        return np.tile(xs[0], _ints(attrs["multiples"]))


@register
class BroadcastTo(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL + COMPLEX, "Tidx": INDEX}
    const_inputs = ("shape",)

    def shapes(self, shapes, attrs):
        want = tuple(_ints(attrs["shape"]))
        if min(want, default=0) < 0:
            raise ValueError(f"BroadcastTo: shape {list(want)} must be non-negative")
        try:
            return [np.broadcast_to(view_of(shapes[0]), want).shape]
        except ValueError:
            raise ValueError(f"BroadcastTo: cannot broadcast {list(shapes[0])} to {list(want)}") from None

    def compute(self, xs, attrs):
        return np.broadcast_to(xs[0], _ints(attrs["shape"])).copy()


class _PadBase(Op):
    type_attrs = {"T": ALL, "Tpaddings": INDEX}
    const_inputs = ("paddings",)

    def _pads(self, shape, attrs):
        flat = _ints(attrs["paddings"])
        if len(flat) != 2 * len(shape):
            raise ValueError(f"{self.name}: paddings {flat} must be [{len(shape)}, 2] (the rank "
                             f"of input {list(shape)}, 2)")
        p = np.asarray(flat).reshape(-1, 2)
        if (p < 0).any():
            raise ValueError(f"{self.name}: paddings {p.tolist()} must be [{len(shape)}, 2] "
                             f"non-negative ints")
        return [tuple(r) for r in p]

    def shapes(self, shapes, attrs):
        return [tuple(d + a + b for d, (a, b) in zip(shapes[0], self._pads(shapes[0], attrs)))]


@register
class Pad(_PadBase):
    mixlist = "gray"
    def compute(self, xs, attrs):
        return np.pad(xs[0], self._pads(xs[0].shape, attrs))


@register
class PadV2(_PadBase):
    def compute(self, xs, attrs):
        return np.pad(xs[0], self._pads(xs[0].shape, attrs), constant_values=xs[1])


@register
class Range(Op):
    """Its inputs are all constant: small ranges fold, big ones are computed by the runtime
    kernel (kernels/range.cc) -- the length is worked out without materializing anything,
    so tf.range(2**31) costs no host memory at compile time."""
    type_attrs = {"Tidx": NUMBER}
    const_inputs = ("start", "limit", "delta")

    def _length(self, attrs):
        """TF's size: ceil(|limit - start| / |delta|) (integers exactly)."""
        start, limit, delta = (attrs[k][0] for k in ("start", "limit", "delta"))
        if delta == 0:
            raise ValueError("Range: delta must be non-zero")
        if (delta > 0 and start > limit) or (delta < 0 and start < limit):
            raise ValueError(f"Range: start {start} and limit {limit} are in the wrong order for "
                             f"delta {delta}")
        if all(isinstance(v, (int, np.integer)) for v in (start, limit, delta)):
            n = -(-abs(int(limit) - int(start)) // abs(int(delta)))
        else:
            q = abs((float(limit) - float(start)) / float(delta))
            if not math.isfinite(q) or q >= 2.0 ** 63:
                raise ValueError(f"Range: ((limit - start) / delta) = {q} is too large "
                                 f"(start {start}, limit {limit}, delta {delta})")
            n = math.ceil(q)
        if n >= 2 ** 63:
            raise ValueError(f"Range: {n} elements do not fit in int64")
        return n

    def shapes(self, shapes, attrs):
        return [(self._length(attrs),)]

    def compute(self, xs, attrs):
        """start + i * delta in the output dtype, as TF's CPU kernel computes each element."""
        n = self._length(attrs)
        start, delta = attrs["start"][0], attrs["delta"][0]
        t = dt.numpy_dtype(attrs["Tidx"])
        if np.issubdtype(t, np.integer):
            return (np.arange(n, dtype=np.int64) * int(delta) + int(start)).astype(t)
        w = np.float64 if t == np.float64 else np.float32       # narrow floats compute in float32
        return w(start) + np.arange(n).astype(w) * w(delta)


@register
class GatherV2(Op):
    """params gathered along `axis` at `indices`; the first batch_dims dimensions of params and
    indices pair up. An index outside [0, dim) gives zeros (TF's GPU behaviour; its CPU kernel
    raises instead)."""
    type_attrs = {"Tparams": ALL, "Tindices": INDEX, "Taxis": INDEX}
    const_inputs = ("axis",)

    def _dims(self, p_shape, i_shape, attrs):
        b = attrs.get("batch_dims", 0)
        b = b + len(i_shape) if b < 0 else b
        if not p_shape:
            raise ValueError("GatherV2: params must be at least 1-D, got a scalar")
        axis = norm_axis(scalar(attrs, "axis"), len(p_shape))
        if not 0 <= b <= min(axis, len(i_shape)) or tuple(p_shape[:b]) != tuple(i_shape[:b]):
            raise ValueError(f"GatherV2: batch_dims {b} does not fit params {list(p_shape)}, "
                             f"indices {list(i_shape)} and axis {axis}")
        return axis, b

    def shapes(self, shapes, attrs):
        p, i = shapes
        axis, b = self._dims(p, i, attrs)
        return [tuple(p[:axis]) + tuple(i[b:]) + tuple(p[axis + 1:])]

    def compute(self, xs, attrs):
        params, indices = xs
        axis, b = self._dims(params.shape, indices.shape, attrs)
        valid = (indices >= 0) & (indices < params.shape[axis])
        safe = np.where(valid, indices, 0)
        parts = [np.take(params[i], safe[i], axis=axis - b) for i in np.ndindex(params.shape[:b])]
        out = np.stack(parts).reshape(self.shapes([params.shape, indices.shape], attrs)[0])
        mask = valid.reshape(valid.shape[:b] + (1,) * (axis - b) + valid.shape[b:] +
                             (1,) * (params.ndim - axis - 1))
        return np.where(mask, out, np.zeros((), out.dtype))


@register
class UnsortedSegmentSum(Op):
    """Sums rows of data into num_segments segments; negative ids are dropped, ids past the last
    segment are an error (TF's CPU kernel: whenever data is not empty)."""
    type_attrs = {"T": NUMBER, "Tindices": INDEX, "Tnumsegments": INDEX}
    const_inputs = ("num_segments",)
    checks_values = True

    def shapes(self, shapes, attrs):
        d, ids = shapes
        if tuple(d[:len(ids)]) != tuple(ids):
            raise ValueError(f"UnsortedSegmentSum: segment_ids {list(ids)} must be a prefix of "
                             f"data {list(d)}")
        if scalar(attrs, "num_segments") < 0:
            raise ValueError(f"UnsortedSegmentSum: num_segments {scalar(attrs, 'num_segments')} "
                             f"must not be negative")
        return [(scalar(attrs, "num_segments"),) + tuple(d[len(ids):])]

    def compute(self, xs, attrs):
        data, ids = xs
        n = scalar(attrs, "num_segments")
        bad = np.flatnonzero(ids.reshape(-1) >= n)
        if data.size and bad.size:
            raise ValueError(f"segment_ids[{bad[0]}] = {ids.reshape(-1)[bad[0]]} is out of range "
                             f"[0, {n})")
        out = np.zeros((n,) + data.shape[ids.ndim:], data.dtype)
        keep = (ids >= 0) & (ids < n)
        np.add.at(out, ids[keep], data[keep])
        return out
