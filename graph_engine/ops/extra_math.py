"""Elementwise math beyond elementwise.py that Keras models need: gelu's Erf, inverse and
hyperbolic trigonometry, Selu/Softsign gradients, and TF's zero-safe ops (Xlogy, MulNoNan ...).
Kernels: functors in runtime/kernels/elementwise_functors.h (registered by elementwise.cc)."""
import math

import numpy as np

from graph_engine.ops.base import FLOAT, INT, NUMBER, register
from graph_engine.ops.elementwise import Binary, Gradient, Unary, safe_divisor, trunc_div

_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

_erf = np.vectorize(math.erf, otypes=[np.float64])


@register
class Erf(Unary):
    layout_agnostic = True
    fn = staticmethod(lambda x: _erf(x).astype(x.dtype))

@register
class Erfc(Unary): fn = staticmethod(lambda x: (1 - _erf(x)).astype(x.dtype))
@register
class Expm1(Unary):
    fusible = True
    fn = np.expm1

@register
class Expint(Unary):
    """The exponential integral Ei(x) (tf.math.special.expint); NaN for x < 0, as TF."""
    fusible = layout_agnostic = True
    fn = staticmethod(lambda x: _expint(x.astype(np.float64)).astype(x.dtype))


def _expint(x):
    """Ei(x) = gamma + ln x + sum_k x^k / (k k!) for x > 0 (terms all positive: no cancellation)."""
    with np.errstate(all="ignore"):
        positive = np.where(x > 0, x, 1.0)
        term, total = np.ones_like(positive), np.zeros_like(positive)
        for k in range(1, 400):
            term = term * positive / k
            total += term / k
        result = np.euler_gamma + np.log(positive) + total
        return np.where(x > 0, result, np.where(x == 0, -np.inf, np.nan))


@register
class Tan(Unary): fn = np.tan
@register
class Atan(Unary): fn = np.arctan
@register
class Asin(Unary): fn = np.arcsin
@register
class Acos(Unary): fn = np.arccos
@register
class Sinh(Unary): fn = np.sinh
@register
class Cosh(Unary): fn = np.cosh
@register
class Asinh(Unary): fn = np.arcsinh
@register
class Acosh(Unary): fn = np.arccosh
@register
class Atanh(Unary): fn = np.arctanh
@register
class Rint(Unary): fn = np.rint                     # half to even, like TF
@register
class Inv(Unary):
    fusible = True
    functor = "Reciprocal"
    fn = staticmethod(lambda x: 1 / x)

@register
class Invert(Unary): type_attrs = {"T": INT}; fn = np.invert


@register
class Selu(Unary):
    fusible = layout_agnostic = True
    fn = staticmethod(lambda x: np.where(x > 0, _SELU_SCALE * x,
                                         _SELU_SCALE * _SELU_ALPHA * np.expm1(np.minimum(x, 0))))


@register
class SeluGrad(Gradient):
    """(gradients, outputs): the gradient from Selu's output."""
    fusible = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda g, y: np.where(y < 0, g * (y + _SELU_SCALE * _SELU_ALPHA), g * _SELU_SCALE))


@register
class SoftsignGrad(Gradient):
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda g, f: g / np.square(1 + np.abs(f)))


@register
class InvGrad(Gradient):
    """(y, dy) with y = 1/x."""
    functor = "ReciprocalGrad"
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda y, dy: np.where(dy == 0, np.zeros((), y.dtype), -dy * y * y))


@register
class Atan2(Binary): type_attrs = {"T": FLOAT}; fn = np.arctan2


class _ZeroSafe(Binary):
    """TF defines these as 0 wherever the guarding operand is 0, even against inf/nan."""
    type_attrs = {"T": FLOAT}
    guard = 0

    def compute(self, xs, attrs):
        return np.where(xs[self.guard] == 0, np.zeros((), xs[0].dtype), type(self).fn(*xs))


@register
class Xlogy(_ZeroSafe): fn = staticmethod(lambda x, y: x * np.log(y))
@register
class Xlog1py(_ZeroSafe): fn = staticmethod(lambda x, y: x * np.log1p(y))
@register
class Xdivy(_ZeroSafe): fn = staticmethod(lambda x, y: x / y)
@register
class MulNoNan(_ZeroSafe): guard = 1; fn = np.multiply




# Integer divisors: zero is TF's InternalError for these two, INT_MIN / -1 wraps (x86 traps).
@register
class TruncateDiv(Binary):
    type_attrs = {"T": NUMBER}
    int_check = "nonzero_rhs_truncate"

    @staticmethod
    def fn(x, y):
        if not np.issubdtype(x.dtype, np.integer):
            return np.trunc(x / y)
        ys = safe_divisor(x, y, internal=True)
        return np.where(y == -1, np.negative(x), trunc_div(x, ys))


@register
class TruncateMod(Binary):
    type_attrs = {"T": NUMBER}
    int_check = "nonzero_rhs_truncate"

    @staticmethod
    def fn(x, y):
        if not np.issubdtype(x.dtype, np.integer):
            return np.fmod(x, y)
        ys = safe_divisor(x, y, internal=True)
        return np.where(y == -1, np.zeros((), x.dtype), np.fmod(x, ys))


@register
class ApproximateEqual(Binary):
    elementwise_kernel = False   # takes its tolerance attr: registered by hand (elementwise.cc)
    bool_output = True
    type_attrs = {"T": FLOAT}

    def compute(self, xs, attrs):
        return np.abs(xs[0] - xs[1]) < attrs.get("tolerance", 1e-5)
