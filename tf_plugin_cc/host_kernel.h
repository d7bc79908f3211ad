// Plugin kernels that compute on the host: ops TF runs with the plugin's own NPU kernels rather
// than through the graph engine (output shapes known only from the values: Where, Unique,
// SparseSlice ...). The simulated device memory is host memory, so a kernel waits for the work
// queued on its NPU stream and then reads and writes the tensors directly; a real NPU would
// launch device kernels on the stream instead.
#ifndef NPU_TF_HOST_KERNEL_H_
#define NPU_TF_HOST_KERNEL_H_

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "registration.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace npu_tf {

template <typename... Parts>
absl::Status Invalid(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// An int32 or int64 tensor's element i (index and shape tensors may be either).
inline int64_t IndexAt(const tensorflow::Tensor& t, int64_t i) {
  return t.dtype() == tensorflow::DT_INT32 ? int64_t{t.flat<int32_t>()(i)} : int64_t{t.flat<int64_t>()(i)};
}

// Syncs the NPU stream, then runs ComputeOnHost.
class HostKernel : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* c) final {
    OP_REQUIRES_OK(c, SyncComputeStream(c));
    OP_REQUIRES_OK(c, ComputeOnHost(c));
  }

 protected:
  virtual absl::Status ComputeOnHost(tensorflow::OpKernelContext* c) = 0;
};

using HostKernelFactory = std::function<tensorflow::OpKernel*(tensorflow::OpKernelConstruction*)>;

// Registers `factory` (it may capture: a reduction, an op version) for `op` on the NPU, with
// `type_attr` constrained to `type` (type_attr nullptr: the op's dtypes are fixed).
inline void RegisterHostKernel(const char* op, const char* type_attr, tensorflow::DataType type,
                               const char* class_name, HostKernelFactory factory) {
  class Factory : public tensorflow::kernel_factory::OpKernelFactory {
   public:
    explicit Factory(HostKernelFactory f) : f_(std::move(f)) {}
    tensorflow::OpKernel* Create(tensorflow::OpKernelConstruction* c) override { return f_(c); }

   private:
    HostKernelFactory f_;
  };
  tensorflow::KernelDefBuilder b(op);
  b.Device(kNpuDeviceType);
  if (type_attr != nullptr) b.TypeConstraint(type_attr, type);
  tensorflow::kernel_factory::OpKernelRegistrar(b.Build(), class_name,
                                                std::make_unique<Factory>(std::move(factory)));
}

}  // namespace npu_tf

#endif  // NPU_TF_HOST_KERNEL_H_
