"""Sparse ops (graph_engine/ops/sparse.py; plugin kernels in tf_plugin_cc/sparse_ops.cc).
SparseTensorDenseMatMul's indices have their own type attr, so the sweep does not vary its dtype:
its case is written out per dtype TF's CPU registers that the NPU holds. The SparseSlice cases
have one type attr (values; indices are int64): the sweep varies it."""
import numpy as np
import tensorflow as tf

from npu_device.tools.op_cases import _f32

_FLOATS = (np.float32, np.float16, tf.bfloat16.as_numpy_dtype)
_I64 = np.int64
# entries of a 3x2 matrix in no particular order, (2, 0) twice: duplicates add up
_IDX = np.array([[0, 1], [2, 0], [1, 1], [2, 0]], _I64)


def _as(x, dtype):
    """x in `dtype`; integers as small values (products stay exact)."""
    if dtype == np.bool_:
        return np.asarray(x) > 0
    if np.issubdtype(dtype, np.integer):
        return np.round(np.asarray(x) * 3).astype(dtype)
    return np.asarray(x).astype(dtype)


def _per_dtype(op, inputs, attrs, dtypes, typed):
    return [(op, {k: _as(v, t) if k in typed else v for k, v in inputs.items()}, attrs)
            for t in dtypes]


_MATMUL = ("a_values", "b")
_SLICE_IDX = np.array([[0, 1], [2, 0], [1, 3], [2, 3], [1, 0]], _I64)

CASES = [
    *_per_dtype("SparseTensorDenseMatMul", {"a_indices": _IDX, "a_values": _f32(4), "a_shape": np.array([3, 2], _I64),
                                            "b": _f32(2, 5)}, {}, _FLOATS + (np.int32,), _MATMUL),
    ("SparseTensorDenseMatMul", {"a_indices": _IDX.astype(np.int32), "a_values": _f32(4),
                                 "a_shape": np.array([3, 2], _I64), "b": _f32(4, 3)},
     {"adjoint_a": True, "adjoint_b": True}),
    ("SparseTensorDenseMatMul", {"a_indices": _IDX, "a_values": _f32(4), "a_shape": np.array([3, 2], _I64),
                                 "b": _f32(40, 2)}, {"adjoint_b": True}),
    # the slice [1:3, 0:4] keeps four entries in order; a slice past the shape is cut at it
    ("SparseSlice", {"indices": _SLICE_IDX, "values": _f32(5), "shape": np.array([3, 4], _I64),
                     "start": np.array([1, 0], _I64), "size": np.array([2, 4], _I64)}, {}),
    ("SparseSlice", {"indices": _SLICE_IDX, "values": _f32(5), "shape": np.array([3, 4], _I64),
                     "start": np.array([2, 1], _I64), "size": np.array([5, 5], _I64)}, {}),
    ("SparseSlice", {"indices": _SLICE_IDX, "values": _f32(5), "shape": np.array([3, 4], _I64),
                     "start": np.array([4, 0], _I64), "size": np.array([1, 2], _I64)}, {}),
    # the gradient of the first SparseSlice case: its four entries back to input entries 1-4
    ("SparseSliceGrad", {"backprop_val_grad": _f32(4), "input_indices": _SLICE_IDX,
                         "input_start": np.array([1, 0], _I64),
                         "output_indices": np.array([[1, 0], [0, 3], [1, 3], [0, 0]], _I64)}, {}),
    # sorted unique indices; a scalar value for all of them; no validation with a repeat (the last wins)
    *_per_dtype("SparseToDense", {"sparse_indices": np.array([[0, 1], [1, 0], [2, 3]], np.int32),
                                  "output_shape": np.array([3, 4], np.int32), "sparse_values": _f32(3),
                                  "default_value": np.array(0.5, np.float32)}, {},
                _FLOATS + (np.int32, np.int64, np.bool_), ("sparse_values", "default_value")),
    ("SparseToDense", {"sparse_indices": np.array([4], _I64), "output_shape": np.array([6], _I64),
                       "sparse_values": np.array(2.0, np.float32), "default_value": np.array(-1.0, np.float32)}, {}),
    ("SparseToDense", {"sparse_indices": np.array([[2, 0], [0, 1], [2, 0]], _I64), "output_shape": np.array([3, 2], _I64),
                       "sparse_values": _f32(3), "default_value": np.array(0.0, np.float32)}, {"validate_indices": False}),
    # rows 1 and 3 empty (filled with the default), rows out of order
    ("SparseFillEmptyRows", {"indices": np.array([[2, 1], [0, 0], [2, 0], [4, 3]], _I64), "values": _f32(4),
                             "dense_shape": np.array([5, 4], _I64), "default_value": np.array(0.5, np.float32)}, {}),
    ("SparseFillEmptyRowsGrad", {"reverse_index_map": np.array([3, 0, 2, 5], _I64), "grad_values": _f32(6)}, {}),
    ("SparseReshape", {"input_indices": _SLICE_IDX, "input_shape": np.array([3, 4], _I64),
                       "new_shape": np.array([2, -1, 3], _I64)}, {}),
]
