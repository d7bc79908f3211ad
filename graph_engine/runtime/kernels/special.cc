// The special functions of elementwise_functors.h (VecMath with a SpecialFn, fn::special), their
// hand-registered elementwise kernels (float32-only ops, shifts by the stored width), and
// CheckNumerics/EnsureShape.
//
// The math is Eigen's special functions (unsupported/Eigen/SpecialFunctions, what TF's
// cwise_op_*.cc kernels evaluate, through the same packet code for the unary ones), and for
// Dawson's integral, the Fresnel integrals and Spence's function, which Eigen lacks, our own
// double-precision evaluations (namespace integrals).
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/elementwise.h"

namespace npu {
namespace kernels {
namespace integrals {

// Dawson's integral, the Fresnel integrals and Spence's function, which Eigen lacks: written from
// their series, continued fractions and functional equations, evaluated in double precision and
// rounded once to the element type.

constexpr double kPi = 3.14159265358979323846;
constexpr double kPi2Over6 = kPi * kPi / 6;

// Dawson's integral F(x) = exp(-x^2) * integral_0^x exp(t^2) dt, odd in x.
// |x| < 1: its Maclaurin series x * sum_n (-2x^2)^n / (1*3*...*(2n+1)) (alternating, but the
// terms stay below e^{x^2} < 3, so no digits are lost). 1 <= |x| < 10: Rybicki's sum
// F(x) = lim_{h->0} pi^-1/2 * sum_{n odd} exp(-(x - n h)^2) / n; with h = 1/4 the sum's error is
// about exp(-(pi / 2h)^2) ~ 1e-17, and the Gaussian leaves 13 terms either side of x that count.
// |x| >= 10: the asymptotic series 1/(2x) * sum_n (2n-1)!! / (2x^2)^n, whose 10 terms are within
// 1e-12 relative there.
double Dawson(double x) {
  const double ax = std::fabs(x);
  if (std::isnan(x)) return x;
  if (ax < 1) {
    const double x2 = x * x;
    double term = x, sum = x;
    for (int n = 1; std::fabs(term) > 1e-18 * std::fabs(sum); ++n) {
      term *= -2 * x2 / (2 * n + 1);
      sum += term;
    }
    return sum;
  }
  if (ax >= 10) {
    const double u = 1 / (2 * x * x);         // 0 for x = ±inf: F(±inf) = 0
    double term = 1, sum = 1;
    for (int n = 1; n < 10; ++n) {
      term *= (2 * n - 1) * u;
      sum += term;
    }
    return sum / (2 * x);
  }
  // n = n0 + m over odd m, with n0 the even integer nearest x / h, so |x - n0 h| <= h.
  constexpr double h = 0.25;
  const double n0 = 2 * std::nearbyint(0.5 * ax / h);
  const double xp = ax - n0 * h;
  double sum = 0;
  for (int m = 1; m < 27; m += 2) {
    sum += std::exp(-(xp - m * h) * (xp - m * h)) / (n0 + m) +
           std::exp(-(xp + m * h) * (xp + m * h)) / (n0 - m);
  }
  return std::copysign(sum / std::sqrt(kPi), x);
}

// C(x) + i S(x), the Fresnel integrals of cos and sin(pi t^2 / 2) from 0 to x, both odd in x.
// |x| < 1.5: their power series, sum_k (i pi/2)^k x^(2k+1) / (k! (2k+1)), even k for C and odd k
// for S (the terms stay below e^{pi x^2 / 2} < 35). Beyond: C + iS = (1+i)/2 erf(z) with
// z = sqrt(pi)/2 (1-i) x, erfc(z) by its continued fraction, which for 2z^2 = -i pi x^2 reads
// C + iS = (1+i)/2 - x e^{i pi x^2 / 2} / (b0 - 1*2 / (b1 - 3*4 / (b2 - ...))), b_n = 4n+1 - i pi x^2,
// evaluated by the modified Lentz method. Past |x| = 2^30 the oscillation 1/(pi x) is below
// float32's resolution of 1/2 (and x^2 would not be exact for doubles).
std::complex<double> Fresnel(double x) {
  const double ax = std::fabs(x);
  if (std::isnan(x)) return {x, x};
  std::complex<double> r;
  if (ax < 1.5) {
    const double a = kPi / 2 * ax * ax;
    double c = 0, s = 0, t = ax;            // t = a^k x / k!
    for (int k = 0;; ++k) {
      const double term = (k & 2 ? -t : t) / (2 * k + 1);   // i^k: + + - - ...
      (k & 1 ? s : c) += term;
      if (std::fabs(term) <= 1e-17 * std::max(std::fabs(c), std::fabs(s)) || t == 0) break;
      t *= a / (k + 1);
    }
    r = {c, s};
  } else if (ax > 0x1p30) {
    r = {0.5, 0.5};
  } else {
    constexpr double kTiny = 1e-300;
    const std::complex<double> b(1, -kPi * ax * ax);
    std::complex<double> f = b, c = b, d = 0;
    for (int n = 1; n < 1000; ++n) {
      const double an = -(2.0 * n - 1) * (2.0 * n);
      const std::complex<double> bn = b + 4.0 * n;
      d = bn + an * d;
      d = 1.0 / (d == 0.0 ? kTiny : d);
      c = bn + an / c;
      const std::complex<double> delta = c * d;
      f *= delta;
      if (std::abs(delta - 1.0) < 1e-16) break;
    }
    // The phase pi/2 x^2 reduced exactly: x^2 of a float is exact in a double, and so is fmod.
    const double theta = kPi / 2 * std::fmod(ax * ax, 4.0);
    r = std::complex<double>(0.5, 0.5) - ax * std::polar(1.0, theta) / f;
  }
  return x < 0 ? -r : r;
}

// Li2(1 - e^-w) = sum_n B_n w^(n+1) / (n+1)!: the dilogarithm's series in w = -log(1 - z), whose
// terms past w - w^2/4 fall as (w / 2 pi)^2; |w| <= log 2 below, where 10 even terms suffice.
double Li2OfLog(double w) {
  // B_2k / (2k+1)!, k = 1..10.
  static const double kCoef[] = {
      1.0 / 6 / 6, -1.0 / 30 / 120, 1.0 / 42 / 5040, -1.0 / 30 / 362880,
      5.0 / 66 / 39916800, -691.0 / 2730 / 6227020800.0, 7.0 / 6 / 1307674368000.0,
      -3617.0 / 510 / 355687428096000.0, 43867.0 / 798 / 121645100408832000.0,
      -174611.0 / 330 / 51090942171709440000.0};
  const double w2 = w * w;
  double p = 0;
  for (int k = 9; k >= 0; --k) p = p * w2 + kCoef[k];
  return w - w2 / 4 + w * w2 * p;
}

// Spence's function as TF defines it: integral_1^x log(t) / (t - 1) dt = Li2(1 - x), NaN for
// x < 0. Li2(z) from Li2OfLog with |w| <= log 2: directly for z in [-1, 1/2] (x in [1/2, 2]);
// through the reflection Li2(z) = pi^2/6 - log(z) log(1-z) - Li2(1-z) for x < 1/2, and the
// inversion Li2(z) = -pi^2/6 - log^2(-z)/2 - Li2(1/z) for x > 2. Spence(+inf) is NaN as TF's.
double Spence(double x) {
  if (!(x >= 0) || std::isinf(x)) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return kPi2Over6;
  if (x < 0.5) return kPi2Over6 - std::log(x) * std::log1p(-x) - Li2OfLog(-std::log1p(-x));
  if (x <= 2) return Li2OfLog(-std::log(x));
  const double l = std::log(x - 1);
  return -kPi2Over6 - 0.5 * l * l - Li2OfLog(std::log1p(-1 / x));
}

// TF's float32 kernel takes 1/x, which flushes to zero past 2^126, and returns NaN there: the
// same NaN, for equal results on the same input.
template <class T>
T SpenceOf(T x) {
  if (std::is_same_v<T, float> && x > T(0x1p126)) return std::numeric_limits<T>::quiet_NaN();
  return T(Spence(double(x)));
}

}  // namespace integrals

template <class T>
void VecMath(SpecialFn fn, const T* x, T* y, int64_t n) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  const Eigen::Map<const Array> a(x, n);
  Eigen::Map<Array> out(y, n);      // x == y is fine: every assignment below is coefficient-wise
  switch (fn) {
    case SpecialFn::kLgamma: out = a.lgamma(); break;
    case SpecialFn::kDigamma: out = a.digamma(); break;
    // TF: erfinv(x) = ndtri((x + 1) / 2) / sqrt(2)
    case SpecialFn::kErfinv: out = (a * T(0.5) + T(0.5)).ndtri() * T(M_SQRT1_2); break;
    case SpecialFn::kNdtri: out = a.ndtri(); break;
    case SpecialFn::kDawsn: out = a.unaryExpr([](T v) { return T(integrals::Dawson(v)); }); break;
    case SpecialFn::kFresnelCos:
      out = a.unaryExpr([](T v) { return T(integrals::Fresnel(v).real()); });
      break;
    case SpecialFn::kFresnelSin:
      out = a.unaryExpr([](T v) { return T(integrals::Fresnel(v).imag()); });
      break;
    case SpecialFn::kSpence: out = a.unaryExpr(&integrals::SpenceOf<T>); break;
    case SpecialFn::kBesselI0: out = Eigen::bessel_i0(a); break;
    case SpecialFn::kBesselI0e: out = Eigen::bessel_i0e(a); break;
    case SpecialFn::kBesselI1: out = Eigen::bessel_i1(a); break;
    case SpecialFn::kBesselI1e: out = Eigen::bessel_i1e(a); break;
    case SpecialFn::kBesselJ0: out = Eigen::bessel_j0(a); break;
    case SpecialFn::kBesselJ1: out = Eigen::bessel_j1(a); break;
    case SpecialFn::kBesselY0: out = Eigen::bessel_y0(a); break;
    case SpecialFn::kBesselY1: out = Eigen::bessel_y1(a); break;
    case SpecialFn::kBesselK0: out = Eigen::bessel_k0(a); break;
    case SpecialFn::kBesselK0e: out = Eigen::bessel_k0e(a); break;
    case SpecialFn::kBesselK1: out = Eigen::bessel_k1(a); break;
    case SpecialFn::kBesselK1e: out = Eigen::bessel_k1e(a); break;
  }
}
template void VecMath<float>(SpecialFn, const float*, float*, int64_t);
template void VecMath<double>(SpecialFn, const double*, double*, int64_t);

namespace fn {
namespace special {
template <class T> T Igamma(T a, T x) { return Eigen::numext::igamma(a, x); }
template <class T> T Igammac(T a, T x) { return Eigen::numext::igammac(a, x); }
template <class T> T IgammaGradA(T a, T x) { return Eigen::numext::igamma_der_a(a, x); }
template <class T> T RandomGammaGrad(T alpha, T sample) {
  return Eigen::numext::gamma_sample_der_alpha(alpha, sample);
}
template <class T> T Polygamma(T n, T x) { return Eigen::numext::polygamma(n, x); }
template <class T> T Zeta(T x, T q) { return Eigen::numext::zeta(x, q); }
template <class T> T Betainc(T a, T b, T x) { return Eigen::numext::betainc(a, b, x); }

#define NPU_SPECIAL_INSTANTIATE(T)                                              \
  template T Igamma<T>(T, T);                                                   \
  template T Igammac<T>(T, T);                                                  \
  template T IgammaGradA<T>(T, T);                                              \
  template T RandomGammaGrad<T>(T, T);                                          \
  template T Polygamma<T>(T, T);                                                \
  template T Zeta<T>(T, T);                                                     \
  template T Betainc<T>(T, T, T);
NPU_SPECIAL_INSTANTIATE(float)
NPU_SPECIAL_INSTANTIATE(double)
#undef NPU_SPECIAL_INSTANTIATE
}  // namespace special
}  // namespace fn

namespace {

// Shifts clamp the shift to the stored type's width, which the int64 compute type does not
// know: the functor is chosen by the node's dtype.
template <template <int> class Shift>
Status MakeShift(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  EvalFn (*select)(ComputeType) = nullptr;
  switch (DTypeSize(def.inputs[0].dtype)) {
    case 1: select = &SelectEval<2, Shift<7>, kInts>; break;
    case 2: select = &SelectEval<2, Shift<15>, kInts>; break;
    case 4: select = &SelectEval<2, Shift<31>, kInts>; break;
    default: select = &SelectEval<2, Shift<63>, kInts>; break;
  }
  return MakeElementwise(def, {2, kInts}, select, out);
}

// The elements' float classes as TF's CheckNumerics names them.
struct NonFinite {
  bool nan = false, neg_inf = false, pos_inf = false;
  bool any() const { return nan || neg_inf || pos_inf; }
};

// CheckNumerics(V2): the input unchanged, or InvalidArgumentError with TF's message when it holds
// NaN or Inf (V2 tells -Inf from +Inf).
class CheckNumericsKernel : public Kernel {
 public:
  CheckNumericsKernel(int dtype, int64_t n, std::string message, bool v2)
      : dtype_(dtype), n_(n), message_(std::move(message)), v2_(v2) {}
  Status Compute(const KernelArgs& args) const override {
    NonFinite found;
    const int size = DTypeSize(dtype_);
    float buf[256];
    for (int64_t s = 0; s < n_; s += 256) {
      const int64_t m = std::min<int64_t>(256, n_ - s);
      Load<float>(dtype_, args.in<char>(0) + s * size, m, buf);
      for (int64_t i = 0; i < m; ++i) {
        if (std::isnan(buf[i])) found.nan = true;
        else if (std::isinf(buf[i])) (buf[i] < 0 ? found.neg_inf : found.pos_inf) = true;
      }
    }
    if (found.any()) return InvalidArgument(message_, " : Tensor had ", Describe(found), " values");
    if (args.out(0) != args.in(0)) std::memcpy(args.out(0), args.in(0), n_ * size);
    return Status::Ok();
  }
  bool ChecksValues() const override { return true; }

 private:
  // V1: "Inf", "NaN" or "Inf and NaN"; V2: "-Inf", "+Inf", "NaN" joined as "a and b", "a, b, and c".
  std::string Describe(const NonFinite& f) const {
    if (!v2_) return f.nan ? (f.neg_inf || f.pos_inf ? "Inf and NaN" : "NaN") : "Inf";
    std::vector<std::string> parts;
    if (f.neg_inf) parts.push_back("-Inf");
    if (f.pos_inf) parts.push_back("+Inf");
    if (f.nan) parts.push_back("NaN");
    if (parts.size() == 1) return parts[0];
    if (parts.size() == 2) return parts[0] + " and " + parts[1];
    return parts[0] + ", " + parts[1] + ", and " + parts[2];
  }

  int dtype_;
  int64_t n_;
  std::string message_;
  bool v2_;
};

Status MakeCheckNumerics(const KernelDef& def, bool v2, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const TensorDesc& in = def.inputs[0];
  if (!InTypeSet(kFloats, in.dtype))
    return Error("does not support ", DTypeName(in.dtype), "; supported: ", TypeSetNames(kFloats));
  if (def.outputs[0].dtype != in.dtype || def.outputs[0].dims != in.dims)
    return Error("output must match the input");
  std::string message;
  NPU_RETURN_IF_ERROR(def.attrs.String("message", "", &message));
  *out = std::make_unique<CheckNumericsKernel>(in.dtype, NumElements(in.dims), message, v2);
  return Status::Ok();
}

// EnsureShape: the input unchanged (its shape is checked when the model is compiled).
class CopyKernel : public Kernel {
 public:
  explicit CopyKernel(int64_t bytes) : bytes_(bytes) {}
  Status Compute(const KernelArgs& args) const override {
    if (args.out(0) != args.in(0)) std::memcpy(args.out(0), args.in(0), bytes_);
    return Status::Ok();
  }

 private:
  int64_t bytes_;
};

Status MakeEnsureShape(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const TensorDesc& in = def.inputs[0];
  if (def.outputs[0].dtype != in.dtype || def.outputs[0].dims != in.dims)
    return Error("output must match the input");
  *out = std::make_unique<CopyKernel>(NumElements(in.dims) * DTypeSize(in.dtype));
  return Status::Ok();
}

void RegisterAll() {
  // Ops whose TF CPU kernel is float32/float64 only (no elementwise type set in op_traits.inc).
  RegisterElementwise<2, fn::Igamma, kReal>("Igamma", {});
  RegisterElementwise<2, fn::Igammac, kReal>("Igammac", {});
  RegisterElementwise<2, fn::IgammaGradA, kReal>("IgammaGradA", {});
  RegisterElementwise<2, fn::RandomGammaGrad, kReal>("RandomGammaGrad", {});
  RegisterElementwise<2, fn::Polygamma, kReal>("Polygamma", {});
  RegisterElementwise<2, fn::Zeta, kReal>("Zeta", {});
  RegisterElementwise<2, fn::NextAfter, kReal>("NextAfter", {});
  RegisterElementwise<3, fn::Betainc, kReal>("Betainc", {});
  RegisterKernel("LeftShift", MakeShift<fn::LeftShift>);
  RegisterKernel("RightShift", MakeShift<fn::RightShift>);
  RegisterKernel("CheckNumerics",
                 [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeCheckNumerics(d, false, k); });
  RegisterKernel("CheckNumericsV2",
                 [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeCheckNumerics(d, true, k); });
  RegisterKernel("EnsureShape", MakeEnsureShape);
}
StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
