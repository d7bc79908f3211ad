// NpuLayerNorm, a subgraph the fusion passes recognize as one kernel (docs/fusion.md): x, gamma,
// beta over the last axis; attr epsilon; with with_stats also the mean and rsqrt(var + epsilon)
// per row, which training gradients read (NpuGelu is gelu.cc's).
// Float32 math on float32/float16/bfloat16 storage, rounded once on store.
#include <cmath>

#include "kernels/float_io.h"
#include "kernels/shape.h"
#include "kernels/window.h"   // CheckShape

namespace npu {
namespace kernels {
namespace {

// sum(x - shift), or sum((x - shift)^2) when `squares`, in float32 over 16 lanes: vectorizes,
// and the order is fixed (unlike an alignment-peeling reduction), so results do not depend on
// where the row lies in memory.
template <bool squares>
float LaneSum(const float* x, int64_t n, float shift) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float d = x[i + j] - shift;
      lane[j] += squares ? d * d : d;
    }
  float s = 0;
  for (; i < n; ++i) {
    const float d = x[i] - shift;
    s += squares ? d * d : d;
  }
  for (int j = 0; j < kLanes; ++j) s += lane[j];
  return s;
}

class LayerNormKernel : public Kernel {
 public:
  LayerNormKernel(int64_t rows, int64_t cols, double eps, bool stats, int dtype)
      : rows_(rows), cols_(cols), eps_(eps), stats_(stats), dtype_(dtype) {}

  // Per row: mean, then variance of the centred values (two passes: no cancellation).
  Status Compute(const KernelArgs& args) const override {
    FloatIn x(dtype_, args.in(0), rows_ * cols_), gamma(dtype_, args.in(1), cols_),
        beta(dtype_, args.in(2), cols_);
    FloatOut y(dtype_, args.out(0), rows_ * cols_);
    std::unique_ptr<FloatOut> means, invs;
    if (stats_) {
      means = std::make_unique<FloatOut>(dtype_, args.out(1), rows_);
      invs = std::make_unique<FloatOut>(dtype_, args.out(2), rows_);
    }
    ParallelFor(rows_, 8 * cols_, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x.data() + r * cols_;
        float* yr = y.data() + r * cols_;
        const float* g = gamma.data();
        const float* bt = beta.data();
        const float mean = LaneSum<false>(xr, cols_, 0.0f) / static_cast<float>(cols_);
        const float var = LaneSum<true>(xr, cols_, mean) / static_cast<float>(cols_);
        const float inv = static_cast<float>(1.0 / std::sqrt(double(var) + eps_));
        for (int64_t i = 0; i < cols_; ++i) yr[i] = (xr[i] - mean) * inv * g[i] + bt[i];
        if (stats_) {
          means->data()[r] = mean;
          invs->data()[r] = inv;
        }
      }
    });
    y.Finish();
    if (stats_) {
      means->Finish();
      invs->Finish();
    }
    return Status::Ok();
  }

 private:
  int64_t rows_, cols_;
  double eps_;
  bool stats_;
  int dtype_;
};

Status MakeLayerNorm(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  bool stats;
  NPU_RETURN_IF_ERROR(def.attrs.Bool("with_stats", false, &stats));
  NPU_RETURN_IF_ERROR(CheckArity(def, 3, stats ? 3 : 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const Dims& x = def.inputs[0].dims;
  NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, x));
  if (stats && !x.empty()) {
    Dims row = x;
    row.back() = 1;
    NPU_RETURN_IF_ERROR(CheckShape("mean", def.outputs[1].dims, row));
    NPU_RETURN_IF_ERROR(CheckShape("rsqrt", def.outputs[2].dims, row));
  }
  int64_t axis;
  NPU_RETURN_IF_ERROR(def.attrs.Int("axis", -1, &axis));
  if (x.empty() || (axis != -1 && axis != static_cast<int64_t>(x.size()) - 1))
    return Error("normalizes the last axis only (axis -1); got axis ", axis, " of ", ShapeString(x));
  for (int i = 1; i < 3; ++i)
    if (NumElements(def.inputs[i].dims) != x.back())
      return Error(i == 1 ? "gamma " : "beta ", ShapeString(def.inputs[i].dims), " must have ",
                   x.back(), " elements");
  double eps;
  NPU_RETURN_IF_ERROR(def.attrs.Float("epsilon", &eps));
  if (!(eps >= 0)) return Error("epsilon must be >= 0, got ", eps);
  *out = std::make_unique<LayerNormKernel>(NumElements(x) / std::max<int64_t>(x.back(), 1), x.back(),
                                           eps, stats, def.outputs[0].dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("NpuLayerNorm", MakeLayerNorm);

}  // namespace
}  // namespace kernels
}  // namespace npu
