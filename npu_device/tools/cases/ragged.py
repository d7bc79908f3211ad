"""Ragged ops (plugin kernel in tf_plugin_cc/ragged_ops.cc): RaggedTensorToTensor, which Keras'
TextVectorization runs to pad its token ids. The sweep varies T (values and default_value);
shape and the row partitions keep their own index dtypes (int64 and int32 both covered)."""
import numpy as np

from npu_device.tools.op_cases import _f32

_I64, _I32 = np.int64, np.int32


def _case(shape, values, default, partitions, types, index=_I64):
    return ("RaggedTensorToTensor",
            {"shape": np.array(shape, index), "values": values, "default_value": default,
             "row_partition_tensors": [np.array(p, index) for p in partitions]},
            {"row_partition_types": types})


_SPLITS = [0, 3, 3, 7, 8]        # rows of 3, 0, 4 and 1 values
_ROWIDS = [0, 0, 0, 2, 2, 2, 2, 3]  # the same rows as value_rowids

CASES = [
    # ragged rank 1: the widest row (-1), padded; cut to 2 columns; more rows than the splits'
    _case([-1, -1], _f32(8), np.float32(0.5), [_SPLITS], ["ROW_SPLITS"]),
    _case([4, 2], _f32(8), np.float32(-1), [_SPLITS], ["ROW_SPLITS"], index=_I32),
    _case([6, 5], _f32(8), np.float32(0), [_SPLITS], ["ROW_SPLITS"]),
    _case([2, -1], _f32(8), np.float32(0), [_SPLITS], ["ROW_SPLITS"]),
    _case(-1, _f32(8), np.float32(2), [_SPLITS], ["ROW_SPLITS"]),     # unknown rank: all -1
    _case([-1, 3], _f32(8), np.float32(0), [5, _ROWIDS], ["FIRST_DIM_SIZE", "VALUE_ROWIDS"]),
    _case([-1, -1], _f32(8), np.float32(0), [3, _ROWIDS[:7]], ["FIRST_DIM_SIZE", "VALUE_ROWIDS"],
          index=_I32),
    # inner dims: default_value broadcast to an element [2, 3] (TF checks its dims against the
    # element's from the front, broadcasts from the back: [1, 3] passes both), or a whole element
    _case([-1, -1, 2, 3], _f32(8, 2, 3), _f32(1, 3), [_SPLITS], ["ROW_SPLITS"]),
    _case([3, 2, -1, 3], _f32(8, 2, 3), _f32(2, 3), [_SPLITS], ["ROW_SPLITS"]),
    # ragged rank 2: 3 rows of [2, 0, 1] sublists holding 2, 1 and 3 values
    _case([-1, -1, -1], _f32(6), np.float32(0), [[0, 2, 2, 3], [0, 2, 3, 6]],
          ["ROW_SPLITS", "ROW_SPLITS"]),
    _case([3, 1, 2], _f32(6), np.float32(9), [[0, 2, 2, 3], [0, 2, 3, 6]], ["ROW_SPLITS", "ROW_SPLITS"]),
    _case([-1, 2, -1], _f32(6), np.float32(0), [3, [0, 0, 2], [0, 0, 1, 2, 2, 2]],
          ["FIRST_DIM_SIZE", "VALUE_ROWIDS", "VALUE_ROWIDS"]),
    _case([-1, -1, -1, 2], _f32(6, 2), np.float32(0), [[0, 2, 2, 3], [0, 0, 1, 2, 2, 2]],
          ["ROW_SPLITS", "VALUE_ROWIDS"]),
    # no values: empty rows only
    _case([-1, -1], np.zeros([0], np.float32), np.float32(1), [[0, 0, 0]], ["ROW_SPLITS"]),
]
