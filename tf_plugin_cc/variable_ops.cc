// NPU kernels for the dense variable writes AssignVariableOp, AssignAddVariableOp and
// AssignSubVariableOp, and the accounting of variable memory (option variable_memory_max_size).
//
// TF's DEVICE_DEFAULT kernels of these ops would run on the NPU too (the simulated device's
// memory is host memory), but nothing would know which device buffers hold variables: TF
// allocates them through the device allocator like any tensor (usually the buffer of the
// initial value, which the variable then adopts), and a PluggableDevice allocator sees only a
// size. These kernels are where a variable takes a buffer, so each tells the runtime which
// allocation the variable now holds and which it lets go (npurtMarkVariableMemory); the runtime
// counts the variable bytes of each device and refuses a value past the limit, before the
// variable changes. Sparse writes that copy a variable's buffer (resource_ops.cc) account the
// same way; a variable that is destroyed frees its buffer, which leaves the count by itself.
//
// Semantics, checks and messages are TF's (tensorflow/core/kernels/resource_variable_ops.cc):
// dtype checks, validate_shape, copy-on-read mode, copy-on-write of a buffer that a reader
// still shares. Element work waits for the kernel's NPU stream and runs on the host, as the
// sparse kernels do; a real NPU would launch device kernels on the stream instead.
#include "variable_ops.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "npurt/npurt.h"
#include "registration.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/kernels/resource_variable_util.h"

namespace npu_tf {

using tensorflow::DataType;
using tensorflow::DataTypeString;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

namespace {

// TF keeps int32 tensors of non-CPU devices in host memory; only device memory is counted.
bool InDeviceMemory(const Tensor& t) {
  return t.dtype() != tensorflow::DT_INT32 && t.TotalBytes() > 0 && t.data() != nullptr;
}

}  // namespace

absl::Status HoldVariableBuffer(OpKernelContext* ctx, const std::string& variable,
                                const Tensor& previous, const Tensor& value) {
  if (!InDeviceMemory(value)) return absl::OkStatus();
  const void* replaced = previous.IsInitialized() && InDeviceMemory(previous) ? previous.data()
                                                                               : nullptr;
  const int device = DeviceIndex(ctx->device());
  uint64_t bytes = 0;
  const npurtError err = npurtMarkVariableMemory(device, value.data(), replaced, &bytes);
  if (err == NPURT_SUCCESS) return absl::OkStatus();
  const std::string what = variable.empty() ? "a variable" : absl::StrCat("variable '", variable, "'");
  if (err == NPURT_ERROR_OUT_OF_MEMORY) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "npu_device: cannot assign ", what, " on NPU:", device, ": ", npurtGetLastErrorMessage(),
        ". Raise variable_memory_max_size (npu_device.set_npu_config or "
        "NPU_VARIABLE_MEMORY_MAX_SIZE), or unset it to let variables use all of hbm_size"));
  }
  return absl::InternalError(absl::StrCat("npu_device: accounting the memory of ", what, ": ",
                                          npurtGetLastErrorMessage()));
}

namespace {

// A new buffer for a value of `src`'s dtype and shape, in the memory TF keeps it in on the NPU.
absl::Status Allocate(OpKernelContext* ctx, const Tensor& src, Tensor* dst) {
  tensorflow::AllocatorAttributes attr;
  if (src.dtype() == tensorflow::DT_INT32) attr.set_on_host(true);
  return ctx->allocate_temp(src.dtype(), src.shape(), dst, attr);
}

// `dst` = a copy of `src` (same dtype and shape), after the stream's queued work has run.
absl::Status CopyInto(OpKernelContext* ctx, const Tensor& src, Tensor* dst) {
  TF_RETURN_IF_ERROR(Allocate(ctx, src, dst));
  TF_RETURN_IF_ERROR(SyncComputeStream(ctx));
  // A real NPU: a device-to-device copy on the stream.
  if (src.TotalBytes() > 0) std::memcpy(dst->data(), src.data(), src.TotalBytes());
  return absl::OkStatus();
}

class AssignVariableOp : public OpKernel {
 public:
  explicit AssignVariableOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("dtype", &dtype_));
    if (c->HasAttr("validate_shape")) {
      OP_REQUIRES_OK(c, c->GetAttr("validate_shape", &validate_shape_));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& value = ctx->input(1);
    OP_REQUIRES(ctx, dtype_ == value.dtype(),
                absl::InvalidArgumentError(absl::StrCat(
                    "Variable and value dtypes don't match; respectively, ",
                    DataTypeString(dtype_), " and ", DataTypeString(value.dtype()))));
    const tensorflow::ResourceHandle& handle = tensorflow::HandleFromInput(ctx, 0);
    tensorflow::core::RefCountPtr<Var> variable;
    // Created empty (TF's kernel creates it holding the value): the value is accounted below
    // like any later one, and a value past the limit leaves the variable uninitialized.
    OP_REQUIRES_OK(ctx, tensorflow::LookupOrCreateResource<Var>(
                            ctx, handle, &variable, [this](Var** ptr) {
                              *ptr = new Var(dtype_);
                              return absl::OkStatus();
                            }));
    tsl::mutex_lock ml(*variable->mu());
    Tensor* var_tensor = variable->tensor();
    OP_REQUIRES(ctx,
                (var_tensor->dtype() == tensorflow::DT_INVALID && !variable->is_initialized) ||
                    var_tensor->dtype() == dtype_,
                absl::InvalidArgumentError(absl::StrCat(
                    "Trying to assign variable with wrong dtype. Expected ",
                    DataTypeString(var_tensor->dtype()), " got ", DataTypeString(dtype_))));
    if (validate_shape_) {
      OP_REQUIRES(ctx,
                  !variable->is_initialized || var_tensor->shape().IsSameSize(value.shape()),
                  absl::InvalidArgumentError(absl::StrCat(
                      "Trying to assign to variable with tensor with wrong shape. Expected ",
                      var_tensor->shape().DebugString(), " got ",
                      value.shape().DebugString())));
    }
    // Every writer copies a shared buffer before writing it (copy-on-write), so the variable
    // may adopt the value's buffer; in copy-on-read mode it takes a copy, as TF's kernel does.
    Tensor new_value = value;
    if (variable->copy_on_read_mode.load()) OP_REQUIRES_OK(ctx, CopyInto(ctx, value, &new_value));
    const Tensor previous = variable->is_initialized ? *var_tensor : Tensor();
    OP_REQUIRES_OK(ctx, HoldVariableBuffer(ctx, handle.name(), previous, new_value));
    *var_tensor = new_value;
    variable->is_initialized = true;
  }

 private:
  DataType dtype_;
  bool validate_shape_ = false;
};

template <typename T, bool kAdd>
class AssignUpdateVariableOp : public OpKernel {
 public:
  explicit AssignUpdateVariableOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const tensorflow::ResourceHandle& handle = tensorflow::HandleFromInput(ctx, 0);
    tensorflow::core::RefCountPtr<Var> variable;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, handle, &variable));
    const Tensor& value = ctx->input(1);
    tsl::mutex_lock ml(*variable->mu());
    Tensor* var_tensor = variable->tensor();
    OP_REQUIRES_OK(ctx, tensorflow::ValidateAssignUpdateVariableOpShapes(var_tensor->shape(),
                                                                         value.shape()));
    OP_REQUIRES(ctx, var_tensor->dtype() == value.dtype(),
                absl::InvalidArgumentError("DType of variable handle and value does not match."));
    OP_REQUIRES_OK(ctx, SyncComputeStream(ctx));
    // TF's PrepareToUpdateVariable: a buffer a reader still shares (or any, in copy-on-read
    // mode) is copied first, so the reader keeps its value.
    if (variable->copy_on_read_mode.load() || !var_tensor->RefCountIsOne()) {
      Tensor copy;
      OP_REQUIRES_OK(ctx, CopyInto(ctx, *var_tensor, &copy));
      OP_REQUIRES_OK(ctx, HoldVariableBuffer(ctx, handle.name(), *var_tensor, copy));
      *var_tensor = copy;
    }
    // A real NPU would launch an elementwise kernel on the stream here.
    T* __restrict v = var_tensor->flat<T>().data();
    const T* __restrict u = value.flat<T>().data();
    const int64_t n = var_tensor->NumElements();
    for (int64_t i = 0; i < n; ++i) v[i] = kAdd ? T(v[i] + u[i]) : T(v[i] - u[i]);
  }
};

void RegisterKernel(const char* op, DataType type, const char* class_name,
                    OpKernel* (*factory)(OpKernelConstruction*)) {
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder(op)
          .Device(kNpuDeviceType)
          .HostMemory("resource")
          .TypeConstraint("dtype", type)
          .Build(),
      class_name, factory);
}

void RegisterAssign(DataType t) {
  RegisterKernel("AssignVariableOp", t, "NpuAssignVariableOp",
                 [](OpKernelConstruction* c) -> OpKernel* { return new AssignVariableOp(c); });
}

template <typename T>
void RegisterForType() {
  const DataType t = tensorflow::DataTypeToEnum<T>::v();
  RegisterAssign(t);
  RegisterKernel("AssignAddVariableOp", t, "NpuAssignAddVariableOp",
                 [](OpKernelConstruction* c) -> OpKernel* {
                   return new AssignUpdateVariableOp<T, true>(c);
                 });
  RegisterKernel("AssignSubVariableOp", t, "NpuAssignSubVariableOp",
                 [](OpKernelConstruction* c) -> OpKernel* {
                   return new AssignUpdateVariableOp<T, false>(c);
                 });
}

}  // namespace

absl::Status RegisterVariableKernels(int* registered) {
  *registered = 0;
  absl::Status status =
      CheckNoNpuKernels({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"});
  if (!status.ok()) return status;
  // The types that live in NPU memory (int32 stays in host memory: TF's DEVICE_DEFAULT kernels
  // serve it, and it is not device memory to count).
  RegisterForType<float>();
  RegisterForType<Eigen::half>();
  RegisterForType<Eigen::bfloat16>();
  RegisterForType<double>();
  RegisterForType<tensorflow::int8>();
  RegisterForType<tensorflow::int16>();
  RegisterForType<tensorflow::int64>();
  RegisterForType<tensorflow::uint8>();
  RegisterForType<tensorflow::uint16>();
  RegisterForType<tensorflow::uint32>();
  RegisterForType<tensorflow::uint64>();
  RegisterForType<tensorflow::complex64>();
  RegisterForType<tensorflow::complex128>();
  RegisterAssign(tensorflow::DT_BOOL);
  *registered = 3;
  return absl::OkStatus();
}

}  // namespace npu_tf
