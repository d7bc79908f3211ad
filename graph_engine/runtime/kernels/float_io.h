// Float32 access to values stored as float32, float16 or bfloat16: the matrix, convolution,
// pooling and softmax kernels compute in float32 and round once when storing (the NPU's
// fp16/bf16 storage with fp32 accumulation).
#ifndef NPU_KERNELS_FLOAT_IO_H_
#define NPU_KERNELS_FLOAT_IO_H_

#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {

inline bool IsFloatStorage(int dtype) {
  return dtype == kFloat || dtype == kHalf || dtype == kBFloat16;
}

// All of a node's inputs and outputs (or the first `n_inputs` inputs) share one float storage type.
inline Status CheckFloatStorage(const KernelDef& def, int n_inputs = -1) {
  const int dtype = def.outputs.empty() ? def.inputs[0].dtype : def.outputs[0].dtype;
  if (!IsFloatStorage(dtype))
    return Error("does not support ", DTypeName(dtype), "; supported: float32, float16, bfloat16");
  const size_t n = n_inputs < 0 ? def.inputs.size() : static_cast<size_t>(n_inputs);
  for (size_t i = 0; i < n; ++i)
    if (def.inputs[i].dtype != dtype)
      return Error("input ", i, " is ", DTypeName(def.inputs[i].dtype), "; expected ", DTypeName(dtype));
  for (size_t i = 0; i < def.outputs.size(); ++i)
    if (def.outputs[i].dtype != dtype)
      return Error("output ", i, " is ", DTypeName(def.outputs[i].dtype), "; expected ", DTypeName(dtype));
  return Status::Ok();
}

// The value's elements as float32: the storage itself, or a converted copy.
class FloatIn {
 public:
  FloatIn(int dtype, const void* data, int64_t n) {
    if (dtype == kFloat) {
      ptr_ = static_cast<const float*>(data);
      return;
    }
    copy_.resize(n);
    ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      Load<float>(dtype, static_cast<const char*>(data) + b * DTypeSize(dtype), e - b, copy_.data() + b);
    });
    ptr_ = copy_.data();
  }
  const float* data() const { return ptr_; }

 private:
  std::vector<float> copy_;
  const float* ptr_;
};

// Where a kernel writes float32 results: the storage itself, or a buffer Finish() rounds into it.
class FloatOut {
 public:
  FloatOut(int dtype, void* data, int64_t n) : dtype_(dtype), data_(data), n_(n) {
    if (dtype == kFloat) ptr_ = static_cast<float*>(data);
    else { copy_.resize(n); ptr_ = copy_.data(); }
  }
  float* data() { return ptr_; }
  void Finish() {
    if (dtype_ == kFloat) return;
    ParallelFor(n_, 1, [&](int64_t b, int64_t e) {
      Store<float>(dtype_, copy_.data() + b, e - b, static_cast<char*>(data_) + b * DTypeSize(dtype_));
    });
  }

 private:
  int dtype_;
  void* data_;
  int64_t n_;
  std::vector<float> copy_;
  float* ptr_;
};

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_FLOAT_IO_H_
