// NPU kernel for RngReadAndSkip, the one stateful op of tf.random.Generator: it returns the
// generator's Philox state (counter and key, from a variable) and advances the counter, and the
// stateless V2 random ops, which the graph engine runs, draw from that state. Without it a
// Generator, whose state variable lands on the NPU like any other, could not be used at all
// (TF's placer keeps an op with a resource input on the resource's device).
//
// The semantics are TF's CPU kernel's (tensorflow/core/kernels/stateful_random_ops.cc), checked
// against it: the same checks and error classes; algorithm 1 (Philox) and 3 (auto-select, Philox
// on CPUs and GPUs); the counter, the state's first two elements as one 128-bit number, advances
// by delta * 256 computed in 64 bits; the key is left alone; the output is the first three
// elements before the skip. Like TF's, it writes the variable in place unless a reader shares
// its buffer (copy-on-write, accounted as variable memory).
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "registration.h"
#include "variable_access.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"

namespace npu_tf {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

constexpr int kPhilox = 1, kThreeFry = 2, kAutoSelect = 3;   // TF's RNG_ALG_* ids
constexpr int64_t kPhiloxStateSize = 3;    // a 128-bit counter and a 64-bit key, as int64s
constexpr uint64_t kSkipPerDelta = 256;    // TF's CPU kernel advances the counter by delta * 256

template <typename T>
absl::Status Scalar(const Tensor& t, int index, T* value) {
  if (t.dims() != 0)
    return absl::InvalidArgumentError(absl::StrCat("input ", index, " (0-based) must have shape "
                                                   "[], not ", t.shape().DebugString()));
  *value = t.scalar<T>()();
  return absl::OkStatus();
}

absl::Status CheckAlgorithm(int alg) {
  if (alg == kPhilox || alg == kAutoSelect) return absl::OkStatus();
  if (alg == kThreeFry)
    return absl::UnimplementedError("Non-XLA devices don't support the ThreeFry algorithm.");
  return absl::InvalidArgumentError(absl::StrCat("Unsupported algorithm id: ", alg));
}

absl::Status CheckState(const Tensor& state) {
  if (state.dtype() != tensorflow::DT_INT64)
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype of RNG state variable must be int64, not ", tensorflow::DataTypeString(state.dtype())));
  if (state.dims() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "RNG state must have one and only one dimension, not ", state.dims()));
  if (state.NumElements() < kPhiloxStateSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "For the Philox algorithm, the size of state must be at least ", kPhiloxStateSize,
        "; got ", state.NumElements()));
  return absl::OkStatus();
}

class RngReadAndSkipOp : public OpKernel {
 public:
  explicit RngReadAndSkipOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    int alg = 0;
    uint64_t delta = 0;
    OP_REQUIRES_OK(ctx, Scalar(ctx->input(1), 1, &alg));
    OP_REQUIRES_OK(ctx, Scalar(ctx->input(2), 2, &delta));
    const tensorflow::ResourceHandle& handle = tensorflow::HandleFromInput(ctx, 0);
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, handle, &var));
    tsl::mutex_lock lock(*var->mu());
    Tensor* state = var->tensor();
    OP_REQUIRES(ctx, var->is_initialized && state->IsInitialized(),
                absl::FailedPreconditionError(absl::StrCat(
                    "Error while reading resource variable ", handle.name(),
                    ": it is uninitialized")));
    OP_REQUIRES_OK(ctx, CheckState(*state));
    OP_REQUIRES_OK(ctx, CheckAlgorithm(alg));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {kPhiloxStateSize}, &out));
    // The variable may still be written by work queued on the stream; the sim's device memory
    // is host memory (a real NPU would run this on the stream).
    OP_REQUIRES_OK(ctx, SyncComputeStream(ctx));
    std::memcpy(out->data(), state->data(), kPhiloxStateSize * sizeof(int64_t));
    OP_REQUIRES_OK(ctx, PrepareToUpdateVariable(ctx, var.get()));   // a reader shares it
    uint64_t counter[2];
    std::memcpy(counter, state->data(), sizeof(counter));
    const uint64_t skip = delta * kSkipPerDelta;   // wraps, as TF's does
    counter[0] += skip;
    counter[1] += counter[0] < skip;               // the carry into the high half
    std::memcpy(state->data(), counter, sizeof(counter));
  }
};

}  // namespace

absl::Status RegisterRandomKernels(int* registered) {
  *registered = 0;
  TF_RETURN_IF_ERROR(CheckNoNpuKernels({"RngReadAndSkip"}));
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder("RngReadAndSkip")
          .Device(kNpuDeviceType)
          .HostMemory("resource")
          .HostMemory("alg")
          .HostMemory("delta")
          .Build(),
      "NpuRngReadAndSkipOp",
      [](OpKernelConstruction* c) -> OpKernel* { return new RngReadAndSkipOp(c); });
  *registered = 1;
  return absl::OkStatus();
}

}  // namespace npu_tf
