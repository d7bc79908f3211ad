"""Segment reductions, bincounts and ops with data-dependent output shapes (graph_engine/ops/
segment.py, tf_plugin_cc/dynamic_shape_ops.cc). The sweep varies the dtype of an op with one type
attr on its data inputs; graph-engine ops with several (data and index types: UnsortedSegment*,
SparseSegment*, DenseBincount) get a case per dtype TF's CPU registers that the NPU holds
(_per_dtype). Unsorted segment cases leave no segment empty: an empty Max segment holds the
dtype's lowest value, which the sweep's float32 reference of float16/bfloat16 cannot give."""
import numpy as np
import tensorflow as tf

from npu_device.tools.op_cases import _f32, _i32

_FLOATS = (np.float32, np.float16, tf.bfloat16.as_numpy_dtype)
_INTS = (np.int32, np.int64)
_NUMBERS = _FLOATS + _INTS
_COUNTED = (np.float32,) + _INTS        # Bincount, DenseBincount, HistogramFixedWidth


def _as(x, dtype):
    """x in `dtype`; integers as small nonzero values (products and divisions stay exact)."""
    if np.issubdtype(dtype, np.integer):
        r = np.round(np.asarray(x) * 3)
        return np.where(r == 0, 1, r).astype(dtype)
    return np.asarray(x).astype(dtype)


def _per_dtype(op, inputs, attrs, dtypes, typed):
    """The case once per dtype, the inputs named in `typed` converted to it."""
    return [(op, {k: _as(v, t) if k in typed else v for k, v in inputs.items()}, attrs)
            for t in dtypes]


_IDS = np.array([0, 2, 0, 1, -1, 2], np.int32)          # every segment of 3 hit; -1 dropped
_IDS_2D = np.array([[0, 1, 1], [2, 0, -1]], np.int64)
_SORTED = np.array([0, 0, 1, 3, 3], np.int32)           # segments 2 and 4 empty
_UNSORTED = np.array([0, 0, 3, 1, 1], np.int64)
_INDICES = np.array([0, 3, 3, 1, 4], np.int32)

CASES = [
    *[c for op in ("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")
      for c in _per_dtype(op, {"data": _f32(6, 3), "segment_ids": _IDS,
                               "num_segments": np.int32(3)}, {}, _NUMBERS, ("data",))
      + _per_dtype(op, {"data": _f32(2, 3, 2), "segment_ids": _IDS_2D,
                        "num_segments": np.int64(3)}, {}, (np.float32, np.int32), ("data",))],
    *[c for norm, dtypes in (("Sum", _NUMBERS), ("Mean", _FLOATS), ("SqrtN", _FLOATS))
      for c in _per_dtype(f"SparseSegment{norm}WithNumSegments",
                          {"data": _f32(5, 3), "indices": _INDICES, "segment_ids": _SORTED,
                           "num_segments": np.int32(5)}, {}, dtypes, ("data",))
      + _per_dtype(f"SparseSegment{norm}Grad",
                   {"grad": _f32(4, 3), "indices": _INDICES.astype(np.int64),
                    "segment_ids": _UNSORTED, "output_dim0": np.int32(5)}, {}, _FLOATS,
                   ("grad",))],
    # one type attr (the sweep runs these for every dtype the op allows)
    ("Bincount", {"arr": _i32(0, 7, 10), "size": np.int32(5), "weights": _f32(10)}, {}),
    ("Bincount", {"arr": _i32(0, 7, 3, 4), "size": np.int32(6),
                  "weights": np.zeros(0, np.float32)}, {}),
    *_per_dtype("DenseBincount", {"input": _i32(0, 6, 2, 5), "size": np.int32(4),
                                  "weights": _f32(2, 5)}, {}, _COUNTED, ("weights",)),
    *_per_dtype("DenseBincount", {"input": _i32(0, 6, 7).astype(np.int64), "size": np.int64(5),
                                  "weights": np.zeros(0, np.float32)},
                {"binary_output": True}, _COUNTED, ("weights",)),
    # empty inputs: zeros (a function's empty input is folded at compile time)
    *[("DenseBincount", {"input": np.zeros(shape, np.int32), "size": np.int32(3),
                         "weights": np.zeros(0, np.float32)}, {}) for shape in ((0,), (3, 0))],
    ("HistogramFixedWidth", {"values": _f32(4, 5, lo=-1.5, hi=2.5),
                             "value_range": np.array([-1.0, 2.0], np.float32),
                             "nbins": np.int32(4)}, {}),
    ("HistogramFixedWidth", {"values": _f32(9), "value_range": np.array([-1.0, 1.0], np.float32),
                             "nbins": np.int32(3)}, {"dtype": tf.int64}),
    ("CumulativeLogsumexp", {"x": _f32(3, 4), "axis": np.int32(1)}, {}),
    ("CumulativeLogsumexp", {"x": _f32(4, 3), "axis": np.int32(0)}, {"reverse": True}),
    # exclusive (its first element is -inf) is left out: float16 stores saturate -inf to
    # -65504 on the NPU (float_status.h), which the float16 reference does not
    ("CumulativeLogsumexp", {"x": _f32(2, 3, 2), "axis": np.int64(-2)}, {"reverse": True}),
    ("EuclideanNorm", {"input": _f32(3, 4, 2), "axis": np.int32([0, 2])}, {}),
    ("EuclideanNorm", {"input": _f32(3, 4), "axis": np.int64(-1)}, {"keep_dims": True}),
]

# ---- plugin kernels (tf_plugin_cc/dynamic_shape_ops.cc): output shapes follow the values. ---
# Only their "T" is constrained, so the sweep runs each float case for every dtype the kernel
# registers (integers as small nonzero values, bool as > 0); integer cases keep their zeros.

_MASK = np.array([[0, 1.5, 0, -2], [3, 0, 0, 1], [0, 0, 0, 0]], np.float32)
_REPEATS = np.array([3, 1, 3, 2, 1, 5, 2], np.float32)
_ROWS = np.array([[1, 2, 0], [1, 2, 0], [3, 4, 0], [1, 2, 0]], np.float32)
_BOXES = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11],
                   [0, 10.1, 1, 11.1], [1, 1, 0, 0], [0, 100, 1, 101]], np.float32)
_SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3, 0.05], np.float32)
_OVERLAPS = (lambda a: (a + a.T) / 2)(_f32(7, 7, lo=0.0, hi=1.0))


def _nms(version, sigma=0.0, **attrs):
    inputs = {"boxes": _BOXES, "scores": _SCORES, "max_output_size": np.int32(5),
              "iou_threshold": np.float32(0.5), "score_threshold": np.float32(0.1)}
    if version == 5:
        inputs["soft_nms_sigma"] = np.float32(sigma)
    return (f"NonMaxSuppressionV{version}", inputs, attrs)


CASES += [
    # Where's raw_ops argument is `condition`, its op-def name `input`: the sweep cannot vary it
    *[("Where", {"condition": _MASK.astype(t)}, {}) for t in _NUMBERS + (np.bool_,)],
    ("Where", {"condition": _MASK[0] != 0}, {}),
    ("Unique", {"x": _REPEATS}, {}),
    ("Unique", {"x": _REPEATS}, {"out_idx": tf.int64}),
    ("UniqueWithCounts", {"x": _REPEATS}, {}),
    *[(op, {"x": x, "axis": axis}, attrs) for op in ("UniqueV2", "UniqueWithCountsV2")
      for x, axis, attrs in ((_ROWS, np.int64([0]), {}),
                             (_ROWS, np.int32([-1]), {"out_idx": tf.int64}),
                             (_REPEATS, np.zeros(0, np.int64), {}))],
    ("DynamicPartition", {"data": _f32(5, 2), "partitions": np.int32([1, 0, 2, 1, 0])},
     {"num_partitions": 3}),
    ("DynamicPartition", {"data": _f32(2, 3, 2), "partitions": np.int32([[1, 1, 0], [0, 1, 1]])},
     {"num_partitions": 3}),
    *[(op, {"indices": [np.int32([0, 2]), np.int32([[1, 3], [4, dup]])],
            "data": [_f32(2, 3), _f32(2, 2, 3)]}, {})
      for op, dup in (("DynamicStitch", 0), ("ParallelDynamicStitch", 5))],
    ("ListDiff", {"x": np.float32([1, 2, 3, 2, 5, 4]), "y": np.float32([2, 4, 7])}, {}),
    ("ListDiff", {"x": np.int32([1, 2, 3, 0]), "y": np.int32([])}, {"out_idx": tf.int64}),
    *[(op, {"data": data, "segment_ids": ids}, {})
      for op in ("SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd")
      for data, ids in ((_f32(6, 3), np.int32([0, 0, 1, 3, 3, 3])),
                        (_f32(3, 2, 2), np.int64([1, 1, 2])))],
    *[(f"SparseSegment{norm}", {"data": data, "indices": idx, "segment_ids": ids}, {})
      for norm in ("Sum", "Mean", "SqrtN")
      for data, idx, ids in ((_f32(5, 3), _INDICES, _SORTED),
                             (_f32(4, 2, 2), np.int64([3, 0, 0]), np.int64([1, 1, 2])))],
    *[(f"SparseSegment{norm}GradV2", {"grad": _f32(4, 3), "indices": _INDICES,
                                       "segment_ids": _UNSORTED, "dense_output_dim0": np.int32(6)},
       {}) for norm in ("Sum", "Mean", "SqrtN")],
    # sparse_gradient: the gradient is IndexedSlices from SparseSegment*GradV2
    *[(f"SparseSegment{norm}", {"data": _f32(5, 3), "indices": _INDICES, "segment_ids": _SORTED},
       {"sparse_gradient": True}) for norm in ("Sum", "Mean", "SqrtN")],
    *[(f"SparseSegment{norm}WithNumSegments", {"data": _f32(5, 3), "indices": _INDICES,
                                               "segment_ids": _SORTED, "num_segments": np.int32(6)},
       {"sparse_gradient": True}) for norm in ("Sum", "Mean", "SqrtN")],
    ("NonMaxSuppression", {"boxes": _BOXES, "scores": _SCORES, "max_output_size": np.int32(5)},
     {"iou_threshold": 0.5}),
    ("NonMaxSuppressionV2", {"boxes": _BOXES, "scores": _SCORES, "max_output_size": np.int32(4),
                             "iou_threshold": np.float32(0.3)}, {}),
    ("NonMaxSuppressionWithOverlaps", {"overlaps": _OVERLAPS, "scores": _SCORES,
                                       "max_output_size": np.int32(5),
                                       "overlap_threshold": np.float32(0.5),
                                       "score_threshold": np.float32(0.1)}, {}),
    # bincounts as SparseTensors (tf.sparse.bincount): the sweep varies output_type (weights)
    ("DenseCountSparseOutput", {"values": _i32(0, 7, 2, 5), "weights": _f32(2, 5)},
     {"binary_output": False}),
    ("DenseCountSparseOutput", {"values": _i32(0, 7, 6).astype(np.int64),
                                "weights": np.zeros(0, np.float32)},
     {"binary_output": False, "minlength": 9}),
    ("DenseCountSparseOutput", {"values": _i32(0, 7, 3, 4), "weights": np.zeros(0, np.float32)},
     {"binary_output": True, "maxlength": 4}),
    ("SparseCountSparseOutput", {"indices": np.int64([[0, 0], [0, 3], [2, 1], [2, 2]]),
                                 "values": np.int32([4, 4, 1, 6]), "dense_shape": np.int64([3, 5]),
                                 "weights": _f32(4)}, {"binary_output": False}),
    ("SparseCountSparseOutput", {"indices": np.int64([[1], [3]]), "values": np.int64([2, 2]),
                                 "dense_shape": np.int64([5]), "weights": np.zeros(0, np.float32)},
     {"binary_output": True, "minlength": 4}),
    ("RaggedCountSparseOutput", {"splits": np.int64([0, 2, 2, 5]),
                                 "values": np.int64([1, 3, 3, 0, 1]), "weights": _f32(5)},
     {"binary_output": False, "minlength": 7}),
    ("SparseBincount", {"indices": np.int64([[0, 0], [0, 3], [2, 1], [2, 2], [1, 4]]),
                        "values": np.int32([4, 4, 1, 6, -1]), "dense_shape": np.int64([3, 5]),
                        "size": np.int32(5), "weights": _f32(5)}, {"binary_output": False}),
    ("SparseBincount", {"indices": np.int64([[1], [3], [4]]), "values": np.int64([2, 2, 0]),
                        "dense_shape": np.int64([5]), "size": np.int64(4),
                        "weights": np.zeros(0, np.float32)}, {"binary_output": True}),
    ("RaggedBincount", {"splits": np.int64([0, 2, 2, 5]), "values": np.int32([1, 3, 3, 0, 1]),
                        "size": np.int32(3), "weights": _f32(5)}, {"binary_output": False}),
    ("RaggedBincount", {"splits": np.int64([0, 4, 6]), "values": np.int64([1, 3, 3, 0, 1, 1]),
                        "size": np.int64(4), "weights": np.zeros(0, np.float32)},
     {"binary_output": False}),
    *[("CombinedNonMaxSuppression",
       {"boxes": b, "scores": _f32(2, 6, 3, lo=0.0, hi=1.0), "max_output_size_per_class": np.int32(2),
        "max_total_size": np.int32(total), "iou_threshold": np.float32(0.5),
        "score_threshold": np.float32(0.2)}, attrs)
      for b, total, attrs in ((_f32(2, 6, 1, 4, lo=-0.2, hi=1.2), 5, {}),
                              (_f32(2, 6, 3, 4, lo=0.0, hi=1.0), 9,
                               {"pad_per_class": True, "clip_boxes": False}))],
    _nms(3), _nms(4), _nms(4, pad_to_max_output_size=True), _nms(5), _nms(5, sigma=0.5),
    _nms(5, sigma=0.5, pad_to_max_output_size=True),
]
