// The one place elementwise math lives: one functor per formula, used by
//   * the plain elementwise kernels (elementwise.cc, registered from op_traits.inc), through
//     EvalElementwise (elementwise.h), in float, double or int64;
//   * NpuElementwise (fused_elementwise.cc), on float32 tiles, and in int64 for the functors
//     that graph_engine/ops/op_traits.inc marks integer;
//   * the contraction epilogue (epilogue.h) and NpuGelu (gelu.cc), in float32.
// graph_engine/ops/op_traits.inc names these functors (NPU_FUSIBLE, NPU_EPILOGUE_ACTIVATION).
//
// A functor has `static constexpr int kCost` (work per element, for ParallelFor) and
//   * a scalar `template <class T> T operator()(T a[, T b[, T c]]) const`, and/or
//   * `template <class T> static void Block(const T* x, T* y, int64_t n)` for the unary ones
//     that use SIMD transcendental math (vector_math.h; T float or double, any n, x == y
//     allowed). Elementwise kernels use Block where there is one; the epilogue uses the scalar
//     form where there is one (Elu's epilogue keeps std::expm1).
// A functor with a parameter (LeakyRelu's alpha) is constructed from it (a double).
// Conditions combine with & and |, never && and ||: a short-circuit is a branch, and a branch
// keeps the element loops from vectorising (Relu6Grad ran at a third of memory speed).
#ifndef NPU_KERNELS_ELEMENTWISE_FUNCTORS_H_
#define NPU_KERNELS_ELEMENTWISE_FUNCTORS_H_

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/vector_math.h"

namespace npu {
namespace kernels {

// VecMath for the special functions (special.cc): y[i] = fn(x[i]) for T = float or double.
enum class SpecialFn {
  kLgamma, kDigamma, kErfinv, kNdtri, kDawsn, kFresnelCos, kFresnelSin, kSpence,
  kBesselI0, kBesselI0e, kBesselI1, kBesselI1e, kBesselJ0, kBesselJ1, kBesselY0, kBesselY1,
  kBesselK0, kBesselK0e, kBesselK1, kBesselK1e,
};
template <class T>
void VecMath(SpecialFn fn, const T* x, T* y, int64_t n);

namespace fn {

// ---- shared rules ------------------------------------------------------------------------

template <class T> constexpr bool kIsInt = std::is_integral_v<T>;
// Integer ops wrap on overflow like TF's (two's complement), computed unsigned to stay defined
// (other types, std::complex included, never reach the integer branch).
template <class T> T WrapAdd(T a, T b) { if constexpr (kIsInt<T>) return T(uint64_t(a) + uint64_t(b)); else return a + b; }
template <class T> T WrapSub(T a, T b) { if constexpr (kIsInt<T>) return T(uint64_t(a) - uint64_t(b)); else return a - b; }
template <class T> T WrapMul(T a, T b) { if constexpr (kIsInt<T>) return T(uint64_t(a) * uint64_t(b)); else return a * b; }

template <class T> struct IsComplex : std::false_type {};
template <class R> struct IsComplex<std::complex<R>> : std::true_type {};

// a / b; for complex numbers as TF's CPU (Eigen's vectorized pdiv_complex) divides: the divisor
// scaled by max(|re|, |im|) first (no overflow), so x / 0 is nan + nan*i, not C++'s inf + nan*i.
template <class T> T Divide(T a, T b) {
  if constexpr (IsComplex<T>::value) {
    using R = typename T::value_type;
    const R m = std::max(std::abs(b.real()), std::abs(b.imag()));
    const R c = b.real() / m, d = b.imag() / m, den = c * c + d * d;
    return T((a.real() * c + a.imag() * d) / den / m, (a.imag() * c - a.real() * d) / den / m);
  } else {
    return a / b;
  }
}

// a * b as TF's CPU multiplies in its vector loops: for complex numbers Eigen's pmul, the
// schoolbook formula, without the C99 recovery of infinities from nan + nan*i that std::complex's
// operator* (TF's scalar remainder loop) adds.
template <class T> T VecMul(T a, T b) {
  if constexpr (IsComplex<T>::value)
    return T(a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real());
  else
    return a * b;
}

template <class T> T Conjugate(T a) {
  if constexpr (IsComplex<T>::value) return std::conj(a);
  else return a;
}

constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;

// Scratch elements a Block keeps on the stack; longer arrays go through it in pieces (vector
// math results depend on the input element only, so the split changes nothing).
constexpr int64_t kBlockScratch = 256;

// Calls piece(x, y, m, scratch) for consecutive pieces of at most kBlockScratch elements, with a
// stack scratch array of that size (the transcendental Blocks below).
template <class T, class Piece>
void InScratchPieces(const T* x, T* y, int64_t n, Piece piece) {
  T scratch[kBlockScratch];
  for (int64_t s = 0; s < n; s += kBlockScratch)
    piece(x + s, y + s, n - s < kBlockScratch ? n - s : kBlockScratch, scratch);
}

// A functor constructed from the op's parameter when it takes one.
template <class F>
F Make(double param) {
  if constexpr (std::is_constructible_v<F, double>) return F(param);
  else return F();
}

template <class F, class T, class = void>
struct HasBlock : std::false_type {};
template <class F, class T>
struct HasBlock<F, T, std::void_t<decltype(F::Block(std::declval<const T*>(), std::declval<T*>(), int64_t{}))>>
    : std::true_type {};

template <class F, class T, class = void>
struct HasScalar : std::false_type {};
template <class F, class T>
struct HasScalar<F, T, std::void_t<decltype(std::declval<const F&>()(std::declval<T>()))>> : std::true_type {};

#define NPU_UNARY(Name, cost, a, expr)                               \
  struct Name {                                                      \
    static constexpr int kCost = cost;                               \
    template <class T> T operator()(T a) const { return expr; }      \
  }
#define NPU_BINARY(Name, cost, a, b, expr)                           \
  struct Name {                                                      \
    static constexpr int kCost = cost;                               \
    template <class T> T operator()(T a, T b) const { return expr; } \
  }
#define NPU_VECTOR_UNARY(Name, cost, vec_fn)                                                    \
  struct Name {                                                                                 \
    static constexpr int kCost = cost;                                                          \
    template <class T> static void Block(const T* x, T* y, int64_t n) { VecMath(vec_fn, x, y, n); } \
  }

// ---- arithmetic --------------------------------------------------------------------------

NPU_BINARY(Add, 1, a, b, kIsInt<T> ? WrapAdd(a, b) : a + b);
NPU_BINARY(Sub, 1, a, b, kIsInt<T> ? WrapSub(a, b) : a - b);
NPU_BINARY(Mul, 1, a, b, kIsInt<T> ? WrapMul(a, b) : a * b);
NPU_BINARY(RealDiv, 2, a, b, Divide(a, b));
NPU_BINARY(DivNoNan, 2, a, b, b == T(0) ? T(0) : Divide(a, b));
// As TF on CPU (its vectorized path): NaN in either operand gives NaN, and of two equal values
// (-0 and +0) the second.
NPU_BINARY(Maximum, 1, a, b, ((a > b) | (a != a)) ? a : b);
NPU_BINARY(Minimum, 1, a, b, ((a < b) | (a != a)) ? a : b);
NPU_BINARY(SquaredDifference, 2, a, b, kIsInt<T> ? WrapMul(WrapSub(a, b), WrapSub(a, b)) : (a - b) * (a - b));
// AddN adds its operands in order, pairwise with Add's rule.
NPU_BINARY(AddN, 1, a, b, Add()(a, b));

// Div: truncating for integers (the divisor is checked for zeros first), true division else.
struct Div {
  static constexpr int kCost = 2;
  template <class T> T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) return b == 0 ? 0 : (b == -1 ? WrapSub(T(0), a) : a / b);
    else return a / b;
  }
};

struct FloorDiv {
  static constexpr int kCost = 4;
  template <class T> T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      if (b == 0) return 0;
      if (b == -1) return WrapSub(T(0), a);
      const T q = a / b;
      return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    } else {
      return std::floor(a / b);
    }
  }
};

struct FloorMod {
  static constexpr int kCost = 4;
  template <class T> T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      if (b == 0 || b == -1) return 0;
      const T r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    } else {
      const T r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
  }
};

// C division and remainder: truncate toward zero (integer divisors are checked for zeros).
// INT_MIN / -1 overflows (x86 traps): like TF it wraps to INT_MIN, and INT_MIN % -1 is 0.
struct TruncateDiv {
  static constexpr int kCost = 2;
  template <class T> T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      if (b == 0) return 0;
      return b == -1 ? WrapSub(T(0), a) : a / b;
    } else {
      return std::trunc(a / b);
    }
  }
};
struct TruncateMod {
  static constexpr int kCost = 2;
  template <class T> T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) return (b == 0 || b == -1) ? T(0) : a % b;
    else return std::fmod(a, b);
  }
};

struct Pow {
  static constexpr int kCost = 20;
  template <class T> T operator()(T a, T b) const {
    if constexpr (kIsInt<T>) {
      T result = 1;   // exponent checked non-negative before evaluation
      for (; b > 0; b >>= 1, a = WrapMul(a, a))
        if (b & 1) result = WrapMul(result, a);
      return result;
    } else {
      return std::pow(a, b);
    }
  }
};

NPU_UNARY(Neg, 1, a, kIsInt<T> ? WrapSub(T(0), a) : -a);
NPU_UNARY(Abs, 1, a, kIsInt<T> ? (a < 0 ? WrapSub(T(0), a) : a) : std::abs(a));
NPU_UNARY(Square, 1, a, kIsInt<T> ? WrapMul(a, a) : a * a);
NPU_UNARY(Sign, 1, a, a != a ? a : T((a > T(0)) - (a < T(0))));
NPU_UNARY(Reciprocal, 2, a, Divide(T(1), a));
NPU_UNARY(Floor, 1, a, std::floor(a));
NPU_UNARY(Ceil, 1, a, std::ceil(a));
NPU_UNARY(Round, 1, a, kIsInt<T> ? a : T(std::nearbyint(a)));   // half to even, as TF
NPU_UNARY(Rint, 2, a, std::nearbyint(a));   // the default rounding mode: half to even, like TF
NPU_UNARY(Invert, 1, a, ~a);                // integers only
// The value unchanged: a cast's rounding is its result dtype's (the caller stores or narrows).
NPU_UNARY(Cast, 1, a, a);

// Zero-safe products: TF defines the result as 0 wherever x (or MulNoNan's y) is 0, even
// when the other factor is inf or nan.
NPU_BINARY(Xlogy, 12, x, y, x == T(0) ? T(0) : x * std::log(y));
NPU_BINARY(Xlog1py, 12, x, y, x == T(0) ? T(0) : x * std::log1p(y));
NPU_BINARY(Xdivy, 2, x, y, x == T(0) ? T(0) : x / y);
NPU_BINARY(MulNoNan, 1, x, y, y == T(0) ? T(0) : x * y);

// ---- comparison, logical, bitwise (0/1 in the compute type) ----------------------------------

NPU_BINARY(Equal, 1, a, b, T(a == b));
NPU_BINARY(NotEqual, 1, a, b, T(a != b));
NPU_BINARY(Greater, 1, a, b, T(a > b));
NPU_BINARY(GreaterEqual, 1, a, b, T(a >= b));
NPU_BINARY(Less, 1, a, b, T(a < b));
NPU_BINARY(LessEqual, 1, a, b, T(a <= b));
NPU_BINARY(LogicalAnd, 1, a, b, T((a != T(0)) & (b != T(0))));
NPU_BINARY(LogicalOr, 1, a, b, T((a != T(0)) | (b != T(0))));
NPU_UNARY(LogicalNot, 1, a, T(!a));
NPU_UNARY(IsFinite, 1, a, T(std::isfinite(a)));
NPU_UNARY(IsInf, 1, a, T(std::isinf(a)));
NPU_UNARY(IsNan, 1, a, T(std::isnan(a)));
NPU_BINARY(BitwiseAnd, 1, a, b, a & b);
NPU_BINARY(BitwiseOr, 1, a, b, a | b);
NPU_BINARY(BitwiseXor, 1, a, b, a ^ b);

struct ApproximateEqual {
  static constexpr int kCost = 2;
  explicit ApproximateEqual(double tolerance) : tolerance(tolerance) {}
  template <class T> T operator()(T a, T b) const { return T(std::abs(a - b) < T(tolerance)); }
  double tolerance;
};

// cond ? then : else, with a nonzero condition true.
struct Select {
  static constexpr int kCost = 1;
  template <class T> T operator()(T c, T t, T e) const { return c != T(0) ? t : e; }
};

// ---- transcendental ----------------------------------------------------------------------

// Exp also takes complex64 (RFFT2D's gradient): std::exp per element, as TF's CPU.
struct Exp {
  static constexpr int kCost = 10;
  template <class T, std::enable_if_t<!IsComplex<T>::value, int> = 0>
  static void Block(const T* x, T* y, int64_t n) { VecMath(VecFn::kExp, x, y, n); }
  template <class T, std::enable_if_t<IsComplex<T>::value, int> = 0>
  T operator()(T a) const { return std::exp(a); }
};
NPU_VECTOR_UNARY(Log, 10, VecFn::kLog);
NPU_VECTOR_UNARY(Log1p, 10, VecFn::kLog1p);
NPU_VECTOR_UNARY(Sqrt, 4, VecFn::kSqrt);
NPU_VECTOR_UNARY(Rsqrt, 5, VecFn::kRsqrt);
NPU_UNARY(Expm1, 10, a, std::expm1(a));
NPU_UNARY(Erf, 12, a, std::erf(a));
NPU_UNARY(Erfc, 12, a, std::erfc(a));
// The exponential integral Ei(a); TF defines it for a >= 0 only (NaN below).
NPU_UNARY(Expint, 40, a, a < T(0) ? std::numeric_limits<T>::quiet_NaN() : T(std::expint(a)));
NPU_UNARY(Cos, 10, a, std::cos(a));
NPU_UNARY(Sin, 10, a, std::sin(a));
NPU_UNARY(Tan, 12, a, std::tan(a));
NPU_UNARY(Atan, 12, a, std::atan(a));
NPU_UNARY(Asin, 12, a, std::asin(a));
NPU_UNARY(Acos, 12, a, std::acos(a));
NPU_UNARY(Sinh, 12, a, std::sinh(a));
NPU_UNARY(Cosh, 12, a, std::cosh(a));
NPU_UNARY(Asinh, 12, a, std::asinh(a));
NPU_UNARY(Acosh, 12, a, std::acosh(a));
NPU_UNARY(Atanh, 12, a, std::atanh(a));
NPU_BINARY(Atan2, 12, y, x, std::atan2(y, x));

// ---- special functions ------------------------------------------------------------------
// Eigen's (unsupported/Eigen/SpecialFunctions: the math TF's own CPU kernels call) and our own
// Dawsn, Fresnel and Spence (series, continued fractions; in double), compiled once in
// special.cc for T = float or double, so
// the files including this header do not pay for Eigen. The unary ones go over whole blocks
// (VecMath with a SpecialFn: Eigen's packet math, as TF's kernels); the others are scalar.
namespace special {
template <class T> T Igamma(T a, T x);
template <class T> T Igammac(T a, T x);
template <class T> T IgammaGradA(T a, T x);
template <class T> T RandomGammaGrad(T alpha, T sample);
template <class T> T Polygamma(T n, T x);
template <class T> T Zeta(T x, T q);
template <class T> T Betainc(T a, T b, T x);
}  // namespace special

NPU_VECTOR_UNARY(Lgamma, 40, SpecialFn::kLgamma);
NPU_VECTOR_UNARY(Digamma, 40, SpecialFn::kDigamma);
NPU_VECTOR_UNARY(Erfinv, 30, SpecialFn::kErfinv);
NPU_VECTOR_UNARY(Ndtri, 30, SpecialFn::kNdtri);
NPU_VECTOR_UNARY(Dawsn, 30, SpecialFn::kDawsn);
NPU_VECTOR_UNARY(FresnelCos, 40, SpecialFn::kFresnelCos);
NPU_VECTOR_UNARY(FresnelSin, 40, SpecialFn::kFresnelSin);
NPU_VECTOR_UNARY(Spence, 30, SpecialFn::kSpence);
NPU_VECTOR_UNARY(BesselI0, 30, SpecialFn::kBesselI0);
NPU_VECTOR_UNARY(BesselI0e, 30, SpecialFn::kBesselI0e);
NPU_VECTOR_UNARY(BesselI1, 30, SpecialFn::kBesselI1);
NPU_VECTOR_UNARY(BesselI1e, 30, SpecialFn::kBesselI1e);
NPU_VECTOR_UNARY(BesselJ0, 40, SpecialFn::kBesselJ0);
NPU_VECTOR_UNARY(BesselJ1, 40, SpecialFn::kBesselJ1);
NPU_VECTOR_UNARY(BesselY0, 40, SpecialFn::kBesselY0);
NPU_VECTOR_UNARY(BesselY1, 40, SpecialFn::kBesselY1);
NPU_VECTOR_UNARY(BesselK0, 40, SpecialFn::kBesselK0);
NPU_VECTOR_UNARY(BesselK0e, 40, SpecialFn::kBesselK0e);
NPU_VECTOR_UNARY(BesselK1, 40, SpecialFn::kBesselK1);
NPU_VECTOR_UNARY(BesselK1e, 40, SpecialFn::kBesselK1e);
NPU_BINARY(Igamma, 200, a, x, special::Igamma(a, x));
NPU_BINARY(Igammac, 200, a, x, special::Igammac(a, x));
NPU_BINARY(IgammaGradA, 300, a, x, special::IgammaGradA(a, x));
NPU_BINARY(RandomGammaGrad, 300, alpha, sample, special::RandomGammaGrad(alpha, sample));
NPU_BINARY(Polygamma, 200, n, x, special::Polygamma(n, x));
NPU_BINARY(Zeta, 200, x, q, special::Zeta(x, q));
NPU_BINARY(NextAfter, 2, a, b, std::nextafter(a, b));
struct Betainc {
  static constexpr int kCost = 300;
  template <class T> T operator()(T a, T b, T x) const { return special::Betainc(a, b, x); }
};

// t clamped to [lo, hi] as TF: min with hi first, then max with lo, each with std::min/max's
// rule (a NaN t stays NaN, a NaN bound is ignored).
struct ClipByValue {
  static constexpr int kCost = 2;
  template <class T> T operator()(T t, T lo, T hi) const { return std::max(std::min(t, hi), lo); }
};

// Shifts as TF: the shift clamped to [0, bits - 1] of the stored type (kMaxShift), computed in
// int64 (the result is narrowed on store); left shifts unsigned, right shifts arithmetic.
template <int kMaxShift>
struct LeftShift {
  static constexpr int kCost = 1;
  template <class T> T operator()(T x, T y) const {
    return T(uint64_t(x) << (y < 0 ? 0 : (y > kMaxShift ? kMaxShift : y)));
  }
};
template <int kMaxShift>
struct RightShift {
  static constexpr int kCost = 1;
  template <class T> T operator()(T x, T y) const { return x >> (y < 0 ? 0 : (y > kMaxShift ? kMaxShift : y)); }
};

// ---- activations -------------------------------------------------------------------------

// As TF (max(x, 0) propagating NaN, its vectorized path): NaN stays NaN, -0 becomes +0.
NPU_UNARY(Relu, 1, a, ((a > T(0)) | (a != a)) ? a : T(0));
NPU_UNARY(Relu6, 1, a, a != a ? a : (a > T(0) ? (a < T(6) ? a : T(6)) : T(0)));
NPU_UNARY(Softsign, 3, a, a / (T(1) + std::abs(a)));
NPU_VECTOR_UNARY(Sigmoid, 12, VecFn::kSigmoid);
NPU_VECTOR_UNARY(Tanh, 12, VecFn::kTanh);

struct LeakyRelu {
  static constexpr int kCost = 1;
  explicit LeakyRelu(double alpha) : alpha(alpha) {}
  template <class T> T operator()(T a) const {
    const T scaled = T(alpha) * a;   // both sides computed: a select the loops vectorize
    return a > T(0) ? a : scaled;    // (alpha * a in one arm only was a branch per element)
  }
  double alpha;
};

// Elu: a for a > 0, else e^a - 1; Selu scales both sides. The elementwise kernels use SIMD
// expm1 (Block); the contraction epilogue std::expm1 (the scalar form).
template <int kSelu>
struct EluBase {
  static constexpr int kCost = 12;
  template <class T> static void Block(const T* x, T* y, int64_t n) {
    const T pos = kSelu ? T(kSeluScale) : T(1), neg = kSelu ? T(kSeluScale * kSeluAlpha) : T(1);
    InScratchPieces(x, y, n, [&](const T* x, T* y, int64_t m, T* e) {
      VecMath(VecFn::kExpm1, x, e, m);
      for (int64_t i = 0; i < m; ++i) y[i] = x[i] > T(0) ? pos * x[i] : neg * e[i];
    });
  }
};
struct Elu : EluBase<0> {
  template <class T> T operator()(T a) const { return a > T(0) ? a : std::expm1(a); }
};
struct Selu : EluBase<1> {};

// log(1 + e^a) without overflow: max(a, 0) + log1p(e^-|a|).
struct Softplus {
  static constexpr int kCost = 20;
  template <class T> static void Block(const T* x, T* y, int64_t n) {
    InScratchPieces(x, y, n, [](const T* x, T* y, int64_t m, T* t) {
      for (int64_t i = 0; i < m; ++i) t[i] = -std::abs(x[i]);
      VecMath(VecFn::kExp, t, t, m);
      VecMath(VecFn::kLog1p, t, t, m);
      for (int64_t i = 0; i < m; ++i) y[i] = (x[i] > T(0) ? x[i] : T(0)) + t[i];
    });
  }
};

// Swish: a * sigmoid(a), with the SIMD sigmoid.
struct Swish {
  static constexpr int kCost = 13;
  template <class T> static void Block(const T* x, T* y, int64_t n) {
    InScratchPieces(x, y, n, [](const T* x, T* y, int64_t m, T* s) {
      VecMath(VecFn::kSigmoid, x, s, m);
      for (int64_t i = 0; i < m; ++i) y[i] = x[i] * s[i];
    });
  }
};

// Gelu: a * Phi(a) exactly (erf), or with the tanh approximation.
constexpr double kSqrtHalf = 0.70710678118654752;     // 1/sqrt(2)
constexpr double kSqrtTwoOverPi = 0.79788456080286536;
constexpr double kGeluCubic = 0.044715;
static_assert(float(kSqrtHalf) == 0.70710678118654752f && float(kSqrtTwoOverPi) == 0.79788456080286536f &&
              float(kGeluCubic) == 0.044715f, "float constants round as their float literals");
NPU_UNARY(GeluExact, 20, a, T(0.5) * a * (T(1) + std::erf(a * T(kSqrtHalf))));
NPU_UNARY(GeluTanh, 20, a, T(0.5) * a * (T(1) + std::tanh(T(kSqrtTwoOverPi) * (a + T(kGeluCubic) * a * a * a))));

// ---- gradients ---------------------------------------------------------------------------
// Gradients take (incoming gradient, forward value) in TF's input order, except the ones
// named after the forward output, which take (y, dy).

// As TF: the gradient times the mask, so a NaN or inf gradient gives NaN where the mask is 0.
NPU_BINARY(ReluGrad, 1, g, f, g * T(f > T(0)));
NPU_BINARY(Relu6Grad, 1, g, f, g * T((f > T(0)) & (f < T(6))));
NPU_BINARY(SigmoidGrad, 2, y, dy, dy * y * (T(1) - y));
NPU_BINARY(TanhGrad, 2, y, dy, dy * (T(1) - y * y));
// TF tests outputs < 0 (so a NaN or zero output takes the positive branch).
NPU_BINARY(EluGrad, 2, g, y, y < T(0) ? g * (y + T(1)) : g);
NPU_BINARY(SeluGrad, 2, g, y, y < T(0) ? g * (y + T(kSeluScale * kSeluAlpha)) : g * T(kSeluScale));
NPU_BINARY(SoftplusGrad, 12, g, f, g / (T(1) + std::exp(-f)));
NPU_BINARY(SoftsignGrad, 3, g, f, g / ((T(1) + std::abs(f)) * (T(1) + std::abs(f))));
// TF: a zero upstream gradient gives 0 even where y is 0, inf or NaN (these three; InvGrad is
// ReciprocalGrad). ReciprocalGrad as TF's vector loop orders it: -(conj(y) * conj(y)) * dy (y * y
// may overflow to inf where dy * y would not).
NPU_BINARY(ReciprocalGrad, 2, y, dy, dy == T(0) ? T(0) : VecMul(-VecMul(Conjugate(y), Conjugate(y)), dy));
NPU_BINARY(RsqrtGrad, 3, y, dy, dy == T(0) ? T(0) : T(-0.5) * (y * y * y) * dy);
NPU_BINARY(SqrtGrad, 2, y, dy, dy == T(0) ? T(0) : T(0.5) * dy / y);

struct LeakyReluGrad {
  static constexpr int kCost = 1;
  explicit LeakyReluGrad(double alpha) : alpha(alpha) {}
  template <class T> T operator()(T g, T f) const {
    const T scaled = T(alpha) * g;   // a select, as LeakyRelu's
    return f > T(0) ? g : scaled;
  }
  double alpha;
};

#undef NPU_UNARY
#undef NPU_BINARY
#undef NPU_VECTOR_UNARY

}  // namespace fn
}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_ELEMENTWISE_FUNCTORS_H_
