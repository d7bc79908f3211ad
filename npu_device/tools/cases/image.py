"""Cases of the image ops (graph_engine/ops/resize.py, graph_engine/ops/image.py): every sampling
mode of each (align_corners, half_pixel_centers, interpolation, fill_mode ...), upscaling and
downscaling by uneven ratios, crops partly outside the image."""
import numpy as np

from npu_device.tools.op_cases import _f32

_IMG = _f32(2, 5, 7, 3)
_MODES = ({}, {"align_corners": True}, {"half_pixel_centers": True})


def _size(h, w):
    return np.array([h, w], np.int32)


CASES = [
    *[(op, {"images": _IMG, "size": _size(h, w)}, mode)
      for op in ("ResizeNearestNeighbor", "ResizeBicubic")
      for mode in _MODES for h, w in ((9, 12), (3, 4))],
    ("ResizeNearestNeighbor", {"images": _f32(1, 1, 1, 2), "size": _size(3, 2)}, {"align_corners": True}),
    *[("ResizeNearestNeighborGrad", {"grads": _f32(2, h, w, 3), "size": _size(5, 7)}, mode)
      for mode in _MODES for h, w in ((9, 12), (3, 4))],
    *[("ResizeBicubicGrad", {"grads": _f32(2, h, w, 3), "original_image": _IMG}, mode)
      for mode in _MODES for h, w in ((9, 12), (3, 4))],
    *[("ResizeArea", {"images": _IMG, "size": _size(h, w)}, mode)
      for mode in _MODES[:2] for h, w in ((9, 12), (3, 4), (2, 5))],
]

_CROP_IMG = _f32(2, 6, 8, 3)
# inside, partly outside the image (extrapolated), flipped; box 1 of image 1
_BOXES = np.array([[0.1, 0.23, 0.82, 0.91], [-0.27, 0.31, 0.63, 1.33], [0.93, 0.77, 0.18, 0.12]], np.float32)
_BOX_IND = np.array([0, 1, 1], np.int32)
_CROP = {"image": _CROP_IMG, "boxes": _BOXES, "box_ind": _BOX_IND}
# per image: a rotation with zoom and shift, a perspective warp
_TRANSFORMS = np.array([[0.87, -0.52, 1.3, 0.47, 0.91, -0.8, 0.0, 0.0],
                        [1.1, 0.13, -0.6, -0.21, 0.93, 0.7, 0.031, -0.027]], np.float32)
_RGB = _f32(2, 4, 5, 3, lo=0.0, hi=1.0)

CASES += [
    *[("CropAndResize", {**_CROP, "crop_size": _size(h, w)}, {"method": m, "extrapolation_value": 0.5})
      for m in ("bilinear", "nearest") for h, w in ((4, 5), (1, 1))],
    *[("CropAndResizeGradImage", {"grads": _f32(3, h, w, 3), "boxes": _BOXES, "box_ind": _BOX_IND,
                                  "image_size": np.array([2, 6, 8, 3], np.int32)}, {"method": m, "T": t})
      for m in ("bilinear", "nearest") for h, w in ((4, 5), (1, 1)) for t in (np.float32, np.float16)],
    *[("CropAndResizeGradBoxes", {"grads": _f32(3, h, w, 3), **_CROP}, {})
      for h, w in ((4, 5), (1, 1))],
    *[("ImageProjectiveTransformV3", {"images": _f32(2, 5, 6, 3), "transforms": t, "output_shape": _size(h, w),
                                      "fill_value": np.float32(0.5)}, {"interpolation": i, "fill_mode": f})
      for i in ("NEAREST", "BILINEAR") for f in ("REFLECT", "WRAP", "CONSTANT", "NEAREST")
      for t, (h, w) in ((_TRANSFORMS, (5, 6)), (_TRANSFORMS[:1], (7, 4)))],
    *[("ImageProjectiveTransformV2", {"images": _f32(2, 5, 6, 3), "transforms": _TRANSFORMS,
                                      "output_shape": _size(6, 5)}, {"interpolation": i, "fill_mode": f})
      for i in ("NEAREST", "BILINEAR") for f in ("REFLECT", "CONSTANT")],
    ("RGBToHSV", {"images": _RGB}, {}),
    ("RGBToHSV", {"images": np.array([[0.5, 0.5, 0.5], [0, 0, 0], [1, 0, 0], [0.2, 0.9, 0.9]], np.float32)}, {}),
    ("HSVToRGB", {"images": _RGB}, {}),
    ("AdjustHue", {"images": _RGB, "delta": np.float32(0.37)}, {}),
    ("AdjustHue", {"images": _RGB, "delta": np.float32(-0.81)}, {}),
    ("AdjustSaturation", {"images": _RGB, "scale": np.float32(1.7)}, {}),
    ("AdjustSaturation", {"images": _RGB, "scale": np.float32(0.4)}, {}),
    ("AdjustContrastv2", {"images": _RGB, "contrast_factor": np.float32(1.6)}, {}),
]

# ScaleAndTranslate (tf.image.resize with antialias, lanczos3/5, gaussian, mitchellcubic): every
# sampling kernel down- and upscaling by uneven ratios, with and without antialias, and a scale
# and translation that put part of the output outside the image (empty spans). Its own random
# values, so that the cases of the modules after this one keep theirs.
_ST_R = np.random.default_rng(23)
_ST_IMG = _ST_R.uniform(-2, 2, (2, 5, 7, 3)).astype(np.float32)
_ST_KERNELS = ("lanczos3", "lanczos5", "gaussian", "mitchellcubic", "keyscubic", "triangle", "box", "lanczos1")


def _st(h, w, scale=None, translation=(0.0, 0.0)):
    """size, scale and translation of a resize of _ST_IMG to h x w (scale: size / input size)."""
    scale = scale or (h / 5, w / 7)
    return {"size": _size(h, w), "scale": np.float32(scale), "translation": np.float32(translation)}


CASES += [
    *[("ScaleAndTranslate", {"images": _ST_IMG, **_st(h, w)}, {"kernel_type": k, "antialias": True})
      for k in _ST_KERNELS for h, w in ((3, 4), (9, 12))],
    *[("ScaleAndTranslate", {"images": _ST_IMG, **_st(2, 3)}, {"kernel_type": k, "antialias": False})
      for k in ("lanczos3", "gaussian", "mitchellcubic")],
    ("ScaleAndTranslate", {"images": _ST_IMG, **_st(6, 8, scale=(0.7, 1.9), translation=(0.3, -2.2))},
     {"kernel_type": "lanczos5", "antialias": True}),
    *[("ScaleAndTranslateGrad", {"grads": _ST_R.uniform(-1, 1, (2, *st["size"], 3)).astype(np.float32),
                                 "original_image": _ST_IMG, "scale": st["scale"],
                                 "translation": st["translation"]}, {"kernel_type": k, "antialias": a})
      for k, a, st in (("lanczos3", True, _st(3, 4)), ("mitchellcubic", True, _st(9, 12)),
                       ("gaussian", False, _st(2, 3)),
                       ("keyscubic", True, _st(6, 8, scale=(0.7, 1.9), translation=(0.3, -2.2))))],
]
