// NpuGelu (the fusion passes' Gelu subgraph, docs/fusion.md; attr approximate): x * Phi(x)
// with elementwise_functors.h's GeluExact, or GeluTanh when approximate. Float32 math on
// float32/float16/bfloat16 storage, rounded once on store.
#include <algorithm>

#include "kernels/elementwise_functors.h"
#include "kernels/float_io.h"
#include "kernels/shape.h"
#include "kernels/window.h"   // CheckShape

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kBlock = 4096;   // elements per work item

template <class F>
class GeluKernel : public Kernel {
 public:
  GeluKernel(int64_t n, int dtype) : n_(n), dtype_(dtype) {}

  Status Compute(const KernelArgs& args) const override {
    FloatIn x(dtype_, args.in(0), n_);
    FloatOut y(dtype_, args.out(0), n_);
    const F f{};
    ParallelFor((n_ + kBlock - 1) / kBlock, 40 * kBlock, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0 * kBlock; i < std::min(n_, b1 * kBlock); ++i) y.data()[i] = f(x.data()[i]);
    });
    y.Finish();
    return Status::Ok();
  }

 private:
  int64_t n_;
  int dtype_;
};

Status MakeGelu(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, def.inputs[0].dims));
  bool approximate;
  NPU_RETURN_IF_ERROR(def.attrs.Bool("approximate", false, &approximate));
  const int64_t n = NumElements(def.inputs[0].dims);
  const int dtype = def.outputs[0].dtype;
  if (approximate) *out = std::make_unique<GeluKernel<fn::GeluTanh>>(n, dtype);
  else *out = std::make_unique<GeluKernel<fn::GeluExact>>(n, dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("NpuGelu", MakeGelu);

}  // namespace
}  // namespace kernels
}  // namespace npu
