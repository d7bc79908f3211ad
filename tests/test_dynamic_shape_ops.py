"""Hostile inputs for the plugin kernels of tf_plugin_cc/dynamic_shape_ops.cc (Where, Unique*,
DynamicPartition, DynamicStitch, ListDiff, Segment*, SparseSegment*, NonMaxSuppression*, the
sparse/ragged bincounts). tools/fuzz fuzzes only graph-engine ops, so these cases are written by
hand: empty tensors, NaN/inf, out-of-range and negative ids/partitions/indices, unsorted segment
ids, mismatched lengths, extreme num_segments/max_output_size. Each runs eagerly on the NPU (soft
placement off) and on the CPU in crash-isolated workers (tools/fuzz/ops.py's property): both
raise, or both succeed with equal results, and the NPU side never crashes."""
import numpy as np
import pytest

from tools.fuzz import ops

NAN, INF = np.float32(np.nan), np.float32(np.inf)
I32_MAX = np.iinfo(np.int32).max
_F = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
_BOXES = np.float32([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11], [1, 1, 0, 0]])
_SCORES = np.float32([0.9, 0.8, 0.7, 0.6])


def _nms(version, boxes=_BOXES, scores=_SCORES, size=3, iou=0.5, score=0.0, **attrs):
    inputs = {"boxes": boxes, "scores": scores, "max_output_size": np.int32(size),
              "iou_threshold": np.float32(iou), "score_threshold": np.float32(score)}
    if version == 5:
        inputs["soft_nms_sigma"] = np.float32(0.0)
    return (f"NonMaxSuppressionV{version}", "float32", inputs, attrs)


def _segment(op, data, ids, label="float32"):
    return (op, label, {"data": data, "segment_ids": ids}, {})


def _sparse_segment(norm, data, idx, ids):
    return (f"SparseSegment{norm}", "float32",
            {"data": data, "indices": np.int32(idx), "segment_ids": np.int32(ids)}, {})


def _grad_v2(norm, idx, ids, dim0, grad=_F):
    return (f"SparseSegment{norm}GradV2", "float32",
            {"grad": grad, "indices": np.int32(idx), "segment_ids": np.int32(ids),
             "dense_output_dim0": np.int32(dim0)}, {})


def _ragged_bincount(splits, values, size=4, weights=np.zeros(0, np.float32)):
    return ("RaggedBincount", "float32", {"splits": np.int64(splits), "values": np.int32(values),
                                          "size": np.int32(size), "weights": weights},
            {"binary_output": False})


def _sparse_bincount(indices, values, shape, size=4, weights=np.zeros(0, np.float32)):
    return ("SparseBincount", "float32",
            {"indices": np.int64(indices), "values": np.int32(values),
             "dense_shape": np.int64(shape), "size": np.int32(size), "weights": weights},
            {"binary_output": False})


CASES = [
    # Where
    ("Where", "bool", {"condition": np.zeros((0, 3), bool)}, {}),
    ("Where", "float32", {"condition": np.float32([NAN, 0, INF, -0.0, -INF])}, {}),
    ("Where", "float32", {"condition": np.float32(1.0)}, {}),
    # Unique*
    ("Unique", "float32", {"x": np.zeros(0, np.float32)}, {}),
    ("Unique", "float32", {"x": np.float32([NAN, 1, NAN, 1, INF, -INF, INF])}, {}),
    ("Unique", "float32", {"x": np.float32([0.0, -0.0, 0.0])}, {}),
    ("UniqueWithCounts", "int32", {"x": np.int32([I32_MAX, -1, I32_MAX, -2**31])}, {}),
    ("UniqueV2", "float32", {"x": _F, "axis": np.int64([2])}, {}),
    ("UniqueV2", "float32", {"x": _F, "axis": np.int64([-3])}, {}),
    ("UniqueV2", "float32", {"x": _F, "axis": np.int64([0, 1])}, {}),
    ("UniqueWithCountsV2", "float32", {"x": np.zeros((0, 3), np.float32), "axis": np.int64([0])},
     {}),
    ("UniqueWithCountsV2", "float32", {"x": np.zeros((2, 0), np.float32), "axis": np.int64([1])},
     {}),
    ("UniqueV2", "float32", {"x": np.float32([[NAN, 1], [NAN, 1]]), "axis": np.int64([0])}, {}),
    # DynamicPartition
    ("DynamicPartition", "float32", {"data": _F, "partitions": np.int32([0, 3, 1, 0])},
     {"num_partitions": 3}),
    ("DynamicPartition", "float32", {"data": _F, "partitions": np.int32([0, -1, 1, 0])},
     {"num_partitions": 3}),
    ("DynamicPartition", "float32", {"data": _F, "partitions": np.int32([0, 1, 1])},
     {"num_partitions": 3}),
    ("DynamicPartition", "float32", {"data": np.zeros((0, 2), np.float32),
                                     "partitions": np.zeros(0, np.int32)}, {"num_partitions": 2}),
    ("DynamicPartition", "float32", {"data": np.float32(3.0), "partitions": np.int32(1)},
     {"num_partitions": 2}),
    # DynamicStitch, ParallelDynamicStitch
    *[(op, "float32", inputs, {}) for op in ("DynamicStitch", "ParallelDynamicStitch")
      for inputs in (
          {"indices": [np.int32([0, -1])], "data": [_F[:2]]},
          {"indices": [np.int32([0, 1, 2])], "data": [_F[:2]]},
          {"indices": [np.int32([0, 1]), np.int32([2])], "data": [_F[:2], _F[:1, :2]]},
          {"indices": [np.zeros(0, np.int32)], "data": [np.zeros((0, 3), np.float32)]},
          {"indices": [np.int32([3, 3, 0])], "data": [np.float32([NAN, INF, 1])]},
      )],
    # ListDiff
    ("ListDiff", "float32", {"x": np.float32([NAN, 1, INF, NAN]), "y": np.float32([NAN, INF])},
     {}),
    ("ListDiff", "float32", {"x": np.zeros(0, np.float32), "y": np.float32([1])}, {}),
    ("ListDiff", "float32", {"x": _F, "y": np.float32([1])}, {}),
    ("ListDiff", "int32", {"x": np.int32([I32_MAX, -2**31, 0]), "y": np.int32([[0]])}, {}),
    # Segment{Sum,Mean,Max,Min,Prod}
    *[_segment(op, data, ids) for op in ("SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin",
                                         "SegmentProd")
      for data, ids in (
          (_F, np.int32([1, 0, 0, 2])),                          # unsorted
          (_F, np.int32([-1, 0, 0, 1])),                         # negative
          (_F, np.int32([0, 0, 1])),                             # length mismatch
          (np.zeros((0, 3), np.float32), np.zeros(0, np.int32)),
          (np.float32([[NAN, 1], [INF, -INF], [0, INF], [2, 0]]), np.int32([0, 0, 2, 2])),
          (_F, np.int32([0, 0, 5, 5])),                          # empty segments in between
          (_F, np.int32([0, 0, 1, I32_MAX])),                    # a last id + 1 that overflows
          (np.float32(1.0), np.int32(0)),                        # scalar data
      )],
    _segment("SegmentSum", _F, np.int64([0, 0, 1, 2**40])),      # too many rows to allocate
    _segment("SegmentMax", _F, np.int64([0, 0, 1, 2**62])),      # rows x columns overflows
    ("SparseSegmentSum", "float32", {"data": _F, "indices": np.int32([0, 1]),
                                     "segment_ids": np.int64([0, 2**40])}, {}),
    _segment("SegmentMax", np.int32([[I32_MAX], [-2**31], [5]]), np.int64([0, 0, 2]), "int32"),
    _segment("SegmentProd", np.int32([[2**16], [2**16], [3]]), np.int64([0, 0, 1]), "int32"),
    # SparseSegment{Sum,Mean,SqrtN}
    *[_sparse_segment(norm, data, idx, ids) for norm in ("Sum", "Mean", "SqrtN")
      for data, idx, ids in (
          (_F, [0, 4], [0, 1]),                                  # index out of range
          (_F, [0, -1], [0, 1]),                                 # negative index
          (_F, [0, 1, 2], [1, 0, 2]),                            # unsorted ids
          (_F, [0, 1], [0]),                                     # length mismatch
          (_F, [], []),
          (_F, [0, 1], [-1, 0]),
          (_F, [1, 1], [0, I32_MAX]),
          (np.float32([[NAN, INF], [-INF, INF], [1, 2], [3, 4]]), [0, 1, 1, 2], [0, 0, 3, 3]),
      )],
    # SparseSegment{Sum,Mean,SqrtN}GradV2
    *[_grad_v2(norm, idx, ids, dim0) for norm in ("Sum", "Mean", "SqrtN")
      for idx, ids, dim0 in (
          ([0, 1], [0, 1], 0),                                   # no output rows
          ([0, 5], [0, 1], 5),                                   # index out of range
          ([0, -1], [0, 1], 5),
          ([0, 1], [0, 4], 5),                                   # segment id past grad's rows
          ([0, 1], [0, -1], 5),
          ([], [], 5),
          ([0, 1], [0], 5),                                      # length mismatch
          ([0, 1], [0, 1], -1),                                  # negative dense_output_dim0
          ([3, 3, 0], [2, 0, 2], 4),                             # unsorted ids are allowed
      )],
    # NonMaxSuppression*
    _nms(3, size=I32_MAX),
    _nms(3, size=-1),
    _nms(3, size=0),
    _nms(3, iou=1.5),
    _nms(3, iou=-0.5),
    _nms(4, scores=np.float32([NAN, 0.8, INF, -INF]), pad_to_max_output_size=True),
    _nms(5, boxes=np.float32([[NAN, 0, 1, 1], [0, 0, INF, 1], [0, 0, 1, 1], [0, 0, 1, 1]])),
    _nms(3, boxes=np.zeros((0, 4), np.float32), scores=np.zeros(0, np.float32)),
    _nms(3, scores=np.float32([0.9, 0.8, 0.7])),                 # length mismatch
    _nms(3, boxes=_BOXES[:, :3]),                                # boxes not [n, 4]
    _nms(4, size=I32_MAX, pad_to_max_output_size=False),
    ("NonMaxSuppression", "float32", {"boxes": _BOXES, "scores": _SCORES,
                                      "max_output_size": np.int32(-3)}, {"iou_threshold": 0.5}),
    ("NonMaxSuppressionWithOverlaps", "float32",
     {"overlaps": np.float32([[1, NAN], [NAN, 1]]), "scores": np.float32([0.5, 0.7]),
      "max_output_size": np.int32(5), "overlap_threshold": np.float32(0.5),
      "score_threshold": np.float32(0.1)}, {}),
    ("NonMaxSuppressionWithOverlaps", "float32",
     {"overlaps": np.float32([[1, 0, 0]] * 2), "scores": np.float32([0.5, 0.7]),
      "max_output_size": np.int32(5), "overlap_threshold": np.float32(0.5),
      "score_threshold": np.float32(0.1)}, {}),
    *[("CombinedNonMaxSuppression", "float32",
       {"boxes": _BOXES[None, :, None], "scores": np.float32(scores),
        "max_output_size_per_class": np.int32(per_class), "max_total_size": np.int32(total),
        "iou_threshold": np.float32(0.5), "score_threshold": np.float32(0.1)}, {})
      for scores, per_class, total in (
          ([[[0.9], [NAN], [INF], [0.2]]], 2, 3),
          ([[[0.9], [0.8], [0.7], [0.2]]], -1, 3),
          ([[[0.9], [0.8], [0.7], [0.2]]], 2, 0),
          ([[[0.9], [0.8], [0.7], [0.2]]], 2, -2),
          ([[[0.9], [0.8], [0.7]]], 2, 3),                       # box count mismatch
      )],
    # Sparse/Ragged bincounts and counts
    _ragged_bincount([0, 2, 5], [1, 3, -1, 0, 1]),               # negative value
    _ragged_bincount([0, 2, 5], [1, 3, 9, 0, 1]),                # past size: dropped
    _ragged_bincount([1, 2, 5], [1, 3, 3, 0, 1]),                # splits not from 0
    _ragged_bincount([0, 3, 2, 5], [1, 3, 3, 0, 1]),             # decreasing splits
    _ragged_bincount([0, 2, 4], [1, 3, 3, 0, 1]),                # splits not ending at len
    _ragged_bincount([0, 2, 7], [1, 3, 3, 0, 1]),                # splits past the values
    _ragged_bincount([0], []),
    _ragged_bincount([0, 2, 5], [1, 3, 3, 0, 1], size=-1),
    _ragged_bincount([0, 2, 5], [1, 3, 3, 0, 1], weights=np.float32([1, 2])),
    _ragged_bincount([0, 2, 5], [1, 3, 3, 0, 1], weights=np.float32([NAN, INF, -INF, 1, 2])),
    _sparse_bincount([[0, 0], [1, 3]], [1, -2], [2, 4]),
    _sparse_bincount([[0, 0], [5, 3]], [1, 2], [2, 4]),           # row past dense_shape
    _sparse_bincount([[0, 0], [-1, 3]], [1, 2], [2, 4]),
    _sparse_bincount([[0, 0], [1, 3]], [1, 2, 3], [2, 4]),        # lengths mismatch
    _sparse_bincount(np.zeros((0, 2)), [], [2, 4]),
    _sparse_bincount([[0, 0], [1, 3]], [1, 2], [2, 4], size=-3),
    ("DenseCountSparseOutput", "float32", {"values": np.int32([[1, -1]]),
                                           "weights": np.zeros(0, np.float32)},
     {"binary_output": False}),
    ("DenseCountSparseOutput", "float32", {"values": np.int32([[1, 2]]),
                                           "weights": np.float32([1, 2, 3])},
     {"binary_output": False}),
    ("DenseCountSparseOutput", "float32", {"values": np.zeros((0, 3), np.int32),
                                           "weights": np.zeros(0, np.float32)},
     {"binary_output": False, "minlength": 3}),
    ("DenseCountSparseOutput", "float32", {"values": np.int32([[1, 2]]),
                                           "weights": np.zeros(0, np.float32)},
     {"binary_output": False, "maxlength": 0}),
    ("SparseCountSparseOutput", "float32",
     {"indices": np.int64([[0, 9], [1, 1]]), "values": np.int32([1, 2]),
      "dense_shape": np.int64([2, 4]), "weights": np.zeros(0, np.float32)},
     {"binary_output": False}),
    ("SparseCountSparseOutput", "float32",
     {"indices": np.int64([[0, 1]]), "values": np.int32([1, 2]),
      "dense_shape": np.int64([2, 4]), "weights": np.zeros(0, np.float32)},
     {"binary_output": False}),
    ("RaggedCountSparseOutput", "float32",
     {"splits": np.int64([0, 4, 2]), "values": np.int64([1, 3, 3, 0, 1]),
      "weights": np.zeros(0, np.float32)}, {"binary_output": False}),
    ("RaggedCountSparseOutput", "float32",
     {"splits": np.int64([0, 2, 5]), "values": np.int64([1, 3, -3, 0, 1]),
      "weights": np.zeros(0, np.float32)}, {"binary_output": False}),
]


@pytest.fixture(scope="module")
def workers():
    with ops.Workers() as w:
        yield w


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_plugin_op_survives_hostile_input_and_agrees_with_tf(workers, case):
    verdict = workers.verdict(case, timeout=120)
    assert verdict == "ok", f"{verdict}\n  {ops.describe(case)}"
