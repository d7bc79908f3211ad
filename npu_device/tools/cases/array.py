"""Array ops (graph_engine/ops/array_extra.py): reversal, space/depth/batch rearrangement,
patches, tensor scatters, top-k and searches. Integer index inputs keep their dtype; the sweep
varies the data dtype."""
import numpy as np
import tensorflow as tf

from npu_device.tools.op_cases import _f32, _i32

_IMG = _f32(2, 4, 6, 3)
_IDX2 = np.array([[0, 1], [2, 0], [0, 1]], np.int32)
_I64 = np.int64
_DTYPES = (np.float32, np.float16, tf.bfloat16.as_numpy_dtype, np.int32, np.int64, np.bool_)


def _each_dtype(op, inputs, attrs, data, dtypes=_DTYPES):
    """One case per dtype of the `data` inputs: the sweep varies a case's dtype only when a
    single type attr types its data inputs (here an index type attr types others too)."""
    def conv(a, t):
        if t == np.bool_:
            return a > 0
        return np.round(a * 3).astype(t) if np.issubdtype(t, np.integer) else a.astype(t)
    return [(op, {k: conv(v, t) if k in data else v for k, v in inputs.items()}, attrs) for t in dtypes]


CASES = [
    ("ReverseV2", {"tensor": _f32(2, 3, 4), "axis": np.array([0, -1], np.int32)}, {}),
    ("ReverseV2", {"tensor": _f32(3, 4), "axis": np.array([], _I64)}, {}),
    ("Roll", {"input": _f32(3, 5), "shift": np.array([2, -1], np.int32), "axis": np.array([1, 0], np.int32)}, {}),
    ("Roll", {"input": _f32(2, 3, 4), "shift": np.array(7, _I64), "axis": np.array(-1, _I64)}, {}),
    ("Roll", {"input": _f32(6), "shift": np.array([1, 2], np.int32), "axis": np.array([0, 0], np.int32)}, {}),
    *_each_dtype("ReverseSequence", {"input": _f32(3, 5, 2), "seq_lengths": np.array([5, 0, 3], _I64)},
                 {"seq_dim": 1, "batch_dim": 0}, ["input"]),
    ("ReverseSequence", {"input": _f32(4, 3), "seq_lengths": np.array([2, 4, 1], np.int32)},
     {"seq_dim": 0, "batch_dim": 1}),
    ("DepthToSpace", {"input": _f32(2, 2, 3, 8)}, {"block_size": 2}),
    ("SpaceToDepth", {"input": _f32(2, 4, 6, 3)}, {"block_size": 2}),
    ("SpaceToBatchND", {"input": _f32(2, 3, 5, 2), "block_shape": np.array([2, 3], np.int32),
                        "paddings": np.array([[1, 0], [0, 1]], np.int32)}, {}),
    ("SpaceToBatchND", {"input": _f32(1, 6, 2), "block_shape": np.array([3], _I64),
                        "paddings": np.array([[0, 0]], _I64)}, {}),
    ("BatchToSpaceND", {"input": _f32(12, 2, 2, 2), "block_shape": np.array([2, 3], np.int32),
                        "crops": np.array([[1, 0], [0, 2]], np.int32)}, {}),
    ("SpaceToBatch", {"input": _f32(1, 3, 4, 2), "paddings": np.array([[1, 0], [0, 0]], np.int32)},
     {"block_size": 2}),
    ("BatchToSpace", {"input": _f32(8, 2, 2, 1), "crops": np.array([[0, 1], [1, 1]], np.int32)},
     {"block_size": 2}),
    ("ExtractImagePatches", {"images": _IMG}, {"ksizes": [1, 2, 3, 1], "strides": [1, 1, 2, 1],
                                               "rates": [1, 1, 1, 1], "padding": "VALID"}),
    ("ExtractImagePatches", {"images": _IMG}, {"ksizes": [1, 2, 2, 1], "strides": [1, 2, 3, 1],
                                               "rates": [1, 2, 1, 1], "padding": "SAME"}),
    ("ExtractVolumePatches", {"input": _f32(1, 3, 4, 4, 2)},
     {"ksizes": [1, 2, 2, 3, 1], "strides": [1, 1, 2, 1, 1], "padding": "SAME"}),
    ("ExtractVolumePatches", {"input": _f32(2, 3, 3, 4, 1)},
     {"ksizes": [1, 2, 1, 2, 1], "strides": [1, 1, 1, 2, 1], "padding": "VALID"}),
    *_each_dtype("OneHot", {"indices": np.array([[0, 3], [-1, 2]], _I64), "depth": np.array(4, np.int32),
                            "on_value": np.array(2.5, np.float32), "off_value": np.array(-1.0, np.float32)},
                 {}, ["on_value", "off_value"]),
    ("OneHot", {"indices": np.array([1, 0, 5], np.int32), "depth": np.array(3, np.int32),
                "on_value": np.array(7, np.int32), "off_value": np.array(0, np.int32)}, {"axis": 0}),
    ("LinSpace", {"start": np.array(-1.5, np.float32), "stop": np.array(2.0, np.float32),
                  "num": np.array(7, np.int32)}, {}),
    ("LinSpace", {"start": np.array(3.0, np.float32), "stop": np.array(0.0, np.float32),
                  "num": np.array(1, _I64)}, {}),
    ("Empty", {"shape": np.array([2, 3], np.int32)}, {"dtype": "float32", "init": True}),
    *[("Empty", {"shape": np.array([4], np.int32)}, {"dtype": t, "init": True})
      for t in ("float16", "bfloat16", "int32", "int64", "bool")],
    ("Concat", {"concat_dim": np.array(1, np.int32), "values": [_f32(2, 3), _f32(2, 1), _f32(2, 2)]}, {}),
    ("Concat", {"concat_dim": np.array(-1, np.int32), "values": [_i32(-5, 5, 3), _i32(-5, 5, 2)]}, {}),
    ("InvertPermutation", {"x": np.array([3, 0, 4, 1, 2], np.int32)}, {}),
    ("BroadcastArgs", {"s0": np.array([2, 1, 3], np.int32), "s1": np.array([4, 1], np.int32)}, {}),
    ("UnravelIndex", {"indices": np.array([0, 7, 23, 11], np.int32), "dims": np.array([2, 3, 4], np.int32)}, {}),
    ("UnravelIndex", {"indices": np.array(5, np.int32), "dims": np.array([3, 2], np.int32)}, {}),
    *_each_dtype("Gather", {"params": _f32(5, 3), "indices": np.array([[4, 0], [2, 2]], np.int32)}, {}, ["params"]),
    ("Gather", {"params": _f32(4), "indices": np.array([3, 1], _I64)}, {}),
    *[c for op, dtypes in (("TensorScatterUpdate", _DTYPES), ("TensorScatterAdd", _DTYPES[:5]),
                           ("TensorScatterSub", _DTYPES[:5]), ("TensorScatterMax", _DTYPES[:5]),
                           ("TensorScatterMin", _DTYPES[:5]))
      for c in _each_dtype(op, {"tensor": _f32(3, 2, 4), "indices": _IDX2[1:], "updates": _f32(2, 4)}, {},
                           ["tensor", "updates"], dtypes)],
    # a repeated index: updates combine in index order (float16 on TF's CPU rounds per step)
    *[(op, {"tensor": _f32(3, 2, 4), "indices": _IDX2, "updates": _f32(3, 4)}, {})
      for op in ("TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub", "TensorScatterMax",
                 "TensorScatterMin")],
    ("TensorScatterAdd", {"tensor": _f32(5), "indices": np.array([[4], [0]], _I64), "updates": _f32(2)}, {}),
    *_each_dtype("ScatterNdNonAliasingAdd", {"input": _f32(4, 3), "indices": np.array([[1], [3]], np.int32),
                                             "updates": _f32(2, 3)}, {}, ["input", "updates"]),
    ("ScatterNdNonAliasingAdd", {"input": _f32(4, 3), "indices": np.array([[1], [3], [1]], np.int32),
                                 "updates": _f32(3, 3)}, {}),
    ("TensorStridedSliceUpdate", {"input": _f32(4, 5), "begin": np.array([1, 0], np.int32),
                                  "end": np.array([4, 5], np.int32), "strides": np.array([2, 2], np.int32),
                                  "value": _f32(2, 3)}, {}),
    # value broadcast to the slice [2, 5]
    ("TensorStridedSliceUpdate", {"input": _f32(4, 5), "begin": np.array([1, 0], np.int32),
                                  "end": np.array([4, 5], np.int32), "strides": np.array([2, 1], np.int32),
                                  "value": _f32(2, 1)}, {}),
    ("TensorStridedSliceUpdate", {"input": _f32(3, 4), "begin": np.array([-1], np.int32),
                                  "end": np.array([0], np.int32), "strides": np.array([-1], np.int32),
                                  "value": _f32(2, 4)}, {}),
    ("TopKV2", {"input": np.array([[1, 3, 3, -2, 3], [0, 5, -1, 5, 2]], np.float32), "k": np.array(3, np.int32)}, {}),
    # int64 indices: int data (TF's own TopK gradient fails for int64 indices)
    ("TopKV2", {"input": _i32(-4, 4, 2, 3, 6), "k": np.array(2, np.int32)}, {"index_type": "int64"}),
    ("TopKV2", {"input": _f32(4, 5), "k": np.array(1, np.int32)}, {"sorted": False}),
    # unsorted: TF's heap order
    ("TopKV2", {"input": _f32(3, 9), "k": np.array(4, np.int32)}, {"sorted": False}),
    ("InTopKV2", {"predictions": np.array([[0.1, 0.9, 0.9, 0.3], [1, 2, 3, np.inf], [5, 4, 3, 2]], np.float32),
                  "targets": np.array([2, 1, 7], np.int32), "k": np.array(2, np.int32)}, {}),
    ("InTopKV2", {"predictions": _f32(3, 5), "targets": np.array([0, 4, 2], _I64), "k": np.array(3, _I64)}, {}),
    ("Bucketize", {"input": np.array([[-3, 0, 0.5], [10, 2.5, 1]], np.float32)},
     {"boundaries": [0.0, 1.0, 2.5, 9.0]}),
    ("Bucketize", {"input": _i32(-5, 5, 6)}, {"boundaries": [-1.0, 0.0, 2.0]}),
    ("LowerBound", {"sorted_inputs": np.array([[0, 1, 1, 3], [-2, 0, 4, 4]], np.float32),
                    "values": np.array([[1, 5, -1], [4, 0, 3]], np.float32)}, {}),
    ("UpperBound", {"sorted_inputs": np.array([[0, 1, 1, 3], [-2, 0, 4, 4]], np.float32),
                    "values": np.array([[1, 5, -1], [4, 0, 3]], np.float32)}, {"out_type": "int64"}),
    ("UpperBound", {"sorted_inputs": np.array([[-1, 0, 2, 2, 5]], np.float32),
                    "values": np.array([[2, -3, 6, 0.5]], np.float32)}, {}),
]
