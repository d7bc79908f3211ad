// Cumsum, Cumprod and CumulativeLogsumexp (reference: graph_engine/ops/scan.py). The input is
// viewed as [outer, length, inner] around the scanned axis; each (outer, inner) line is scanned in
// order, as TF's CPU kernel does: Cumsum/Cumprod accumulate floating types in the stored type
// (float32, or float32 rounded to float16/bfloat16 after every step: the same overflows and
// roundings as TF), integers in wrapping int64; CumulativeLogsumexp accumulates in float32 with
// TF's step acc = max + log1p(exp(min - max)) (acc stays -inf until a finite value comes).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

enum class ScanOp { kSum, kProd, kLogsumexp };

class ScanKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, ScanOp op, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<ScanKernel>();
    const Dims& dims = def.inputs[0].dims;
    if (dims.empty()) return Error("input must have rank >= 1, got a scalar");
    if (def.outputs[0].dims != dims) return Error("output shape must equal the input shape ", ShapeString(dims));
    int64_t axis = 0;
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("axis", &axis));
    NPU_RETURN_IF_ERROR(NormalizeAxis(axis, static_cast<int64_t>(dims.size()), &axis));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("exclusive", false, &k->exclusive_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("reverse", false, &k->reverse_));
    for (int64_t a = 0; a < static_cast<int64_t>(dims.size()); ++a)
      (a < axis ? k->outer_ : a > axis ? k->inner_ : k->length_) *= dims[a];
    k->op_ = op;
    k->in_dtype_ = def.inputs[0].dtype;
    k->out_dtype_ = def.outputs[0].dtype;
    const int t = k->in_dtype_;
    if (op == ScanOp::kLogsumexp && (t != k->out_dtype_ || !IsFloating(t)))
      return Error("dtype ", DTypeName(t), " not supported (allowed: float32, float16, bfloat16)");
    if (t != k->out_dtype_ || !(IsFloating(t) || t == kInt32 || t == kInt64))
      return Error("dtype ", DTypeName(t), " not supported (allowed: float32, float16, bfloat16, int32, int64)");
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (IsFloating(in_dtype_)) Run<float>(args);
    else Run<int64_t>(args);
    return Status::Ok();
  }

 private:
  template <class A>
  void Run(const KernelArgs& args) const {
    const int64_t n = outer_ * length_ * inner_;
    std::vector<A> x(n), y(n);
    Load<A>(in_dtype_, args.in(0), n, x.data());
    ParallelFor(outer_, length_ * inner_, [&](int64_t o0, int64_t o1) {
      std::vector<A> acc(inner_);
      for (int64_t o = o0; o < o1; ++o) {
        acc.assign(inner_, Start<A>());
        for (int64_t step = 0; step < length_; ++step) {
          const int64_t l = reverse_ ? length_ - 1 - step : step;
          const int64_t base = (o * length_ + l) * inner_;
          for (int64_t i = 0; i < inner_; ++i) {
            const A before = acc[i];
            acc[i] = Round(Combine(acc[i], x[base + i]));
            y[base + i] = exclusive_ ? before : acc[i];
          }
        }
      }
    });
    Store<A>(out_dtype_, y.data(), n, args.out(0));
  }

  template <class A>
  A Start() const {
    if (op_ == ScanOp::kLogsumexp) return -std::numeric_limits<A>::infinity();
    return A(op_ == ScanOp::kProd ? 1 : 0);
  }

  template <class A>
  A Combine(A acc, A v) const {
    const bool prod = op_ == ScanOp::kProd;
    if constexpr (std::is_integral_v<A>) {  // integer overflow wraps, as in TF
      return static_cast<A>(prod ? uint64_t(acc) * uint64_t(v) : uint64_t(acc) + uint64_t(v));
    } else {
      if (op_ != ScanOp::kLogsumexp) return prod ? acc * v : acc + v;
      // Eigen's mini/maxi(acc, v): a NaN v leaves both at acc, as on TF's CPU
      const A lo = v < acc ? v : acc, hi = acc < v ? v : acc;
      return hi < std::numeric_limits<A>::lowest() ? hi : hi + std::log1p(std::exp(lo - hi));
    }
  }

  // The accumulator as the stored type holds it (Cumsum/Cumprod: float16/bfloat16 round every
  // step; CumulativeLogsumexp keeps float32 and rounds once on store).
  template <class A>
  A Round(A v) const {
    if constexpr (std::is_same_v<A, float>) {
      if (op_ == ScanOp::kLogsumexp) return v;
      if (in_dtype_ == kHalf) return HalfToFloat(FloatToHalf(v));
      if (in_dtype_ == kBFloat16) return BFloat16ToFloat(FloatToBFloat16(v));
    }
    return v;
  }

  ScanOp op_ = ScanOp::kSum;
  bool exclusive_ = false, reverse_ = false;
  int64_t outer_ = 1, length_ = 1, inner_ = 1;
  int in_dtype_ = 0, out_dtype_ = 0;
};

NPU_REGISTER_KERNEL("Cumsum", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ScanKernel::Make(d, ScanOp::kSum, k);
});
NPU_REGISTER_KERNEL("Cumprod", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ScanKernel::Make(d, ScanOp::kProd, k);
});
NPU_REGISTER_KERNEL("CumulativeLogsumexp", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ScanKernel::Make(d, ScanOp::kLogsumexp, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
