// How the plugin's kernels that write a resource variable in place (the sparse scatters of
// resource_ops.cc, the optimizer updates of training_ops.cc) get a buffer they may write: TF's
// copy-on-read / copy-on-write protocol (tensorflow/core/kernels/training_op_helpers.h), with
// every new buffer a variable takes accounted as variable memory (HoldVariableBuffer).
#ifndef TF_PLUGIN_CC_VARIABLE_ACCESS_H_
#define TF_PLUGIN_CC_VARIABLE_ACCESS_H_

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "variable_ops.h"

namespace npu_tf {

// A new buffer with the contents of `src`, for copy-on-write. int32 values live in host memory
// on the NPU (TF's convention for non-CPU devices), everything else in device memory.
inline absl::Status CopyOf(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& src,
                           tensorflow::Tensor* dst) {
  tensorflow::AllocatorAttributes attr;
  if (src.dtype() == tensorflow::DT_INT32) attr.set_on_host(true);
  TF_RETURN_IF_ERROR(ctx->allocate_temp(src.dtype(), src.shape(), dst, attr));
  // A real NPU: a device-to-device copy on the stream.
  if (src.TotalBytes() > 0) std::memcpy(dst->data(), src.data(), src.TotalBytes());
  return absl::OkStatus();
}

// TF's EnsureSparseVariableAccess: before the first sparse access the variable (the handle of
// input `input`) switches to copy-on-read mode (reads copy the buffer instead of aliasing it),
// and a buffer that a reader still shares is copied first, so that reader keeps its value.
// Takes the variable's mutex itself: call it before locking.
inline absl::Status EnsureSparseVariableAccess(tensorflow::OpKernelContext* ctx,
                                               tensorflow::Var* var, int input = 0) {
  if (var->copy_on_read_mode.load()) return absl::OkStatus();
  tsl::mutex_lock ml(*var->mu());
  if (var->copy_on_read_mode.load()) return absl::OkStatus();
  if (var->tensor()->RefCountIsOne()) {
    var->copy_on_read_mode.store(true);
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(SyncComputeStream(ctx));
  tensorflow::Tensor tmp;
  TF_RETURN_IF_ERROR(CopyOf(ctx, *var->tensor(), &tmp));
  TF_RETURN_IF_ERROR(HoldVariableBuffer(ctx, tensorflow::HandleFromInput(ctx, input).name(),
                                        *var->tensor(), tmp));
  *var->tensor() = tmp;
  var->copy_on_read_mode.store(true);
  return absl::OkStatus();
}

// TF's PrepareToUpdateVariable (REQUIRES: *var->mu() held exclusively, the stream synced): a
// buffer still shared with a reader is copied before it is written.
inline absl::Status PrepareToUpdateVariable(tensorflow::OpKernelContext* ctx,
                                            tensorflow::Var* var, int input = 0) {
  if (var->tensor()->RefCountIsOne()) return absl::OkStatus();
  tensorflow::Tensor tmp;
  TF_RETURN_IF_ERROR(CopyOf(ctx, *var->tensor(), &tmp));
  TF_RETURN_IF_ERROR(HoldVariableBuffer(ctx, tensorflow::HandleFromInput(ctx, input).name(),
                                        *var->tensor(), tmp));
  *var->tensor() = tmp;
  return absl::OkStatus();
}

// Exclusive locks on `mutexes` (of variables), each distinct one once, in address order, so that
// kernels locking overlapping sets of variables cannot deadlock (TF's
// MaybeLockVariableInputMutexesInOrder).
inline std::vector<tsl::mutex_lock> LockInOrder(std::vector<tsl::mutex*> mutexes) {
  std::sort(mutexes.begin(), mutexes.end());
  mutexes.erase(std::unique(mutexes.begin(), mutexes.end()), mutexes.end());
  std::vector<tsl::mutex_lock> locks;
  locks.reserve(mutexes.size());
  for (tsl::mutex* mu : mutexes) locks.emplace_back(*mu);
  return locks;
}

inline std::vector<tsl::mutex_lock> LockVariablesInOrder(
    const std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>>& vars) {
  std::vector<tsl::mutex*> mutexes;
  for (const auto& v : vars) mutexes.push_back(v->mu());
  return LockInOrder(std::move(mutexes));
}

inline absl::Status CheckVariableDtype(const tensorflow::Tensor& params,
                                       tensorflow::DataType expected) {
  if (params.dtype() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Trying to read variable with wrong dtype. Expected ",
                   tensorflow::DataTypeString(params.dtype()), " got ",
                   tensorflow::DataTypeString(expected)));
}

}  // namespace npu_tf

#endif  // TF_PLUGIN_CC_VARIABLE_ACCESS_H_
