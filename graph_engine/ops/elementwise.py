"""Elementwise ops: unary math, binary arithmetic and comparisons (numpy broadcasting), logic,
selection, AddN, Cast, Bitcast. Integer semantics follow TF: Div truncates, FloorDiv/FloorMod
floor."""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import (ALL, COMPLEX, FLOAT, INT, NUMBER, Op, broadcast,
                                   check_same_shapes, register)


class Unary(Op):
    elementwise_kernel = True
    arity = 1
    inplace = True           # the shared elementwise kernels are alias-safe (elementwise.h)
    type_attrs = {"T": FLOAT}
    fn = None

    def shapes(self, shapes, attrs):
        return [shapes[0]]

    def compute(self, xs, attrs):
        return type(self).fn(xs[0])


class Binary(Op):
    elementwise_kernel = True
    arity = 2
    inplace = True           # the shared elementwise kernels are alias-safe (elementwise.h)
    type_attrs = {"T": NUMBER}
    fn = None

    def shapes(self, shapes, attrs):
        return [broadcast(shapes[0], shapes[1])]

    def compute(self, xs, attrs):
        return type(self).fn(xs[0], xs[1])


class Gradient(Binary):
    """An activation gradient: TF requires both inputs to have one shape (no broadcasting)."""
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        check_same_shapes(self.name, shapes)
        return [shapes[0]]


class Compare(Binary):
    bool_output = True
    type_attrs = {"T": NUMBER}


def _is_int(x):
    return np.issubdtype(x.dtype, np.integer)


def safe_divisor(x, y, internal=False):
    """Integer divisor y with 0 and -1 replaced by 1 (callers give x / -1 its wrapped value:
    INT_MIN / -1 traps on x86). A zero divisor is TF's error: InvalidArgumentError "Integer
    division by zero" (a ValueError here), InternalError for TruncateDiv/TruncateMod."""
    if np.any(y == 0):
        if internal:
            from graph_engine.ops.errors import CompileError
            raise CompileError("Unexpected error in binary operator (only integer div and mod "
                               "should have errors): integer division by zero")
        raise ValueError("Integer division by zero")
    return np.where((y == 0) | (y == -1), np.ones((), y.dtype), y)


def trunc_div(x, y):
    """C (truncating) integer division; y from safe_divisor (never 0 or -1)."""
    q = x // y
    return q + ((x % y != 0) & ((x < 0) != (y < 0))).astype(q.dtype)


@register
class Neg(Unary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = True
    type_attrs = {"T": NUMBER + COMPLEX}          # complex64: FFT gradients (ops/fft.py)
    fn = np.negative

@register
class Abs(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = True
    type_attrs = {"T": NUMBER}
    fn = np.abs

@register
class Sign(Unary):
    fusible = True
    type_attrs = {"T": NUMBER}
    fn = np.sign

@register
class Square(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = True
    type_attrs = {"T": NUMBER}
    fn = np.square

@register
class Exp(Unary):
    mixlist = "black"
    fusible = layout_agnostic = True
    type_attrs = {"T": FLOAT + COMPLEX}             # complex64: RFFT2D's gradient
    fn = np.exp

@register
class Log(Unary):
    mixlist = "black"
    fusible = True
    fn = np.log

@register
class Log1p(Unary):
    mixlist = "black"
    fusible = True
    fn = np.log1p

@register
class Sqrt(Unary):
    mixlist = "black"
    fusible = layout_agnostic = True
    fn = np.sqrt

@register
class Rsqrt(Unary):
    mixlist = "black"
    fusible = layout_agnostic = True
    fn = staticmethod(lambda x: 1 / np.sqrt(x))

@register
class Reciprocal(Unary):
    mixlist = "black"
    fusible = layout_agnostic = True
    type_attrs = {"T": FLOAT + COMPLEX}
    fn = staticmethod(lambda x: 1 / x)

@register
class Floor(Unary):
    fusible = True
    fn = np.floor

@register
class Ceil(Unary):
    fusible = True
    fn = np.ceil

@register
class Round(Unary):  # half to even, like TF
    fusible = True
    type_attrs = {"T": NUMBER}
    fn = np.round

@register
class Sin(Unary): fn = np.sin
@register
class Cos(Unary): fn = np.cos
@register
class IsNan(Unary): bool_output = True; fn = np.isnan
@register
class IsInf(Unary): bool_output = True; fn = np.isinf
@register
class IsFinite(Unary): bool_output = True; fn = np.isfinite


@register
class LogicalNot(Unary):
    fusible = True
    type_attrs = {}
    fn = np.logical_not


@register
class AddV2(Binary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = commutative_add = True
    type_attrs = {"T": NUMBER + COMPLEX}
    functor = "Add"
    fn = np.add

@register
class Add(Binary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = commutative_add = True
    fn = np.add

@register
class Sub(Binary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = True
    type_attrs = {"T": NUMBER + COMPLEX}
    fn = np.subtract

@register
class Mul(Binary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = True
    type_attrs = {"T": NUMBER + COMPLEX}
    fn = np.multiply
# As TF on CPU (and the kernels): NaN in either operand gives NaN; of two equal values (-0, +0)
# the second.
@register
class Maximum(Binary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = True
    fn = np.maximum

@register
class Minimum(Binary):
    mixlist = "gray"
    fusible = integer_math = layout_agnostic = True
    fn = np.minimum

@register
class SquaredDifference(Binary):
    mixlist = "black"
    fusible = layout_agnostic = True
    fn = staticmethod(lambda x, y: np.square(x - y))

@register
class RealDiv(Binary):
    mixlist = "black"
    fusible = layout_agnostic = True
    type_attrs = {"T": FLOAT + COMPLEX}
    fn = np.true_divide


@register
class Pow(Binary):
    mixlist = "black"
    fusible = True
    int_check = "nonnegative_rhs"
    fn = staticmethod(lambda x, y: np.power(x, y))


@register
class Div(Binary):
    mixlist = "black"
    fusible = True
    int_check = "nonzero_rhs"

    @staticmethod
    def fn(x, y):
        if _is_int(x):     # C semantics: truncate toward zero; INT_MIN / -1 wraps to INT_MIN
            ys = safe_divisor(x, y)
            return np.where(y == -1, np.negative(x), trunc_div(x, ys))
        return x / y


@register
class DivNoNan(Binary):
    fusible = True
    type_attrs = {"T": FLOAT + COMPLEX}

    @staticmethod
    def fn(x, y):
        return np.where(y == 0, np.zeros((), x.dtype), x / np.where(y == 0, 1, y))


@register
class FloorDiv(Binary):
    int_check = "nonzero_rhs"

    @staticmethod
    def fn(x, y):
        if _is_int(x):
            ys = safe_divisor(x, y)
            return np.where(y == -1, np.negative(x), np.floor_divide(x, ys))
        return np.floor(x / y)


@register
class FloorMod(Binary):
    int_check = "nonzero_rhs"

    @staticmethod
    def fn(x, y):
        if _is_int(x):
            ys = safe_divisor(x, y)
            return np.where(y == -1, np.zeros((), x.dtype), np.mod(x, ys))
        return np.mod(x, y)


@register
class Equal(Compare):
    fusible = integer_math = True
    type_attrs = {"T": ALL}
    fn = np.equal

@register
class NotEqual(Compare):
    fusible = integer_math = True
    type_attrs = {"T": ALL}
    fn = np.not_equal

@register
class Greater(Compare):
    fusible = integer_math = True
    fn = np.greater

@register
class GreaterEqual(Compare):
    fusible = integer_math = True
    fn = np.greater_equal

@register
class Less(Compare):
    fusible = integer_math = True
    fn = np.less

@register
class LessEqual(Compare):
    fusible = integer_math = True
    fn = np.less_equal

@register
class LogicalAnd(Binary):
    fusible = True
    type_attrs = {}
    fn = np.logical_and

@register
class LogicalOr(Binary):
    fusible = True
    type_attrs = {}
    fn = np.logical_or

@register
class BitwiseAnd(Binary): type_attrs = {"T": INT}; fn = np.bitwise_and
@register
class BitwiseOr(Binary): type_attrs = {"T": INT}; fn = np.bitwise_or
@register
class BitwiseXor(Binary): type_attrs = {"T": INT}; fn = np.bitwise_xor


@register
class SelectV2(Op):
    """where(condition, t, e) with numpy broadcasting of all three."""
    mixlist = "gray"
    fusible = True
    functor = "Select"
    arity = 3
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        return [broadcast(*shapes)]

    def compute(self, xs, attrs):
        return np.where(*xs)


@register
class Select(Op):
    """Select v1: condition has the shape of t, is a vector over t's first dimension, or is a
    scalar picking all of t or all of e (pfor's, in GradientTape.jacobian)."""
    mixlist = "gray"
    fusible = True
    arity = 3
    type_attrs = {"T": ALL}

    def shapes(self, shapes, attrs):
        c, t, e = shapes
        if t != e:
            raise ValueError(f"Select: t {list(t)} and e {list(e)} must have the same shape")
        if c != t and c != () and not (len(c) == 1 and len(t) >= 1 and c[0] == t[0]):
            raise ValueError(f"Select: condition {list(c)} must be a scalar or have shape "
                             f"{list(t)}" + (f" or [{t[0]}]" if t else ""))
        return [t]

    def compute(self, xs, attrs):
        c, t, e = xs
        if c.shape != t.shape and c.ndim == 1:
            c = c.reshape(c.shape + (1,) * (t.ndim - 1))
        return np.where(c, t, e)


@register
class AddN(Op):
    mixlist = "gray"
    fusible = layout_agnostic = True
    arity = -1
    type_attrs = {"T": NUMBER + COMPLEX}             # complex64: gradients summed in FFT graphs

    def shapes(self, shapes, attrs):
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"AddN: inputs must have equal shapes, got {[list(s) for s in shapes]}")
        return [shapes[0]]

    def compute(self, xs, attrs):
        total = xs[0].copy()
        for x in xs[1:]:
            total += x
        return total


def float_to_int(x, dst):
    """TF's CPU Cast from floats to integers on x86-64 (measured, TF 2.21): truncation toward
    zero; NaN, +-inf and out-of-range values give the "integer indefinite" value of the
    conversion instruction, INT64_MIN for 64-bit results and INT32_MIN for narrower ones, which
    go through int32 and keep its low bits (float32 300.0 -> int8 44, NaN -> int8 0); uint64
    takes [2^63, 2^64) exactly and anything else as int64 would (-1.5 -> 2^64 - 1)."""
    x = np.asarray(x, np.float64)          # float32/float16/bfloat16 convert exactly
    dst = np.dtype(dst)
    if dst.itemsize == 8:
        ok = (x >= -2.0 ** 63) & (x < 2.0 ** 63)
        bad = np.iinfo(np.int64).min
    else:
        ok = (x > -2.0 ** 31 - 1) & (x < 2.0 ** 31)
        bad = np.iinfo(np.int32).min
    r = np.trunc(np.where(ok, x, 0.0)).astype(np.int64)
    r = np.where(ok, r, np.int64(bad))
    if dst == np.uint64:                   # [2^63, 2^64) is in range only here
        high = (x >= 2.0 ** 63) & (x < 2.0 ** 64)
        return np.where(high, np.where(high, x, 0.0).astype(np.uint64), r.astype(np.uint64))
    return r.astype(dst)                   # narrower integers keep the low bits


@register
class Cast(Op):
    fusible = integer_math = layout_agnostic = True
    arity = 1
    # uint8/int8/int16: images and quantized data on their way to float; uint64: tf.random.
    # Generator's draw counts and state (eager draws cast and bitcast them)
    _STORAGE = (dt.DT_UINT8, dt.DT_INT8, dt.DT_INT16, dt.DT_UINT64)
    type_attrs = {"SrcT": ALL + COMPLEX + _STORAGE, "DstT": ALL + COMPLEX + _STORAGE}

    def shapes(self, shapes, attrs):
        return [shapes[0]]

    def compute(self, xs, attrs):
        x, dst = xs[0], dt.numpy_dtype(attrs["DstT"])
        if dst == np.bool_:
            return x != 0
        if np.iscomplexobj(x) and dst.kind != "c":
            x = x.real                       # complex to real keeps the real part, as TF
        if np.issubdtype(dst, np.integer) and np.issubdtype(x.dtype, np.floating):
            return float_to_int(x, dst)
        return x.astype(dst)


@register
class Bitcast(Op):
    """Reinterprets storage bytes; a size change adds or removes the innermost dimension."""
    type_attrs = {"T": NUMBER + (dt.DT_UINT64,), "type": NUMBER + (dt.DT_UINT64,)}
    widen = False

    def shapes(self, shapes, attrs):
        src, dst = dt.itemsize(attrs["T"]), dt.itemsize(attrs["type"])
        s = tuple(shapes[0])
        if src == dst:
            return [s]
        if src > dst:
            return [s + (src // dst,)]
        if not s or s[-1] != dst // src:
            raise ValueError(f"Bitcast {dt.name(attrs['T'])} -> {dt.name(attrs['type'])} needs an "
                             f"innermost dimension of {dst // src}, got shape {list(s)}")
        return [s[:-1]]

    def compute(self, xs, attrs):
        out_shape = self.shapes([xs[0].shape], attrs)[0]
        return np.ascontiguousarray(xs[0]).view(dt.numpy_dtype(attrs["type"])).reshape(out_shape)
