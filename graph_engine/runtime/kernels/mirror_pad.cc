// MirrorPad and its gradient. Each padded position maps to one source position per dimension
// (REFLECT excludes the edge, SYMMETRIC repeats it); the forward gathers stored bytes through
// that map (any dtype), the gradient sums the incoming gradient back onto the sources.
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {
namespace {

class MirrorPadKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    std::string mode;
    std::vector<int64_t> pads;
    NPU_RETURN_IF_ERROR(def.attrs.String("mode", &mode));
    NPU_RETURN_IF_ERROR(def.attrs.IntList("paddings", &pads));
    if (mode != "REFLECT" && mode != "SYMMETRIC")
      return Error("mode '", mode, "' not supported; allowed: REFLECT, SYMMETRIC");
    // `small` is the unpadded shape, `big` the padded one.
    const Dims& small = grad ? def.outputs[0].dims : def.inputs[0].dims;
    const Dims& big = grad ? def.inputs[0].dims : def.outputs[0].dims;
    const int rank = static_cast<int>(small.size());
    if (pads.size() != 2 * small.size() || big.size() != small.size())
      return Error("paddings must be [", rank, ", 2] for a rank-", rank, " tensor, got ", pads.size(), " values");
    const int edge = mode == "REFLECT" ? 1 : 0;
    auto k = std::make_unique<MirrorPadKernel>();
    k->grad_ = grad;
    k->small_dims_ = small;
    k->big_dims_ = big;
    k->map_.resize(rank);
    for (int d = 0; d < rank; ++d) {
      const int64_t n = small[d], before = pads[2 * d], after = pads[2 * d + 1];
      if (before < 0 || after < 0 || before > n - edge || after > n - edge)
        return Error("paddings [", before, ", ", after, "] of dimension ", d, " must be in [0, ",
                     n - edge, "] for ", mode, " mode and size ", n);
      if (big[d] != n + before + after)
        return Error("padded dimension ", d, " is ", big[d], ", expected ", n + before + after);
      for (int64_t i = 0; i < big[d]; ++i) {
        int64_t s = i - before;
        if (s < 0) s = -s - 1 + edge;
        else if (s >= n) s = 2 * n - 1 - s - edge;
        k->map_[d].push_back(s);
      }
    }
    k->in_dtype_ = def.inputs[0].dtype;
    k->out_dtype_ = def.outputs[0].dtype;
    if (grad && (ComputeTypeOf(k->in_dtype_) != ComputeType::kFloat || k->in_dtype_ != k->out_dtype_))
      return Error("MirrorPadGrad: dtype ", DTypeName(k->in_dtype_), " not supported (allowed: float32, float16, bfloat16)");
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int rank = static_cast<int>(big_dims_.size());
    std::vector<int64_t> small_strides(rank, 1);
    for (int d = rank - 2; d >= 0; --d) small_strides[d] = small_strides[d + 1] * small_dims_[d + 1];
    const int64_t n_big = NumElements(big_dims_), n_small = NumElements(small_dims_);
    const int size = DTypeSize(in_dtype_);
    std::vector<float> g, acc;
    if (grad_) {
      g.resize(n_big);
      acc.assign(n_small, 0.f);
      Load<float>(in_dtype_, args.in(0), n_big, g.data());
    }
    std::vector<int64_t> idx(rank, 0);
    for (int64_t b = 0; b < n_big; ++b) {
      int64_t s = 0;
      for (int d = 0; d < rank; ++d) s += map_[d][idx[d]] * small_strides[d];
      if (grad_) acc[s] += g[b];
      else std::memcpy(args.out<char>(0) + b * size, args.in<char>(0) + s * size, size);
      for (int d = rank - 1; d >= 0 && ++idx[d] == big_dims_[d]; --d) idx[d] = 0;
    }
    if (grad_) Store<float>(out_dtype_, acc.data(), n_small, args.out(0));
    return Status::Ok();
  }

 private:
  bool grad_ = false;
  Dims small_dims_, big_dims_;
  std::vector<std::vector<int64_t>> map_;   // per dimension: padded index -> source index
  int in_dtype_ = 0, out_dtype_ = 0;
};

NPU_REGISTER_KERNEL("MirrorPad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MirrorPadKernel::Make(d, false, k);
});
NPU_REGISTER_KERNEL("MirrorPadGrad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MirrorPadKernel::Make(d, true, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
