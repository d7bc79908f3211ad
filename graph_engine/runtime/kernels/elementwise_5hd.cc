// Layout-agnostic elementwise kernels on NC1HWC0 values, and BiasAdd.
//
// An elementwise op whose operands all share the output's channel count and C0 computes the
// same thing on the storage arrays [N, C1, H, W, C0] as on the logical ones: the node is
// handed to the ordinary (ND) kernel with storage dims. Operands of logical shape [C] or
// [1, 1, 1, C] (stored [1, C1, 1, 1, C0]) broadcast per channel; ND scalars broadcast as
// usual. Padding lanes compute garbage from garbage, which the padding invariant allows.
#include "kernels/float_io.h"
#include "kernels/format.h"

namespace npu {
namespace kernels {
namespace {

// The ops marked layout agnostic in the op registry (graph_engine/ops/op_traits.inc).
const char* const kAgnostic[] = {
#define NPU_LAYOUT_AGNOSTIC(tf_op) tf_op,
#include "ops/op_traits.inc"
};

Status MakeOnStorage(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  const KernelFactory* nd = FindNdKernel(def.kernel);
  if (nd == nullptr) return Error("has no ND kernel to run on NC1HWC0 storage");
  if (def.outputs.size() != 1 || def.outputs[0].format != kNC1HWC0)
    return Error("on padded formats needs one NC1HWC0 output");
  Nc1hwc0 y;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(def.outputs[0], &y));
  KernelDef flat = def;
  for (size_t i = 0; i < def.inputs.size(); ++i) {
    const TensorDesc& d = def.inputs[i];
    if (d.format == kND && NumElements(d.dims) == 1) continue;   // a scalar broadcasts anywhere
    Nc1hwc0 x;
    if (!Nc1hwc0::Of(d, &x).ok() || x.c != y.c || x.c0 != y.c0)
      return Error("input ", i, " (", FormatName(d.format), " ", ShapeString(d.dims), ", ", DTypeName(d.dtype),
                   ") cannot run on the output's NC1HWC0 storage: operands must be NC1HWC0 with ", y.c,
                   " channels and C0 ", y.c0, ", or ND scalars");
    flat.inputs[i].dims = StorageDims(d);
    flat.inputs[i].format = kND;
  }
  flat.outputs[0].dims = StorageDims(def.outputs[0]);
  flat.outputs[0].format = kND;
  return (*nd)(flat, out);
}

// BiasAdd: NC1HWC0 value + ND bias [C], per C0-lane run.
class BiasAdd5hdKernel : public Kernel {
 public:
  BiasAdd5hdKernel(Nc1hwc0 x, int dtype) : x_(x), dtype_(dtype) {}
  Status Compute(const KernelArgs& args) const override {
    FloatIn x(dtype_, args.in(0), x_.size());
    FloatIn b(dtype_, args.in(1), x_.c);
    std::vector<float> bias(x_.c1 * x_.c0, 0.0f);
    std::copy(b.data(), b.data() + x_.c, bias.begin());
    FloatOut y(dtype_, args.out(0), x_.size());
    const int64_t runs = x_.size() / x_.c0, per_plane = x_.h * x_.w;
    ParallelFor(runs, x_.c0, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* bv = bias.data() + (r / per_plane % x_.c1) * x_.c0;
        const float* xv = x.data() + r * x_.c0;
        float* yv = y.data() + r * x_.c0;
        for (int64_t l = 0; l < x_.c0; ++l) yv[l] = xv[l] + bv[l];
      }
    });
    y.Finish();
    return Status::Ok();
  }

 private:
  Nc1hwc0 x_;
  int dtype_;
};

Status MakeBiasAdd5hd(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const TensorDesc &in = def.inputs[0], &bias = def.inputs[1], &o = def.outputs[0];
  std::string data_format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &data_format));
  if (in.format != kNC1HWC0 || o.format != kNC1HWC0 || bias.format != kND || data_format != "NHWC" ||
      in.dims != o.dims)
    return Error("with padded formats needs an NC1HWC0 value, an ND bias, data_format NHWC and an NC1HWC0 ",
                 "output of the input's shape");
  Nc1hwc0 x;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(in, &x));
  if (bias.dims != Dims{x.c}) return Error("bias must have shape [", x.c, "], got ", ShapeString(bias.dims));
  *out = std::make_unique<BiasAdd5hdKernel>(x, o.dtype);
  return Status::Ok();
}

void RegisterAll() {
  for (const char* name : kAgnostic) RegisterFormatKernel(name, MakeOnStorage);
  RegisterFormatKernel("BiasAdd", MakeBiasAdd5hd);
}
StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
