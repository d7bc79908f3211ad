"""Special functions (tf.math.special, gamma family, Bessel ...), elementwise, and the small
elementwise ops around them (shifts, NextAfter, ClipByValue, CheckNumerics, EnsureShape).

Kernels: the functors of runtime/kernels/elementwise_functors.h, over Eigen's special functions
(what TF's CPU kernels evaluate) and, for Dawson's integral, the Fresnel integrals and Spence's
function, our own double-precision evaluations, compiled in runtime/kernels/special.cc.
special.cc also registers by hand the kernels op_traits.inc cannot describe: the ops TF defines
for float32/float64 only, the shifts (clamped to the stored width) and the checking identities.
The numpy references are scipy.special's, in float64."""
import itertools

import numpy as np
import scipy.special as sp

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import ALL, FLOAT, INT, NUMBER, Op, broadcast, register
from graph_engine.ops.elementwise import Binary, Unary

F32 = (dt.DT_FLOAT,)          # ops whose TF CPU kernel is float32/float64 only


def _f64(fn):
    """`fn` applied in float64, the result in the (first) input's dtype."""
    return staticmethod(lambda *xs: fn(*(x.astype(np.float64) for x in xs)).astype(xs[0].dtype))


class _Special(Unary):
    """A unary special function of float32/float16/bfloat16 (Eigen's float32 math for all)."""
    fusible = layout_agnostic = True


@register
class Lgamma(_Special): fn = _f64(sp.gammaln)       # log|Gamma(x)|, as TF
@register
class Digamma(_Special): fn = _f64(sp.psi)
@register
class Erfinv(_Special): fn = _f64(sp.erfinv)
@register
class Ndtri(_Special): fn = _f64(sp.ndtri)
@register
class Dawsn(_Special): fn = _f64(sp.dawsn)
@register
class FresnelCos(_Special): fn = _f64(lambda x: sp.fresnel(x)[1])
@register
class FresnelSin(_Special): fn = _f64(lambda x: sp.fresnel(x)[0])
@register
class Spence(_Special): fn = _f64(sp.spence)        # NaN for x < 0, as TF
@register
class BesselI0(_Special): fn = _f64(sp.i0)
@register
class BesselI0e(_Special): fn = _f64(sp.i0e)
@register
class BesselI1(_Special): fn = _f64(sp.i1)
@register
class BesselI1e(_Special): fn = _f64(sp.i1e)
@register
class BesselJ0(_Special): fn = _f64(sp.j0)
@register
class BesselJ1(_Special): fn = _f64(sp.j1)
@register
class BesselY0(_Special): fn = _f64(sp.y0)
@register
class BesselY1(_Special): fn = _f64(sp.y1)
@register
class BesselK0(_Special): fn = _f64(sp.k0)
@register
class BesselK0e(_Special): fn = _f64(sp.k0e)
@register
class BesselK1(_Special): fn = _f64(sp.k1)
@register
class BesselK1e(_Special): fn = _f64(sp.k1e)


class _FloatOnly(Binary):
    """TF's CPU kernel is float32/float64 only (and its op for all but Igamma, Igammac):
    op_traits.inc has no such type set, so special.cc registers the kernel by hand."""
    type_attrs = {"T": F32}
    elementwise_kernel = False


@register
class Igamma(_FloatOnly):
    """The regularized lower incomplete gamma function P(a, x). Float32 only, as TF's CPU kernel
    (and its gradient's IgammaGradA)."""
    fn = _f64(sp.gammainc)


@register
class Igammac(_FloatOnly): fn = _f64(sp.gammaincc)


def _igamma_grad_a(a, x):
    """dP(a, x)/da by a central difference in float64 (scipy has no closed form)."""
    h = 1e-6 * np.maximum(1.0, np.abs(a))
    return (sp.gammainc(a + h, x) - sp.gammainc(a - h, x)) / (2 * h)


@register
class IgammaGradA(_FloatOnly): fn = _f64(_igamma_grad_a)


@register
class RandomGammaGrad(_FloatOnly):
    """d sample / d alpha of a Gamma(alpha) sample at fixed CDF: -(dP/da) / (dP/dx)."""
    fn = _f64(lambda a, x: -_igamma_grad_a(a, x) /
              np.exp((a - 1) * np.log(x) - x - sp.gammaln(a)))


@register
class Polygamma(_FloatOnly):
    """NaN for a non-integer or negative order, as Eigen."""
    fn = _f64(lambda n, x: np.where((n == np.floor(n)) & (n >= 0),
                                    sp.polygamma(np.where(n >= 0, np.floor(n), 0), x), np.nan))


@register
class Zeta(_FloatOnly): fn = _f64(sp.zeta)        # Hurwitz zeta(x, q)


@register
class NextAfter(_FloatOnly): fn = staticmethod(np.nextafter)   # in the inputs' own dtype


class _Shift(Binary):
    """TF clamps the shift to [0, bits - 1] of the stored type, which the int64 elementwise
    kernels do not know: special.cc registers the kernel by hand, by dtype."""
    type_attrs = {"T": INT}
    elementwise_kernel = False

    def compute(self, xs, attrs):
        x, y = xs
        y = np.clip(y, 0, x.dtype.itemsize * 8 - 1).astype(x.dtype)
        return type(self).fn(x, y)


@register
class LeftShift(_Shift):       # unsigned, so bits shifted out of the sign vanish without UB
    fn = staticmethod(lambda x, y: np.left_shift(x.view(f"u{x.dtype.itemsize}"),
                                                 y.astype(f"u{x.dtype.itemsize}")).view(x.dtype))


@register
class RightShift(_Shift): fn = staticmethod(np.right_shift)   # arithmetic


def _scalar_or(shape, want):
    return len(shape) == 0 or tuple(shape) == tuple(want)


def _dims(shape):
    """A shape as TF's messages write it: [2,3]."""
    return f"[{','.join(map(str, shape))}]"


@register
class Betainc(Op):
    """The regularized incomplete beta function I_x(a, b). As TF, a, b and x are scalars or of one
    shape (scalars broadcast). Registered by hand (special.cc: float32 only)."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        for (i, p), (j, q) in itertools.combinations(zip("abx", shapes), 2):
            if len(p) and len(q) and tuple(p) != tuple(q):
                raise ValueError(f"Shapes of {i} and {j} are inconsistent: {_dims(p)} vs. {_dims(q)}")
        return [tuple(next((s for s in shapes if len(s)), ()))]

    def compute(self, xs, attrs):
        a, b, x = (np.asarray(v, np.float64) for v in xs)
        return sp.betainc(a, b, x).astype(xs[0].dtype)


@register
class ClipByValue(Op):
    """min(t, hi) then max(.., lo), each as std::min/max (a NaN t stays NaN, a NaN bound is
    ignored); as TF, each bound is a scalar or of t's shape."""
    type_attrs = {"T": NUMBER}
    elementwise_kernel = True
    arity = 3
    inplace = True           # the shared elementwise kernels are alias-safe (elementwise.h)

    def shapes(self, shapes, attrs):
        t, lo, hi = (list(s) for s in shapes)
        if not (_scalar_or(lo, t) and _scalar_or(hi, t)):
            raise ValueError(f"clip_value_min and clip_value_max must be either of the same shape "
                             f"as input, or a scalar. input shape: {_dims(t)}clip_value_min shape: "
                             f"{_dims(lo)}clip_value_max shape: {_dims(hi)}")
        return [broadcast(*shapes)]

    def compute(self, xs, attrs):
        t, lo, hi = xs
        m = np.where(hi < t, hi, t)
        return np.where(m < lo, lo, m).astype(t.dtype)


def _non_finite(x, v2):
    """TF's words for the NaN/Inf kinds in x ("" when all finite)."""
    x = np.asarray(x, np.float32)
    if not v2:
        inf, nan = bool(np.isinf(x).any()), bool(np.isnan(x).any())
        return "Inf and NaN" if inf and nan else "Inf" if inf else "NaN" if nan else ""
    parts = [w for w, f in (("-Inf", x == -np.inf), ("+Inf", x == np.inf), ("NaN", np.isnan(x)))
             if f.any()]
    return parts[0] if len(parts) == 1 else " and ".join(parts) if len(parts) == 2 else \
        ", ".join(parts[:2]) + ", and " + parts[2] if parts else ""


@register
class CheckNumerics(Op):
    """The input unchanged, or InvalidArgumentError "<message> : Tensor had NaN values" (Inf,
    Inf and NaN) at run time: never folded, so the check happens where TF's would."""
    type_attrs = {"T": FLOAT}
    foldable = False
    checks_values = True
    v2 = False

    def shapes(self, shapes, attrs):
        return [shapes[0]]

    def compute(self, xs, attrs):
        found = _non_finite(xs[0], self.v2)
        if found:
            raise ValueError(f"{attrs.get('message', '')} : Tensor had {found} values")
        return xs[0].copy()


@register
class CheckNumericsV2(CheckNumerics):
    """As CheckNumerics, telling -Inf from +Inf."""
    v2 = True


@register
class EnsureShape(Op):
    """The input unchanged; its shape (static per compile) must match `shape` (-1: any size)."""
    type_attrs = {"T": ALL}
    trivial = True

    def shapes(self, shapes, attrs):
        got, want = list(shapes[0]), attrs["shape"]
        if want is not None and (len(want) != len(got) or
                                 any(w not in (-1, g) for w, g in zip(want, got))):
            raise ValueError(f"Shape of tensor input {_dims(got)} is not compatible "
                             f"with expected shape [{','.join('?' if w < 0 else str(w) for w in want)}].")
        return [shapes[0]]

    def compute(self, xs, attrs):
        return xs[0].copy()
