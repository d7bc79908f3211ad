"""Special functions and small elementwise ops (graph_engine/ops/special.py): inputs inside each
function's domain, spanning the intervals of its piecewise approximations."""
import numpy as np

from npu_device.tools.op_cases import _f32, _i32

_POS = _f32(3, 4, lo=0.2, hi=5.0)
_A = _f32(4, lo=0.5, hi=4.0)                 # shape parameters, broadcast against _POS


def _unary(ops, x):
    return [(op, {"x": x}, {}) for op in ops]


CASES = [
    *_unary(("Lgamma", "Digamma", "BesselY0", "BesselY1", "BesselK0", "BesselK0e", "BesselK1",
             "BesselK1e"), _POS),
    ("Lgamma", {"x": np.array([-2.5, -1.3, -0.5, 0.3, 1.0, 2.0, 7.5, 30.0], np.float32)}, {}),
    ("Digamma", {"x": np.array([-2.5, -1.3, -0.5, 0.3, 1.0, 2.0, 7.5, 30.0], np.float32)}, {}),
    *_unary(("Erfinv",), _f32(3, 4, lo=-0.95, hi=0.95)),
    *_unary(("Ndtri",), _f32(3, 4, lo=0.02, hi=0.98)),
    *_unary(("BesselI0", "BesselI0e", "BesselI1", "BesselI1e"), _f32(3, 4, lo=-4.0, hi=4.0)),
    *_unary(("BesselJ0", "BesselJ1"), _f32(3, 4, lo=-6.0, hi=6.0)),
    *_unary(("Dawsn",), _f32(3, 5, lo=-8.0, hi=8.0)),                # all three intervals
    # past 1.6 the asymptotic form; not much further, as the gradient's sin(pi/2 x^2) computed in
    # float16 loses the argument's low bits
    *_unary(("FresnelCos", "FresnelSin"), np.array([[-2.0, -1.7, -1.2, -0.5], [0.0, 0.3, 0.9, 1.4],
                                                    [1.62, 1.75, 1.9, 2.1]], np.float32)),
    *_unary(("Spence",), _f32(3, 4, lo=0.05, hi=4.0)),
    *[(op, {"a": _A, "x": _POS}, {}) for op in ("Igamma", "Igammac", "IgammaGradA")],
    ("RandomGammaGrad", {"alpha": _A, "sample": _POS}, {}),
    ("Polygamma", {"a": np.array([0, 1, 2, 3], np.float32), "x": _f32(3, 4, lo=0.5, hi=4.0)}, {}),
    ("Zeta", {"x": _f32(3, 4, lo=1.5, hi=5.0), "q": _f32(4, lo=0.5, hi=3.0)}, {}),
    ("Betainc", {"a": _f32(3, 4, lo=0.5, hi=3.0), "b": np.float32(2.5),
                 "x": _f32(3, 4, lo=0.05, hi=0.95)}, {}),
    ("Betainc", {"a": np.float32(1.5), "b": _f32(5, lo=0.5, hi=3.0), "x": _f32(5, lo=0.05, hi=0.95)}, {}),
    ("NextAfter", {"x1": np.array([1, -1, 0, 0, 2.5, 3], np.float32),
                   "x2": np.array([2, -2, 1, -1, 2.5, -np.inf], np.float32)}, {}),
    *[(op, {"x": _i32(-100, 100, 3, 4), "y": _i32(-2, 70, 3, 4)}, {})      # shifts past the width
      for op in ("LeftShift", "RightShift")],
    ("ClipByValue", {"t": _f32(3, 4), "clip_value_min": np.float32(-0.5),
                     "clip_value_max": _f32(3, 4, lo=0.2, hi=1.0)}, {}),
    ("ClipByValue", {"t": _i32(-9, 9, 2, 5), "clip_value_min": _i32(-5, 0, 2, 5),
                     "clip_value_max": np.int32(4)}, {}),
    *[(op, {"tensor": _f32(3, 4)}, {"message": "checked"}) for op in ("CheckNumerics", "CheckNumericsV2")],
    ("EnsureShape", {"input": _f32(3, 4)}, {"shape": [3, None]}),
    ("EnsureShape", {"input": _i32(-9, 9, 2, 3)}, {"shape": [2, 3]}),
]
