"""Example inputs for the ops added for model coverage (Keras activations, attention, padding):
(op, tf.raw_ops inputs, attrs), the same form as tests/test_ge_ops.py's CASES. The coverage
sweep (op_coverage.py) runs both tables; tests/test_op_coverage.py checks these against TF."""
import numpy as np
import tensorflow as tf

_R = np.random.default_rng(1)


def _f32(*shape, lo=-2.0, hi=2.0):
    return _R.uniform(lo, hi, shape).astype(np.float32)


def _i32(lo, hi, *shape):
    return _R.integers(lo, hi, shape).astype(np.int32)


_UNIT = _f32(3, 4, lo=-0.9, hi=0.9)          # inside the domain of asin/acos/atanh
_X, _Y = _f32(3, 4), _f32(4)
_KEY = np.array([0x9A3F00C1D2E4F567], np.uint64)
_COUNTER = np.array([0xFFFFFFFFFFFFFFFE, 0x0123456789ABCDEF], np.uint64)   # the low word carries
_POOL = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
_POOL_X = _f32(2, 6, 6, 3)
_POOLED = tf.raw_ops.MaxPool(input=_POOL_X, **_POOL).numpy()
_POOL3D = dict(ksize=[1, 2, 3, 2, 1], strides=[1, 2, 2, 1, 1], padding="SAME")
_POOL3D_X = _f32(2, 5, 6, 4, 3)
_POOLED3D = tf.raw_ops.MaxPool3D(input=_POOL3D_X, **_POOL3D).numpy()

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
    # stateless random ops (Dropout, initializers): any 64-bit key and 128-bit counter
    ("StatelessRandomGetKeyCounter", {"seed": np.array([3, -7], np.int32)}, {}),
    *[(op, {"key": _KEY, "counter": _COUNTER, "shape": np.array([3, 5], np.int32),
            "alg": np.int32(alg)}, {"dtype": dtype})
      for op in ("StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2")
      for alg, dtype in ((1, tf.float32), (3, tf.float16), (1, tf.bfloat16))],
    *[(op, {"seed": np.array([5, 11], np.int32), "shape": np.array([2, 7], np.int32)}, {"dtype": tf.float32})
      for op in ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal")],
    *[(op, {"x": _f32(3, 4, 5, lo=0.5, hi=1.5) * np.array([1, -1, 1, 1, -1], np.float32),
            "axis": np.int32(axis)}, {"exclusive": ex, "reverse": rev})
      for op in ("Cumsum", "Cumprod") for axis, ex, rev in ((1, False, False), (-1, True, True))],
    ("Cumsum", {"x": _i32(-9, 9, 4, 3), "axis": np.int32(0)}, {"reverse": True}),
    ("MaxPoolGradGrad", {"orig_input": _POOL_X, "orig_output": _POOLED, "grad": _f32(2, 6, 6, 3)}, _POOL),
    ("MaxPoolGradGrad", {"orig_input": np.round(_POOL_X), "grad": _f32(2, 6, 6, 3),
                         "orig_output": tf.raw_ops.MaxPool(input=np.round(_POOL_X), **_POOL).numpy()},
     _POOL),                                                    # ties: the first maximum wins
    ("Conv3D", {"input": _f32(2, 5, 6, 4, 3), "filter": _f32(2, 3, 2, 3, 4)},
     dict(strides=[1, 1, 2, 1, 1], padding="SAME")),
    ("Conv3D", {"input": _f32(1, 3, 5, 6, 4), "filter": _f32(2, 2, 3, 3, 2)},
     dict(strides=[1, 1, 1, 1, 1], padding="SAME", data_format="NCDHW")),
    ("Conv3D", {"input": _f32(1, 5, 6, 4, 3), "filter": _f32(2, 3, 2, 3, 2)},
     dict(strides=[1, 1, 1, 1, 1], padding="VALID", dilations=[1, 2, 1, 1, 1])),
    ("Conv3DBackpropInputV2", {"input_sizes": np.array([2, 5, 6, 4, 3], np.int32),
                               "filter": _f32(2, 3, 2, 3, 4), "out_backprop": _f32(2, 5, 3, 4, 4)},
     dict(strides=[1, 1, 2, 1, 1], padding="SAME")),
    ("Conv3DBackpropFilterV2", {"input": _f32(2, 5, 6, 4, 3), "filter_sizes": np.array([2, 3, 2, 3, 4], np.int32),
                                "out_backprop": _f32(2, 4, 2, 3, 4)},
     dict(strides=[1, 1, 2, 1, 1], padding="VALID")),
    ("GatherNd", {"params": _f32(4, 5, 3), "indices": np.array([[[1, 2], [3, 0]], [[0, 4], [1, 2]]], np.int32)}, {}),
    ("GatherNd", {"params": _i32(-9, 9, 4, 5), "indices": np.array([[3], [0], [3]], np.int64)}, {}),
    ("ScatterNd", {"indices": np.array([[1], [3], [1]], np.int32), "updates": _f32(3, 5),
                   "shape": np.array([4, 5], np.int32)}, {}),               # repeated index: summed
    ("ScatterNd", {"indices": np.array([[0, 1], [2, 2]], np.int64), "updates": _i32(-9, 9, 2),
                   "shape": np.array([3, 4], np.int64)}, {}),
    *[(op, {"input": _POOL3D_X}, _POOL3D) for op in ("MaxPool3D", "AvgPool3D")],
    ("AvgPool3D", {"input": np.moveaxis(_POOL3D_X, -1, 1)},
     dict(ksize=[1, 1, 2, 2, 2], strides=[1, 1, 2, 1, 2], padding="VALID", data_format="NCDHW")),
    ("MaxPool3DGrad", {"orig_input": _POOL3D_X, "orig_output": _POOLED3D, "grad": _f32(*_POOLED3D.shape)}, _POOL3D),
    ("MaxPool3DGrad", {"orig_input": np.round(_POOL3D_X), "grad": _f32(*_POOLED3D.shape),
                       "orig_output": tf.raw_ops.MaxPool3D(input=np.round(_POOL3D_X), **_POOL3D).numpy()},
     _POOL3D),                                       # ties: every maximal element gets the gradient
    ("MaxPool3DGradGrad", {"orig_input": np.round(_POOL3D_X), "grad": _f32(*_POOL3D_X.shape),
                           "orig_output": tf.raw_ops.MaxPool3D(input=np.round(_POOL3D_X), **_POOL3D).numpy()},
     _POOL3D),
    ("AvgPool3DGrad", {"orig_input_shape": np.array(_POOL3D_X.shape, np.int32), "grad": _f32(*_POOLED3D.shape)},
     _POOL3D),
]
