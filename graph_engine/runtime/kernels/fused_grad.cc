// Training fusions (docs/fusion.md): NpuFusedActivationGradBiasAddGrad computes an activation
// gradient and the BiasAddGrad of that gradient in one pass over memory.
// Inputs (gradient, forward value); outputs (activation gradient, bias gradient [C]).
#include <string>

#include "kernels/elementwise_functors.h"
#include "kernels/float_io.h"
#include "kernels/shape.h"
#include "kernels/window.h"   // CheckShape

namespace npu {
namespace kernels {
namespace {

// The activation's gradient functor (elementwise_functors.h) on (incoming gradient, forward
// value): the forward value is the activation's input (Relu, Relu6, LeakyRelu) or output (the
// rest), as TF's gradient ops read it; kGradFirst says in which order the functor takes them.
template <class F, bool kGradFirst>
struct ActGrad {
  explicit ActGrad(float alpha) : fn(fn::Make<F>(alpha)) {}
  float operator()(float g, float f) const { return kGradFirst ? fn(g, f) : fn(f, g); }
  F fn;
};

// Viewed as [outer, channels, inner]: NHWC (and matrices) have inner = 1, NCHW inner = H*W.
template <class Grad>
class ActGradBiasKernel : public Kernel {
 public:
  ActGradBiasKernel(float alpha, int64_t outer, int64_t channels, int64_t inner, int dtype)
      : grad_(alpha), outer_(outer), c_(channels), inner_(inner), dtype_(dtype) {}

  Status Compute(const KernelArgs& args) const override {
    const int64_t n = outer_ * c_ * inner_;
    FloatIn g(dtype_, args.in(0), n), f(dtype_, args.in(1), n);
    FloatOut dx(dtype_, args.out(0), n), db(dtype_, args.out(1), c_);
    float* out = dx.data();
    float* sums = db.data();
    if (inner_ == 1) {
      // Row parts with their own partial sums, added in order (deterministic).
      const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(PlanThreads(), outer_));
      std::vector<std::vector<float>> partial(parts, std::vector<float>(c_, 0.0f));
      ParallelFor(parts, 4 * outer_ * c_ / parts, [&](int64_t q0, int64_t q1) {
        const Grad fn = grad_;
        for (int64_t q = q0; q < q1; ++q) {
          float* __restrict acc = partial[q].data();
          for (int64_t r = outer_ * q / parts; r < outer_ * (q + 1) / parts; ++r) {
            // Distinct buffers (restrict) and a local functor: the loops vectorize.
            float* __restrict row = out + r * c_;
            const float* __restrict grad = g.data() + r * c_;
            const float* __restrict value = f.data() + r * c_;
            for (int64_t c = 0; c < c_; ++c) row[c] = fn(grad[c], value[c]);
            for (int64_t c = 0; c < c_; ++c) acc[c] += row[c];
          }
        }
      });
      std::fill(sums, sums + c_, 0.0f);
      for (const auto& p : partial)
        for (int64_t c = 0; c < c_; ++c) sums[c] += p[c];
    } else {
      // A channel owns its sum: parallel over channels.
      ParallelFor(c_, 4 * outer_ * inner_, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double s = 0;
          for (int64_t o = 0; o < outer_; ++o)
            for (int64_t i = (o * c_ + c) * inner_, e = i + inner_; i < e; ++i) {
              out[i] = grad_(g.data()[i], f.data()[i]);
              s += out[i];
            }
          sums[c] = static_cast<float>(s);
        }
      });
    }
    dx.Finish();
    db.Finish();
    return Status::Ok();
  }

 private:
  Grad grad_;
  int64_t outer_, c_, inner_;
  int dtype_;
};

Status MakeActGradBias(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 2));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  using Make = std::unique_ptr<Kernel> (*)(float alpha, int64_t outer, int64_t c, int64_t inner, int dtype);
  static const struct { const char* name; Make make; } kActs[] = {
#define NPU_ACTIVATION_GRAD(activation, functor, grad_first)                                  \
  {activation, [](float alpha, int64_t outer, int64_t c, int64_t inner, int dtype) {          \
     return std::unique_ptr<Kernel>(                                                           \
         new ActGradBiasKernel<ActGrad<fn::functor, grad_first>>(alpha, outer, c, inner, dtype)); \
   }},
#include "ops/op_traits.inc"
  };
  std::string name, format;
  NPU_RETURN_IF_ERROR(def.attrs.String("activation", &name));
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &format));
  double alpha;
  NPU_RETURN_IF_ERROR(def.attrs.Float("alpha", 0.2, &alpha));
  Make make = nullptr;
  std::string allowed;
  for (const auto& a : kActs) {
    if (name == a.name) make = a.make;
    allowed += std::string(allowed.empty() ? "" : ", ") + a.name;
  }
  if (!make) return Error("activation \"", name, "\" not supported; allowed: ", allowed);
  if (format != "NHWC" && format != "NCHW")
    return Error("data_format \"", format, "\" not supported; allowed: NHWC, NCHW");
  const Dims& x = def.inputs[0].dims;
  if (x.size() < 2) return Error("gradient must have rank >= 2, got ", ShapeString(x));
  NPU_RETURN_IF_ERROR(CheckShape("forward value", def.inputs[1].dims, x));
  NPU_RETURN_IF_ERROR(CheckShape("output 0", def.outputs[0].dims, x));
  const size_t axis = format == "NCHW" && x.size() > 2 ? 1 : x.size() - 1;
  NPU_RETURN_IF_ERROR(CheckShape("output 1", def.outputs[1].dims, Dims{x[axis]}));
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; ++i) outer *= x[i];
  for (size_t i = axis + 1; i < x.size(); ++i) inner *= x[i];
  *out = make(static_cast<float>(alpha), outer, x[axis], inner, def.outputs[0].dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("NpuFusedActivationGradBiasAddGrad", MakeActGradBias);

}  // namespace
}  // namespace kernels
}  // namespace npu
