// NpuGraphOp: one cluster of a partitioned graph, run as one compiled model on the NPU.
//
// The graph engine's partitioner writes these nodes (attrs below); the kernel compiles the
// cluster for the input shapes it sees, once per shape signature, and runs it.
#include "registration.h"

#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_builder.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tsl/platform/hash.h"

namespace npu_tf {
namespace {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

class NpuGraphOp : public tensorflow::OpKernel {
 public:
  explicit NpuGraphOp(OpKernelConstruction* c) : OpKernel(c), device_(DeviceIndex(c->device())) {
    std::string cluster, options;
    OP_REQUIRES_OK(c, c->GetAttr("cluster", &cluster));
    OP_REQUIRES_OK(c, c->GetAttr("options", &options));
    // The cluster body can be large: key on a 128-bit hash (two seeds) and its length.
    auto print = [](const std::string& s) {
      return absl::StrCat(tsl::Hash64(s.data(), s.size(), 0x6e7075), ":",
                          tsl::Hash64(s.data(), s.size(), 0x67726170), ":", s.size());
    };
    key_ = absl::StrCat(kNpuGraphOp, "|", print(cluster), "|", print(options));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<const Tensor*> inputs;
    for (int i = 0; i < ctx->num_inputs(); ++i) inputs.push_back(&ctx->input(i));
    std::string key = key_;
    AppendSignature(inputs, &key);
    std::shared_ptr<npu::CompiledModel> model;
    absl::Status s = GetModel(key, device_, [&] {
      tensorflow::NodeDef node = def();
      SetInputShapes(inputs, &node);
      return node;
    }, &model);
    if (s.ok()) s = RunModel(ctx, *model, inputs);
    OP_REQUIRES_OK(ctx, Named(s));
  }

 private:
  absl::Status Named(const absl::Status& s) const {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("NPU cluster '", name(), "': ", s.message()));
  }

  const int device_;
  std::string key_;
};

}  // namespace

absl::Status RegisterNpuGraphOp() {
  const tensorflow::OpRegistrationData* existing = nullptr;
  if (tensorflow::OpRegistry::Global()->LookUp(kNpuGraphOp, &existing).ok()) {
    return absl::AlreadyExistsError(absl::StrCat(kNpuGraphOp, " is already registered"));
  }
  tensorflow::OpRegistry::Global()->Register(
      [](tensorflow::OpRegistrationData* op) -> absl::Status {
        return tensorflow::OpDefBuilder(kNpuGraphOp)
            .Input("args: Tin")
            .Output("results: Tout")
            .Attr("Tin: list(type) >= 0")
            .Attr("Tout: list(type) >= 0")
            .Attr("cluster: string")          // serialized GraphDef with _Arg/_Retval nodes
            .Attr("cluster_name: string")
            .Attr("options: string = ''")     // graph-engine options the cluster compiles with
            .SetShapeFn(tensorflow::shape_inference::UnknownShape)
            .Doc("A cluster of TF ops compiled by the NPU graph engine and run as one model.")
            .Finalize(op);
      });
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder(kNpuGraphOp).Device(kNpuDeviceType).Build(), "NpuGraphOp",
      [](OpKernelConstruction* c) -> tensorflow::OpKernel* { return new NpuGraphOp(c); });
  return absl::OkStatus();
}

}  // namespace npu_tf
