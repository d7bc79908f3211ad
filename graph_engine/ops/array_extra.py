"""More array ops: reversal, space/depth/batch rearrangement, tensor scatter, top-k and searches.

Kernels: runtime/kernels/array_extra.cc (pure data movement, planned at load as one source
element per output element), runtime/kernels/search.cc (top-k, buckets, sorted searches) and
runtime/kernels/tensor_scatter.cc. Every value that fixes an output shape (axes, block shapes,
paddings, depth, k, num ...) is a const input; data-dependent values (indices, sequence
lengths) are checked at run time with TF's messages.
"""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.array import ConcatV2, _ints, _strided_shape, strided_index
from graph_engine.ops.base import (ALL, FLOAT, INDEX, INT, NUMBER, Op, norm_axis, register,
                                   scalar)
from graph_engine.ops.errors import OutOfRangeInputError
from graph_engine.ops.scatter import _check_k, _index_rows


# ---- reversal and rolling ---------------------------------------------------------------------

@register
class ReverseV2(Op):
    mixlist = "gray"
    type_attrs = {"T": ALL, "Tidx": INDEX}
    const_inputs = ("axis",)

    def _axes(self, shape, attrs):
        if not shape or 0 in shape:      # TF returns a scalar or empty input unchecked
            return ()
        rank = len(shape)
        axes = [norm_axis(a, rank) for a in _ints(attrs["axis"])]
        if len(set(axes)) != len(axes):
            raise ValueError(f"ReverseV2: axis {_ints(attrs['axis'])} specifies a dimension "
                             f"more than once")
        return tuple(axes)

    def shapes(self, shapes, attrs):
        self._axes(shapes[0], attrs)
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        return np.flip(xs[0], self._axes(xs[0].shape, attrs))


@register
class Roll(Op):
    """Shifts along axes; shifts of a repeated axis add up (as np.roll)."""
    mixlist = "gray"
    type_attrs = {"T": ALL, "Tshift": INDEX, "Taxis": INDEX}
    const_inputs = ("shift", "axis")

    def _shifts(self, shape, attrs):
        shift, axis = _ints(attrs["shift"]), _ints(attrs["axis"])
        if len(shift) != len(axis):
            raise ValueError(f"Roll: shift {shift} and axis {axis} must have the same size")
        return shift, [norm_axis(a, len(shape)) for a in axis]

    def shapes(self, shapes, attrs):
        self._shifts(shapes[0], attrs)
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        shift, axis = self._shifts(xs[0].shape, attrs)
        return np.roll(xs[0], shift, axis) if axis else xs[0].copy()


@register
class ReverseSequence(Op):
    """Reverses the first seq_lengths[b] entries along seq_dim of each batch_dim entry b."""
    type_attrs = {"T": ALL, "Tlen": INDEX}
    checks_values = True

    def _dims(self, shape, lens, attrs):
        rank = len(shape)
        seq, batch = attrs["seq_dim"], attrs.get("batch_dim", 0)
        if not (0 <= seq < rank and 0 <= batch < rank) or seq == batch:
            raise ValueError(f"ReverseSequence: seq_dim {seq} and batch_dim {batch} must be "
                             f"different axes of the rank-{rank} input")
        if tuple(lens) != (shape[batch],):
            raise ValueError(f"ReverseSequence: seq_lengths {list(lens)} must be "
                             f"[input.dims({batch})] = [{shape[batch]}]")
        return seq, batch

    def shapes(self, shapes, attrs):
        self._dims(shapes[0], shapes[1], attrs)
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, lens = xs
        seq, batch = self._dims(x.shape, lens.shape, attrs)
        out = x.copy()
        for b, n in enumerate(lens.tolist()):
            if n < 0:
                raise ValueError(f"seq_lens({b}) < 0")
            if n > x.shape[seq]:
                raise ValueError(f"seq_lens({b}) > input.dims({seq})")
            src = [slice(None)] * x.ndim
            src[batch], src[seq] = b, slice(0, n)
            out[tuple(src)] = np.flip(x[tuple(src)], seq - (batch < seq))
        return out


# ---- space, depth and batch rearrangement -----------------------------------------------------

def _nhwc(op, shape, attrs):
    if attrs.get("data_format", "NHWC") not in ("NHWC", b"NHWC"):
        raise ValueError(f"{op}: only data_format NHWC is supported (as on TF's CPU), got "
                         f"{attrs['data_format']}")
    if len(shape) != 4:
        raise ValueError(f"{op}: input must be 4-D, got shape {list(shape)}")
    b = attrs["block_size"]
    if b < 2:
        raise ValueError(f"{op}: block_size {b} must be at least 2")
    return b


@register
class DepthToSpace(Op):
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        n, h, w, c = shapes[0]
        b = _nhwc(self.name, shapes[0], attrs)
        if c % (b * b):
            raise ValueError(f"DepthToSpace: input depth {c} is not divisible by block_size "
                             f"squared {b * b}")
        return [(n, h * b, w * b, c // (b * b))]

    def compute(self, xs, attrs):
        x = xs[0]
        n, h, w, c = x.shape
        b = attrs["block_size"]
        y = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
        return y.reshape(self.shapes([x.shape], attrs)[0])


@register
class SpaceToDepth(Op):
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        n, h, w, c = shapes[0]
        b = _nhwc(self.name, shapes[0], attrs)
        if h % b or w % b:
            raise ValueError(f"SpaceToDepth: image size [{h}, {w}] is not divisible by "
                             f"block_size {b}")
        return [(n, h // b, w // b, c * b * b)]

    def compute(self, xs, attrs):
        x = xs[0]
        n, h, w, c = x.shape
        b = attrs["block_size"]
        y = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
        return y.reshape(self.shapes([x.shape], attrs)[0])


def _block(op, shape, block, pairs, what):
    """block_shape [M] and paddings/crops [M, 2] checked against input `shape`."""
    m = len(block)
    if m < 1 or len(shape) < m + 1:
        raise ValueError(f"{op}: input {list(shape)} must have rank at least {m + 1} for "
                         f"block_shape {block}")
    if len(pairs) != 2 * m:
        raise ValueError(f"{op}: {what} must be [{m}, 2], got {len(pairs)} values")
    if min(block) < 1:
        raise ValueError(f"{op}: block_shape {block} must be positive")
    if min(pairs) < 0:
        raise ValueError(f"{op}: {what} {pairs} must be non-negative")
    return np.asarray(pairs).reshape(m, 2).tolist()


@register
class SpaceToBatchND(Op):
    """The padded spatial dims split into (dim / block, block); the block offsets go to the
    front of the batch dimension."""
    type_attrs = {"T": NUMBER, "Tblock_shape": INDEX, "Tpaddings": INDEX}
    const_inputs = ("block_shape", "paddings")

    def _args(self, attrs):
        return _ints(attrs["block_shape"]), _ints(attrs["paddings"])

    def shapes(self, shapes, attrs):
        s = shapes[0]
        block, pairs = self._args(attrs)
        pads = _block(self.name, s, block, pairs, "paddings")
        out = [s[0] * int(np.prod(block))]
        for i, (b, (lo, hi)) in enumerate(zip(block, pads)):
            padded = s[1 + i] + lo + hi
            if padded % b:
                raise ValueError(f"{self.name}: padded shape {padded} of dimension {1 + i} must "
                                 f"be divisible by block_shape {b}")
            out.append(padded // b)
        return [tuple(out) + tuple(s[1 + len(block):])]

    def compute(self, xs, attrs):
        x = xs[0]
        block, pairs = self._args(attrs)
        m = len(block)
        pads = _block(self.name, x.shape, block, pairs, "paddings")
        p = np.pad(x, [(0, 0)] + pads + [(0, 0)] * (x.ndim - 1 - m))
        split = [p.shape[0]]
        for i, b in enumerate(block):
            split += [p.shape[1 + i] // b, b]
        y = p.reshape(split + list(p.shape[1 + m:]))
        perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
        y = y.transpose(perm + list(range(1 + 2 * m, y.ndim)))
        return y.reshape(self.shapes([x.shape], attrs)[0])


@register
class BatchToSpaceND(Op):
    """SpaceToBatchND's inverse: batch split into (block..., batch), interleaved into the
    spatial dims, then cropped."""
    type_attrs = {"T": NUMBER, "Tblock_shape": INDEX, "Tcrops": INDEX}
    const_inputs = ("block_shape", "crops")

    def _args(self, attrs):
        return _ints(attrs["block_shape"]), _ints(attrs["crops"])

    def shapes(self, shapes, attrs):
        s = shapes[0]
        block, pairs = self._args(attrs)
        crops = _block(self.name, s, block, pairs, "crops")
        prod = int(np.prod(block))
        if s[0] % prod:
            raise ValueError(f"{self.name}: input batch dimension ({s[0]}) is not divisible by "
                             f"product of block sizes ({prod})")
        out = [s[0] // prod]
        for i, (b, (lo, hi)) in enumerate(zip(block, crops)):
            full = s[1 + i] * b
            if lo + hi > full:
                raise ValueError(f"{self.name}: crops {[lo, hi]} are larger than the "
                                 f"uncropped dimension {full}")
            out.append(full - lo - hi)
        return [tuple(out) + tuple(s[1 + len(block):])]

    def compute(self, xs, attrs):
        x = xs[0]
        block, pairs = self._args(attrs)
        m = len(block)
        crops = _block(self.name, x.shape, block, pairs, "crops")
        y = x.reshape(block + [x.shape[0] // int(np.prod(block))] + list(x.shape[1:]))
        perm = [m]
        for i in range(m):
            perm += [m + 1 + i, i]
        y = y.transpose(perm + list(range(2 * m + 1, y.ndim)))
        y = y.reshape([y.shape[0]] + [x.shape[1 + i] * b for i, b in enumerate(block)]
                      + list(x.shape[1 + m:]))
        index = (slice(None),) + tuple(slice(lo, y.shape[1 + i] - hi)
                                       for i, (lo, hi) in enumerate(crops))
        return y[index]


def _square(cls, pairs_arg):
    """SpaceToBatch/BatchToSpace: the ND op with block_shape [block_size] * 2 on 4-D input."""
    class Square(cls):
        type_attrs = {"T": NUMBER, "Tidx": INDEX} if pairs_arg == "crops" else \
            {"T": NUMBER, "Tpaddings": INDEX}
        const_inputs = (pairs_arg,)

        def _args(self, attrs):
            b = attrs["block_size"]
            if b < 2:
                raise ValueError(f"{self.name}: block_size {b} must be at least 2")
            return [b, b], _ints(attrs[pairs_arg])

        def shapes(self, shapes, attrs):
            if len(shapes[0]) != 4:
                raise ValueError(f"{self.name}: input must be 4-D, got {list(shapes[0])}")
            return super().shapes(shapes, attrs)
    return Square


@register
class SpaceToBatch(_square(SpaceToBatchND, "paddings")):
    pass


@register
class BatchToSpace(_square(BatchToSpaceND, "crops")):
    pass


# ---- patches ----------------------------------------------------------------------------------

def _window(size, k, stride, rate, padding):
    """(output size, padding before) of one spatial dim, as TF's GetWindowedOutputSize (its
    VALID size divides in C++, truncating: a window up to a stride too large gives size 0)."""
    eff = (k - 1) * rate + 1
    if padding in ("VALID", b"VALID"):
        num = size - eff + stride
        out = num // stride if num >= 0 else -(-num // stride)
        if out < 0:
            raise ValueError(f"Computed output size would be negative: {out} [input_size: "
                             f"{size}, effective_filter_size: {eff}, stride: {stride}]")
        return out, 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + eff - size, 0) // 2


class _Patches(Op):
    """Each output position holds its window of the zero-padded input, flattened
    (kernel dims..., channels)."""
    type_attrs = {"T": NUMBER}
    spatial = 2

    def _geometry(self, shape, attrs):
        r = self.spatial + 2
        if len(shape) != r:
            raise ValueError(f"{self.name}: input must be {r}-D, got {list(shape)}")
        ks, st = list(attrs["ksizes"]), list(attrs["strides"])
        rates = list(attrs.get("rates", [1] * r))
        for what, v in (("ksizes", ks), ("strides", st), ("rates", rates)):
            if len(v) != r or v[0] != 1 or v[-1] != 1:
                raise ValueError(f"{self.name}: {what} {v} must be {r} positive values with "
                                 f"the first and last equal to 1")
            if min(v) < 1:
                raise OutOfRangeInputError(f"{what} is out of range: {v} (TF's class for it)")
        if attrs["padding"] not in ("VALID", "SAME", b"VALID", b"SAME"):
            raise ValueError(f"{self.name}: padding {attrs['padding']} must be VALID or SAME")
        return [(k, s, q) + _window(n, k, s, q, attrs["padding"])
                for n, k, s, q in zip(shape[1:-1], ks[1:-1], st[1:-1], rates[1:-1])]

    def shapes(self, shapes, attrs):
        s = shapes[0]
        g = self._geometry(s, attrs)
        return [(s[0],) + tuple(d[3] for d in g) + (int(np.prod([d[0] for d in g])) * s[-1],)]

    def compute(self, xs, attrs):
        x = xs[0]
        g = self._geometry(x.shape, attrs)
        out = np.zeros(self.shapes([x.shape], attrs)[0][:-1] + tuple(d[0] for d in g)
                       + (x.shape[-1],), x.dtype)
        for pos in np.ndindex(*[d[3] for d in g]):
            for tap in np.ndindex(*[d[0] for d in g]):
                src = [o * s - before + t * q for o, t, (k, s, q, n, before) in zip(pos, tap, g)]
                if all(0 <= i < n for i, n in zip(src, x.shape[1:-1])):
                    out[(slice(None),) + pos + tap] = x[(slice(None),) + tuple(src)]
        return out.reshape(self.shapes([x.shape], attrs)[0])


@register
class ExtractImagePatches(_Patches):
    pass


@register
class ExtractVolumePatches(_Patches):
    spatial = 3


# ---- construction -----------------------------------------------------------------------------

@register
class OneHot(Op):
    type_attrs = {"T": ALL, "TI": INT}
    const_inputs = ("depth",)

    def _axis(self, shape, attrs):
        axis = attrs.get("axis", -1)
        if not -1 <= axis <= len(shape):
            raise ValueError(f"OneHot: Expected axis to be -1 or between [0, {len(shape) + 1}). "
                             f" But received: {axis}")
        return len(shape) if axis == -1 else axis

    def shapes(self, shapes, attrs):
        i, on, off = shapes
        if on != () or off != ():
            raise ValueError(f"OneHot: on_value {list(on)} and off_value {list(off)} must be "
                             f"scalars")
        depth = scalar(attrs, "depth")
        if depth < 0:
            raise ValueError(f"OneHot: depth must be non-negative, got: {depth}")
        a = self._axis(i, attrs)
        return [tuple(i[:a]) + (depth,) + tuple(i[a:])]

    def compute(self, xs, attrs):
        indices, on, off = xs
        hot = indices[..., None] == np.arange(scalar(attrs, "depth"))
        out = np.where(hot, on, off).astype(on.dtype)
        return np.moveaxis(out, -1, self._axis(indices.shape, attrs))


@register
class LinSpace(Op):
    """start + i * (stop - start) / (num - 1) in float32, the last element exactly stop."""
    type_attrs = {"T": (dt.DT_FLOAT,), "Tidx": INDEX}
    const_inputs = ("num",)

    def shapes(self, shapes, attrs):
        if shapes[0] != () or shapes[1] != ():
            raise ValueError(f"LinSpace: start {list(shapes[0])} and stop {list(shapes[1])} "
                             f"must be scalars")
        num = scalar(attrs, "num")
        if num <= 0:
            raise ValueError(f"LinSpace: Requires num > 0: {num}")
        return [(num,)]

    def compute(self, xs, attrs):
        start, stop = (np.float32(x) for x in xs)
        num = scalar(attrs, "num")
        if num == 1:
            return np.array([start], np.float32)
        step = np.float32((stop - start) / np.float32(num - 1))
        out = start + np.arange(num, dtype=np.float32) * step
        out[-1] = stop
        return out


@register
class Empty(Op):
    """TF leaves the memory uninitialized unless init is set; the NPU always zeroes it."""
    type_attrs = {"dtype": ALL}
    const_inputs = ("shape",)

    def shapes(self, shapes, attrs):
        dims = _ints(attrs["shape"])
        if min(dims, default=0) < 0:
            raise ValueError(f"Empty: shape {dims} must be non-negative")
        return [tuple(dims)]

    def compute(self, xs, attrs):
        return np.zeros(_ints(attrs["shape"]), dt.numpy_dtype(attrs["dtype"]))


@register
class Concat(ConcatV2):
    """ConcatV2 with the axis first (concat_dim)."""
    type_attrs = {"T": ALL}
    const_inputs = ("concat_dim",)

    def shapes(self, shapes, attrs):
        return super().shapes(shapes, {"axis": attrs["concat_dim"]})

    def compute(self, xs, attrs):
        return super().compute(xs, {"axis": attrs["concat_dim"]})


# ---- index arithmetic -------------------------------------------------------------------------

@register
class InvertPermutation(Op):
    type_attrs = {"T": INT}
    checks_values = True

    def shapes(self, shapes, attrs):
        if len(shapes[0]) != 1:
            raise ValueError(f"InvertPermutation: x must be a vector, got shape {list(shapes[0])}")
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x = xs[0]
        out = np.full(x.shape, -1, x.dtype)
        for i, v in enumerate(x.tolist()):
            if not 0 <= v < len(x):
                raise ValueError(f"{v} is not between 0 and {len(x)}")
            if out[v] != -1:
                raise ValueError(f"{v} is duplicated in the input.")
            out[v] = i
        return out


@register
class BroadcastArgs(Op):
    """The broadcast shape of two shapes given as values (its length follows from theirs)."""
    type_attrs = {"T": INT}
    checks_values = True

    def shapes(self, shapes, attrs):
        if len(shapes[0]) != 1 or len(shapes[1]) != 1:
            raise ValueError(f"BroadcastArgs: s0 {list(shapes[0])} and s1 {list(shapes[1])} "
                             f"must be vectors")
        return [(max(shapes[0][0], shapes[1][0]),)]

    def compute(self, xs, attrs):
        s0, s1 = (x.tolist() for x in xs)
        try:
            return np.array(np.broadcast_shapes(tuple(s0), tuple(s1)), xs[0].dtype)
        except ValueError:
            raise ValueError(f"Incompatible shapes: [{','.join(map(str, s0))}] vs. "
                             f"[{','.join(map(str, s1))}]") from None


@register
class UnravelIndex(Op):
    type_attrs = {"Tidx": INDEX}
    const_inputs = ("dims",)
    checks_values = True

    def shapes(self, shapes, attrs):
        dims = _ints(attrs["dims"])
        if len(shapes[0]) > 1:
            raise ValueError(f"UnravelIndex: The indices can only be scalar or vector, got "
                             f"{list(shapes[0])}")
        if 0 in shapes[0]:
            raise ValueError("UnravelIndex: received empty tensor indices")
        if min(dims, default=1) <= 0:
            raise ValueError(f"UnravelIndex: Input dims cannot be negative or zero, got {dims}")
        return [(len(dims),) + tuple(shapes[0])]

    def compute(self, xs, attrs):
        """TF checks only indices < prod(dims): a negative index unravels with C++'s truncating
        division and remainder ((idx / stride) % dim, negative digits)."""
        idx, dims = xs[0], _ints(attrs["dims"])
        if (idx >= int(np.prod(dims))).any():
            raise ValueError("index is out of bound as with dims")
        strides = np.cumprod([1] + dims[:0:-1])[::-1]
        out = [[int(np.fmod(int(v) // s if v >= 0 else -(-int(v) // s), d))
                for v in idx.reshape(-1).tolist()] for s, d in zip(strides.tolist(), dims)]
        return np.array(out, idx.dtype).reshape((len(dims),) + idx.shape)


# ---- gathers and scatters ---------------------------------------------------------------------

@register
class Gather(Op):
    """GatherV2 on axis 0 (validate_indices is ignored, as TF does: indices are checked)."""
    type_attrs = {"Tparams": ALL, "Tindices": INDEX}
    checks_values = True

    def shapes(self, shapes, attrs):
        p, i = shapes
        if not p:
            raise ValueError("Gather: params must be at least 1-D, got a scalar")
        return [tuple(i) + tuple(p[1:])]

    def compute(self, xs, attrs):
        params, indices = xs
        bad = np.flatnonzero((indices < 0) | (indices >= params.shape[0]))
        if bad.size:
            raise ValueError(f"indices[{bad[0]}] = {indices.reshape(-1)[bad[0]]} is not in "
                             f"[0, {params.shape[0]})")
        return params[indices]


class _TensorScatter(Op):
    """tensor with updates[r] combined into the slices indices[r] address, in index order."""
    type_attrs = {"T": NUMBER, "Tindices": INDEX}
    checks_values = True

    def combine(self, old, new):
        raise NotImplementedError

    def shapes(self, shapes, attrs):
        t, i, u = shapes
        _check_k(self.name, i, t)
        sizes = [int(np.prod(s)) for s in (t, i, u)]
        if (sizes[1] or sizes[2]) and 0 in sizes:      # TF's ValidEmptyOutputShape
            raise ValueError(f"{self.name}: Indices and updates specified for empty output "
                             f"shape (tensor {list(t)}, indices {list(i)}, updates {list(u)})")
        want = tuple(i[:-1]) + tuple(t[i[-1]:])
        if tuple(u) != want:
            raise ValueError(f"{self.name}: updates {list(u)} must have shape {list(want)} "
                             f"(indices {list(i)}, tensor {list(t)})")
        return [tuple(t)]

    def compute(self, xs, attrs):
        tensor, indices, updates = xs
        self.shapes([tensor.shape, indices.shape, updates.shape], attrs)
        k = indices.shape[-1]
        flat, ok = _index_rows(indices, tensor.shape, attrs, self.name)
        out = tensor.reshape((-1,) + tensor.shape[k:]).copy()
        rows = updates.reshape((-1,) + tensor.shape[k:])
        for r in np.flatnonzero(ok):
            out[flat[r]] = self.combine(out[flat[r]], rows[r])
        return out.reshape(tensor.shape)


@register
class TensorScatterUpdate(_TensorScatter):
    type_attrs = {"T": ALL, "Tindices": INDEX}

    def combine(self, old, new):
        return new


@register
class TensorScatterAdd(_TensorScatter):
    def combine(self, old, new):
        return old + new


@register
class TensorScatterSub(_TensorScatter):
    def combine(self, old, new):
        return old - new


@register
class TensorScatterMax(_TensorScatter):
    def combine(self, old, new):
        return np.maximum(old, new)


@register
class TensorScatterMin(_TensorScatter):
    def combine(self, old, new):
        return np.minimum(old, new)


@register
class ScatterNdNonAliasingAdd(_TensorScatter):
    """TensorScatterAdd, bool too (logical or)."""
    type_attrs = {"T": ALL, "Tindices": INDEX}

    def combine(self, old, new):
        return old | new if old.dtype == np.bool_ else old + new


@register
class TensorStridedSliceUpdate(Op):
    """input with the StridedSlice view replaced by value, broadcast to the slice's shape as
    TF's StridedSliceAssignBCast does (numpy's rule, plus leading 1s value may have beyond the
    slice's rank). An empty slice ignores value, whatever its shape."""
    type_attrs = {"T": ALL, "Index": INDEX}
    const_inputs = ("begin", "end", "strides")

    def _value_shape(self, x, v, attrs):
        """The slice's shape, and value's shape without its extra leading 1s (None: empty)."""
        want = _strided_shape(x, attrs)
        if 0 in want:
            return want, None
        given = v = tuple(v)
        while len(v) > len(want) and v[0] == 1:
            v = v[1:]
        if len(v) > len(want) or any(a not in (1, b) for a, b in zip(v[::-1], want[::-1])):
            raise ValueError(f"TensorStridedSliceUpdate: Cannot broadcast input shape "
                             f"{list(given)} into final shape {list(want)}")
        return want, v

    def shapes(self, shapes, attrs):
        self._value_shape(*shapes, attrs)
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, v = xs
        want, vs = self._value_shape(x.shape, v.shape, attrs)
        out = x.copy()
        if vs is not None:
            out[strided_index(attrs)] = np.broadcast_to(v.reshape(vs), want)
        return out


# ---- top-k and searches -----------------------------------------------------------------------

def _top_k(x, k):
    """Indices of the k largest along the last axis, larger first, ties by lower index; NaN is
    larger than every number (as TF's CPU heap mostly orders it: its k=1 path skips NaN and
    several NaNs come out in heap order, so NaN inputs are not part of the contract)."""
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    key = -np.where(nan, 0, x).astype(np.float64 if x.dtype.kind == "f" else np.int64)
    return np.lexsort((key, ~nan), axis=-1)[..., :k]


def _sift_down(heap, hole, n, value, before):
    """libstdc++'s __adjust_heap (then __push_heap): std::make_heap/pop_heap's step."""
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if before(heap[child], heap[child - 1]):
            child -= 1
        heap[hole], hole = heap[child], child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        heap[hole], hole = heap[child - 1], child - 1
    _sift_up(heap, hole, top, value, before)


def _sift_up(heap, hole, top, value, before):
    """libstdc++'s __push_heap."""
    parent = (hole - 1) // 2
    while hole > top and before(heap[parent], value):
        heap[hole], hole = heap[parent], parent
        parent = (hole - 1) // 2
    heap[hole] = value


def _heap_top_k(row, k):
    """The columns of TF's gtl::TopN for sorted=False, in its heap's order: the first k+1
    columns heapified (std::make_heap) and the least popped, then each column before the least
    replacing it (pop_heap, push_heap), with TF's comparator (larger, ties by lower index)."""
    before = lambda a, b: row[a] > row[b] or (row[a] == row[b] and a < b)  # noqa: E731
    heap = list(range(k + 1))
    for parent in range((k - 1) // 2, -1, -1):                    # make_heap
        _sift_down(heap, parent, k + 1, heap[parent], before)
    heap[0], heap[k] = heap[k], heap[0]                            # pop_heap
    _sift_down(heap, 0, k, heap[0], before)
    heap.pop()
    for c in range(k + 1, len(row)):
        if before(c, heap[0]):
            heap[0], heap[-1] = heap[-1], heap[0]                  # pop_heap, replace
            _sift_down(heap, 0, k - 1, heap[0], before)
            heap[-1] = c
            _sift_up(heap, k - 1, 0, c, before)                    # push_heap
    return heap


@register
class TopKV2(Op):
    """Sorted, or with sorted=False (and 1 < k < columns) in TF's CPU order, its TopN heap's.
    TopK (v1, k an attr) is not registered: TF 2.21's CPU kernel for it demands an index_type
    attr that the v1 op does not have, so TF itself cannot run it."""
    type_attrs = {"T": NUMBER, "Tk": INDEX, "index_type": INDEX}
    const_inputs = ("k",)

    def shapes(self, shapes, attrs):
        s, k = shapes[0], scalar(attrs, "k")
        if not s:
            raise ValueError("TopKV2: input must be >= 1-D, got shape []")
        if k < 0:
            raise ValueError(f"TopKV2: Need k >= 0, got {k}")
        if s[-1] < k:
            raise ValueError(f"TopKV2: input must have at least k columns. Had {s[-1]}, "
                             f"needed {k}")
        return [tuple(s[:-1]) + (k,)] * 2

    def compute(self, xs, attrs):
        self.shapes([xs[0].shape], attrs)
        x, k = xs[0], scalar(attrs, "k")
        idx = _top_k(x, k)
        if not attrs.get("sorted", True) and 1 < k < x.shape[-1]:
            rows = x.reshape(-1, x.shape[-1]).tolist()
            idx = np.array([_heap_top_k(r, k) for r in rows], np.int64).reshape(idx.shape)
        return [np.take_along_axis(xs[0], idx, -1),
                idx.astype(dt.numpy_dtype(attrs.get("index_type", dt.DT_INT32)))]


@register
class InTopKV2(Op):
    """Whether predictions[b, targets[b]] is among the k largest of row b: fewer than k values
    are strictly larger. A non-finite prediction or an out-of-range target is never in it."""
    type_attrs = {"T": INDEX}
    const_inputs = ("k",)

    def shapes(self, shapes, attrs):
        p, t = shapes
        if len(p) != 2 or tuple(t) != tuple(p[:1]):
            raise ValueError(f"InTopKV2: predictions {list(p)} must be 2-D and targets "
                             f"{list(t)} their first dimension")
        return [tuple(t)]

    def compute(self, xs, attrs):
        p, t = xs
        k = scalar(attrs, "k")
        out = np.zeros(t.shape, bool)
        for b, c in enumerate(t.tolist()):
            if 0 <= c < p.shape[1] and np.isfinite(p[b]).all():
                out[b] = (p[b] > p[b, c]).sum() < k
        return out


@register
class Bucketize(Op):
    """The number of boundaries <= x (std::upper_bound)."""
    type_attrs = {"T": (dt.DT_FLOAT,) + INT}

    def shapes(self, shapes, attrs):
        b = list(attrs["boundaries"])
        if b != sorted(b):
            raise ValueError(f"Bucketize: Expected sorted boundaries, got {b}")
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        b = np.asarray(attrs["boundaries"], np.float32)
        return np.searchsorted(b, xs[0].astype(np.float32), side="right").astype(np.int32)


class _Bound(Op):
    """For each value of row b, its insertion point in the sorted row b of sorted_inputs."""
    type_attrs = {"T": NUMBER, "out_type": INDEX}
    side = None

    def shapes(self, shapes, attrs):
        s, v = shapes
        if len(s) != 2 or len(v) != 2 or s[0] != v[0]:
            raise ValueError(f"{self.name}: sorted_inputs {list(s)} and values {list(v)} must be "
                             f"2-D with the same leading dimension")
        return [tuple(v)]

    def compute(self, xs, attrs):
        s, v = xs
        out = np.stack([np.searchsorted(s[b], v[b], side=self.side) for b in range(s.shape[0])]) \
            if s.shape[0] else np.zeros(v.shape, np.int64)
        return out.reshape(v.shape).astype(dt.numpy_dtype(attrs.get("out_type", dt.DT_INT32)))


@register
class LowerBound(_Bound):
    side = "left"


@register
class UpperBound(_Bound):
    side = "right"
