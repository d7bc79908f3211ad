"""Sparse ops whose output shape follows from shapes and constants: SparseTensorDenseMatMul and
SparseToDense (kernels: runtime/kernels/sparse.cc). Sparse ops whose output size depends on the
values (SparseSlice ...) cannot be graph-engine ops: they are plugin kernels,
tf_plugin_cc/sparse_ops.cc.
"""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.array import _ints
from graph_engine.ops.base import ALL, FLOAT, INDEX, Op, register


@register
class SparseTensorDenseMatMul(Op):
    """op(A) @ op(B), A given as COO (a_indices [nnz, 2], a_values [nnz]; a_shape a constant):
    each entry adds a_value * op(B)[k, :] to row m of the output, in entry order: float16
    accumulates in float32 (TF's SumType), bfloat16 in bfloat16 (TF has no SumType for it: each
    product and sum rounds). As TF, indices are checked (k, then m, per entry) only when there is
    work: an empty output, no entries or an empty b give zeros."""
    type_attrs = {"T": FLOAT + (dt.DT_INT32,), "Tindices": INDEX}
    const_inputs = ("a_shape",)
    widen = False          # the accumulation depends on the stored dtype

    def _dims(self, shapes, attrs):
        i, v, b = shapes
        a = _ints(attrs["a_shape"])
        if len(b) != 2:
            raise ValueError(f"SparseTensorDenseMatMul: Tensor 'b' is not a matrix: {list(b)}")
        if len(a) != 2:
            raise ValueError(f"SparseTensorDenseMatMul: Tensor 'a_shape' must have 2 elements, "
                             f"got {a}")
        if len(v) != 1 or len(i) != 2:
            raise ValueError(f"SparseTensorDenseMatMul: a_values {list(v)} must be a vector and "
                             f"a_indices {list(i)} a matrix")
        if min(a) < 0:      # (TF's CPU kernel aborts the process on it)
            raise ValueError(f"SparseTensorDenseMatMul: a_shape {a} must be non-negative")
        adj_a, adj_b = attrs.get("adjoint_a", False), attrs.get("adjoint_b", False)
        outer, inner = a[::-1] if adj_a else a
        inner_b, right = b[::-1] if adj_b else b
        if inner != inner_b:
            raise ValueError(f"SparseTensorDenseMatMul: Cannot multiply A and B because inner "
                             f"dimension does not match: {inner} vs. {inner_b}.  Did you forget "
                             f"a transpose?  Dimensions of A: {a}.  Dimensions of B: {list(b)}")
        if i[0] != v[0]:
            raise ValueError("SparseTensorDenseMatMul: Number of rows of a_indices does not "
                             "match number of entries in a_values")
        if i[1] != 2:
            raise ValueError("SparseTensorDenseMatMul: Number of columns of a_indices does not "
                             "match number of entries in a_shape")
        return outer, inner, right, adj_a, adj_b

    def shapes(self, shapes, attrs):
        outer, _, right, _, _ = self._dims(shapes, attrs)
        return [(outer, right)]

    def compute(self, xs, attrs):
        idx, vals, b = xs
        outer, inner, right, adj_a, adj_b = self._dims([x.shape for x in xs], attrs)
        acc = np.int64 if b.dtype.kind in "iu" else np.float32
        step = b.dtype if b.dtype == dt.numpy_dtype(dt.DT_BFLOAT16) else acc
        out = np.zeros((outer, right), acc)
        if out.size and vals.size and b.size:
            rhs = (b.T if adj_b else b).astype(acc)
            for n, (r, c) in enumerate(idx.tolist()):
                m, k = (c, r) if adj_a else (r, c)
                if not 0 <= k < inner:
                    raise ValueError(f"k ({k}) from index[{n},{int(not adj_a)}] out of bounds "
                                     f"(>={inner})")
                if not 0 <= m < outer:
                    raise ValueError(f"m ({m}) from index[{n},{int(adj_a)}] out of bounds "
                                     f"(>={outer})")
                out[m] = (out[m] + (acc(vals[n]) * rhs[k]).astype(step)).astype(step)
        return out.astype(b.dtype)


@register
class SparseToDense(Op):
    """default_value everywhere but at sparse_indices (0-D, [n] or [n, rank]), which get
    sparse_values (a vector, or one scalar for all). validate_indices (TF's default) requires the
    indices in bounds, sorted and unique; without it they must still be in bounds, and a repeated
    index keeps its last value. TF checks them even when the output is empty."""
    type_attrs = {"T": ALL, "Tindices": INDEX}
    const_inputs = ("output_shape",)
    checks_values = True

    def _dims(self, shapes, attrs):
        i, v, d = shapes
        shape = tuple(_ints(attrs["output_shape"]))
        if len(i) > 2:
            raise ValueError(f"SparseToDense: sparse_indices should be a scalar, vector, or "
                             f"matrix, got shape {list(i)}")
        n, rank = (list(i) + [1, 1])[:2] if i else (1, 1)
        if len(shape) != rank:
            raise ValueError(f"SparseToDense: output_shape has incorrect number of elements: "
                             f"{len(shape)} should be: {rank}")
        if tuple(v) not in ((), (n,)):
            raise ValueError(f"SparseToDense: sparse_values has incorrect shape {list(v)}, "
                             f"should be [] or [{n}]")
        if tuple(d) != ():
            raise ValueError("SparseToDense: default_value should be a scalar.")
        if min(shape, default=0) < 0:
            raise ValueError(f"SparseToDense: output_shape {list(shape)} must be non-negative")
        return shape, n, rank

    def shapes(self, shapes, attrs):
        return [self._dims(shapes, attrs)[0]]

    def compute(self, xs, attrs):
        idx, vals, default = xs
        shape, n, rank = self._dims([x.shape for x in xs], attrs)
        rows = idx.reshape(n, rank).astype(np.int64).tolist()
        vals = np.broadcast_to(vals, (n,))
        out = np.full(shape, default, vals.dtype)
        validate = attrs.get("validate_indices", True)
        for k, row in enumerate(rows):
            if not all(0 <= x < s for x, s in zip(row, shape)):
                raise ValueError(f"indices[{k}] = {row} is out of bounds: need 0 <= index < "
                                 f"{list(shape)}" if validate else
                                 f"Indices are not valid (out of bounds).  Shape: {list(shape)}")
            if validate and k and row <= rows[k - 1]:
                raise ValueError(f"indices[{k}] = {row} is " +
                                 ("repeated" if row == rows[k - 1] else "out of order"))
            out[tuple(row)] = vals[k]
        return out
