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
#ifndef NPU_KERNELS_ELEMENTWISE_FUNCTORS_H_
#define NPU_KERNELS_ELEMENTWISE_FUNCTORS_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/vector_math.h"

namespace npu {
namespace kernels {
namespace fn {

// ---- shared rules ------------------------------------------------------------------------

template <class T> constexpr bool kIsInt = std::is_integral_v<T>;
// Integer ops wrap on overflow like TF's (two's complement), computed unsigned to stay defined.
template <class T> T WrapAdd(T a, T b) { return T(uint64_t(a) + uint64_t(b)); }
template <class T> T WrapSub(T a, T b) { return T(uint64_t(a) - uint64_t(b)); }
template <class T> T WrapMul(T a, T b) { return T(uint64_t(a) * uint64_t(b)); }

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
NPU_BINARY(RealDiv, 2, a, b, a / b);
NPU_BINARY(DivNoNan, 2, a, b, b == T(0) ? T(0) : a / b);
// As TF on CPU (its vectorized path): NaN in either operand gives NaN, and of two equal values
// (-0 and +0) the second.
NPU_BINARY(Maximum, 1, a, b, (a > b || a != a) ? a : b);
NPU_BINARY(Minimum, 1, a, b, (a < b || a != a) ? a : b);
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
NPU_UNARY(Reciprocal, 2, a, T(1) / a);
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
NPU_BINARY(LogicalAnd, 1, a, b, T(a && b));
NPU_BINARY(LogicalOr, 1, a, b, T(a || b));
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

NPU_VECTOR_UNARY(Exp, 10, VecFn::kExp);
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

// ---- activations -------------------------------------------------------------------------

// As TF (max(x, 0) propagating NaN, its vectorized path): NaN stays NaN, -0 becomes +0.
NPU_UNARY(Relu, 1, a, (a > T(0) || a != a) ? a : T(0));
NPU_UNARY(Relu6, 1, a, a != a ? a : (a > T(0) ? (a < T(6) ? a : T(6)) : T(0)));
NPU_UNARY(Softsign, 3, a, a / (T(1) + std::abs(a)));
NPU_VECTOR_UNARY(Sigmoid, 12, VecFn::kSigmoid);
NPU_VECTOR_UNARY(Tanh, 12, VecFn::kTanh);

struct LeakyRelu {
  static constexpr int kCost = 1;
  explicit LeakyRelu(double alpha) : alpha(alpha) {}
  template <class T> T operator()(T a) const { return a > T(0) ? a : T(alpha) * a; }
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
NPU_BINARY(Relu6Grad, 1, g, f, g * T(f > T(0) && f < T(6)));
NPU_BINARY(SigmoidGrad, 2, y, dy, dy * y * (T(1) - y));
NPU_BINARY(TanhGrad, 2, y, dy, dy * (T(1) - y * y));
// TF tests outputs < 0 (so a NaN or zero output takes the positive branch).
NPU_BINARY(EluGrad, 2, g, y, y < T(0) ? g * (y + T(1)) : g);
NPU_BINARY(SeluGrad, 2, g, y, y < T(0) ? g * (y + T(kSeluScale * kSeluAlpha)) : g * T(kSeluScale));
NPU_BINARY(SoftplusGrad, 12, g, f, g / (T(1) + std::exp(-f)));
NPU_BINARY(SoftsignGrad, 3, g, f, g / ((T(1) + std::abs(f)) * (T(1) + std::abs(f))));
// TF: a zero upstream gradient gives 0 even where y is 0, inf or NaN (these three; InvGrad is
// ReciprocalGrad).
NPU_BINARY(ReciprocalGrad, 2, y, dy, dy == T(0) ? T(0) : -dy * y * y);
NPU_BINARY(RsqrtGrad, 3, y, dy, dy == T(0) ? T(0) : T(-0.5) * (y * y * y) * dy);
NPU_BINARY(SqrtGrad, 2, y, dy, dy == T(0) ? T(0) : T(0.5) * dy / y);

struct LeakyReluGrad {
  static constexpr int kCost = 1;
  explicit LeakyReluGrad(double alpha) : alpha(alpha) {}
  template <class T> T operator()(T g, T f) const { return f > T(0) ? g : T(alpha) * g; }
  double alpha;
};

#undef NPU_UNARY
#undef NPU_BINARY
#undef NPU_VECTOR_UNARY

}  // namespace fn
}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_ELEMENTWISE_FUNCTORS_H_
