"""Example inputs for the ops added for model coverage (Keras activations, attention, padding):
(op, tf.raw_ops inputs, attrs), the same form as tests/test_ge_ops.py's CASES. The coverage
sweep (op_coverage.py) runs both tables; tests/test_op_coverage.py checks these against TF."""
import numpy as np

_R = np.random.default_rng(1)


def _f32(*shape, lo=-2.0, hi=2.0):
    return _R.uniform(lo, hi, shape).astype(np.float32)


def _i32(lo, hi, *shape):
    return _R.integers(lo, hi, shape).astype(np.int32)


_UNIT = _f32(3, 4, lo=-0.9, hi=0.9)          # inside the domain of asin/acos/atanh
_X, _Y = _f32(3, 4), _f32(4)

CASES = [
    *[(op, {"x": _f32(3, 4)}, {}) for op in
      ("Erf", "Erfc", "Expm1", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Rint")],
    ("Inv", {"x": _f32(3, 4, lo=0.5, hi=2.0) * np.array([1, -1, 1, -1], np.float32)}, {}),
    ("Rint", {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)}, {}),
    *[(op, {"x": _UNIT}, {}) for op in ("Asin", "Acos", "Atanh")],
    ("Acosh", {"x": _f32(3, 4, lo=1.1, hi=3.0)}, {}),
    ("Invert", {"x": _i32(-50, 50, 6)}, {}),
    ("Selu", {"features": _f32(3, 4)}, {}),
    ("SeluGrad", {"gradients": _f32(3, 4), "outputs": _f32(3, 4, lo=-1.7, hi=2.0)}, {}),
    ("SoftsignGrad", {"gradients": _f32(3, 4), "features": _f32(3, 4)}, {}),
    ("InvGrad", {"y": _f32(3, 4), "dy": _f32(3, 4)}, {}),
    ("Atan2", {"y": _f32(3, 4), "x": _f32(4)}, {}),
    ("Xlogy", {"x": np.array([0, 1, -2, 0], np.float32), "y": np.array([0, 2, 3, 5], np.float32)}, {}),
    ("Xlog1py", {"x": np.array([0, 1, -2, 3], np.float32), "y": np.array([-1, 2, 0.5, 5], np.float32)}, {}),
    ("Xdivy", {"x": np.array([0, 1, -2, 3], np.float32), "y": np.array([0, 2, 0.5, 5], np.float32)}, {}),
    ("MulNoNan", {"x": np.array([1.5, 1, -2, np.nan], np.float32), "y": np.array([0, 2, 0.5, 0], np.float32)}, {}),
    ("TruncateDiv", {"x": _f32(3, 4), "y": _f32(4, lo=0.5, hi=2.0)}, {}),
    ("TruncateDiv", {"x": _i32(-9, 9, 3, 4), "y": np.array([3, -2, 1, -4], np.int32)}, {}),
    ("TruncateMod", {"x": _f32(3, 4), "y": _f32(4, lo=0.5, hi=2.0)}, {}),
    ("TruncateMod", {"x": _i32(-9, 9, 3, 4), "y": np.array([3, -2, 1, -4], np.int32)}, {}),
    ("ApproximateEqual", {"x": _X, "y": _X + np.array([0, 1e-6, 1e-3, 0], np.float32)}, {"tolerance": 1e-4}),
    ("Einsum", {"inputs": [_f32(2, 3, 4), _f32(2, 4, 5)]}, {"equation": "bij,bjk->bik"}),
    ("Einsum", {"inputs": [_f32(2, 5, 2, 4), _f32(2, 6, 2, 4)]}, {"equation": "aecd,abcd->acbe"}),
    ("Einsum", {"inputs": [_f32(2, 5, 8), _f32(8, 2, 4)]}, {"equation": "abc,cde->abde"}),
    ("Einsum", {"inputs": [_f32(2, 3, 5, 4), _f32(4, 6)]}, {"equation": "...k,kn->...n"}),
    ("Einsum", {"inputs": [_f32(3, 3)]}, {"equation": "ii->i"}),
    ("Einsum", {"inputs": [_f32(3)]}, {"equation": "i->ii"}),
    ("ConcatOffset", {"concat_dim": np.int32(1),
                      "shape": [np.array([2, 3, 5], np.int32), np.array([2, 4, 5], np.int32)]}, {}),
    ("MirrorPad", {"input": _f32(2, 4, 5), "paddings": np.array([[0, 0], [1, 2], [3, 1]], np.int32)},
     {"mode": "REFLECT"}),
    ("MirrorPad", {"input": _f32(2, 4, 5), "paddings": np.array([[1, 0], [2, 2], [0, 5]], np.int32)},
     {"mode": "SYMMETRIC"}),
    ("MirrorPadGrad", {"input": _f32(2, 7, 9), "paddings": np.array([[0, 0], [1, 2], [3, 1]], np.int32)},
     {"mode": "REFLECT"}),
    ("MirrorPadGrad", {"input": _f32(3, 8, 10), "paddings": np.array([[1, 0], [2, 2], [0, 5]], np.int32)},
     {"mode": "SYMMETRIC"}),
    ("ResizeBilinear", {"images": _f32(2, 5, 7, 3), "size": np.array([10, 14], np.int32)},
     {"half_pixel_centers": True}),
    ("ResizeBilinear", {"images": _f32(2, 5, 7, 3), "size": np.array([3, 4], np.int32)},
     {"align_corners": True}),
    ("ResizeBilinear", {"images": _i32(0, 255, 1, 4, 4, 2), "size": np.array([7, 5], np.int32)}, {}),
    ("ResizeBilinearGrad", {"grads": _f32(2, 10, 14, 3), "original_image": _f32(2, 5, 7, 3)},
     {"half_pixel_centers": True}),
    ("ResizeBilinearGrad", {"grads": _f32(2, 3, 4, 3), "original_image": _f32(2, 5, 7, 3)},
     {"align_corners": True}),
]
