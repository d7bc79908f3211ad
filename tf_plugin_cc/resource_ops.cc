// NPU kernels for the sparse resource-variable ops: ResourceGather, ResourceGatherNd,
// ResourceScatter{Add,Sub,Mul,Div,Min,Max,Update}, ResourceScatterNd{Add,Sub,Update,Min,Max},
// ResourceStridedSliceAssign (v[1:3, ::2].assign(...)) and ResourceCountUpTo.
//
// Variables live on the NPU (TF's DEVICE_DEFAULT VarHandleOp / ReadVariableOp kernels and the
// dense Assign* kernels of variable_ops.cc), so embedding lookups and sparse (IndexedSlices)
// optimizer updates on them need NPU kernels too, or TF's placer cannot colocate them with the
// variable. These ops read or write a variable in place; the graph engine never clusters them
// (they take a resource input), they run here. A copy-on-write that gives a variable a new
// buffer is accounted as variable memory (HoldVariableBuffer, option variable_memory_max_size).
//
// The semantics are those of TF's CPU kernels (tensorflow/core/kernels/resource_variable_ops.cc
// and scatter_nd_op.cc): the same checks and error messages, out-of-range indices reported as
// InvalidArgumentError, duplicate indices applied in order (add/sub accumulate), scalar updates
// broadcast, batch_dims, the variable's mutex and its copy-on-read mode. The element work is
// TF's own CPU functors (header templates of the wheel, and the DoScatterNd / GatherNdSlice
// instantiations libtensorflow_cc exports), so results are bit-identical to TF on CPU. Each op
// takes the dtypes TF's CPU kernels take among those NPU variables hold: gathers and updates every
// one, the arithmetic scatters the numbers, min/max the real numbers.
//
// ResourceStridedSliceAssign validates with TF's own ValidateStridedSliceOp and broadcasts as
// TF's StridedSliceAssignBCast says, and then moves elements as raw bytes (it never computes
// on them), one code path for every dtype.
//
// Device memory of the simulated NPU is host memory: each kernel waits for the work queued on
// its NPU stream (which may still write the variable or the indices) and then touches the
// memory on the host. A real NPU would launch device gather/scatter kernels on the stream here.
//
// Beyond TF's CPU kernels, inputs that TF's graph-mode shape functions reject but its CPU
// kernels would mis-index in eager mode (a scalar variable, updates whose inner size differs from
// the variable's, indices whose batch dimensions differ from the variable's, a dtype attr that
// does not match the variable) are InvalidArgumentErrors here rather than out-of-bounds access
// or a CHECK failure.
//
// Complex ScatterMul/Div may differ from TF's CPU results in the last bit: this build's Eigen
// (AVX2, FMA) vectorizes and rounds complex products differently from the wheel's (AVX).
#define EIGEN_USE_THREADS

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "npurt/npurt.h"
#include "registration.h"
#include "model_runner.h"
#include "variable_access.h"
#include "variable_ops.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/kernels/gather_functor.h"
#include "tensorflow/core/kernels/gather_nd_op.h"
#include "tensorflow/core/kernels/scatter_functor.h"
#include "tensorflow/core/kernels/scatter_nd_op.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/util/bad_indices_policy.h"
#include "tensorflow/core/util/strided_slice_op.h"

namespace tensorflow {
namespace functor {
// TF's CPU scatter-nd (validation, bounds checks and update loop), exported by
// libtensorflow_cc for every number type. The wheel's scatter_nd_op.h still declares the
// signature without the BadIndicesPolicy argument the library was built with.
template <typename Device, typename T, typename Index, scatter_nd_op::UpdateOp Op>
absl::Status DoScatterNd(OpKernelContext* c, const Tensor& indices, const Tensor& updates,
                         const TensorShape& shape, Tensor* out, bool allocate,
                         BadIndicesPolicy bad_indices_policy);
}  // namespace functor
}  // namespace tensorflow

namespace npu_tf {
namespace {

using tensorflow::DataType;
using tensorflow::DataTypeString;
using tensorflow::DataTypeToEnum;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::TensorShapeUtils;
using tensorflow::Var;
using CPUDevice = Eigen::ThreadPoolDevice;
using ScatterOp = tensorflow::scatter_op::UpdateOp;
using ScatterNdOp = tensorflow::scatter_nd_op::UpdateOp;

// ---------------------------------------------------------------------------------------------
// ResourceGather: output = params.shape[:batch_dims] + indices.shape[batch_dims:] +
// params.shape[batch_dims + 1:].
template <typename T, typename Index>
class ResourceGatherOp : public OpKernel {
 public:
  explicit ResourceGatherOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("batch_dims", &batch_dims_));
    OP_REQUIRES(c, batch_dims_ >= 0,
                absl::InvalidArgumentError(
                    absl::StrCat("batch_dims is negative (", batch_dims_, ")")));
  }

  void Compute(OpKernelContext* c) override {
    tensorflow::core::RefCountPtr<Var> v;
    OP_REQUIRES_OK(c, LookupResource(c, HandleFromInput(c, 0), &v));
    OP_REQUIRES_OK(c, EnsureSparseVariableAccess(c, v.get()));
    // The lock is held for the whole gather rather than taking a reference to the buffer, so a
    // concurrent write does not see a shared buffer and copy the whole table (as TF does).
    tsl::tf_shared_lock ml(*v->mu());
    const Tensor& params = *v->tensor();
    const Tensor& indices = c->input(1);
    OP_REQUIRES_OK(c, CheckVariableDtype(params, DataTypeToEnum<T>::v()));
    OP_REQUIRES(c, TensorShapeUtils::IsVectorOrHigher(params.shape()),
                absl::InvalidArgumentError("params must be at least 1 dimensional"));
    OP_REQUIRES(c, params.shape().dims() >= batch_dims_,
                absl::InvalidArgumentError(absl::StrCat(
                    "params must have at least ", batch_dims_,
                    " (batch_dims) dimensions but it has shape ", params.shape().DebugString())));
    // TF's kernel reads params.shape[batch_dims] and assumes indices share params' batch
    // dimensions (its shape function checks that in graphs only).
    OP_REQUIRES(c, batch_dims_ == 0 || params.dims() > batch_dims_,
                absl::InvalidArgumentError(absl::StrCat(
                    "batch_dims (", batch_dims_, ") must be less than rank(params) (",
                    params.dims(), ")")));
    if (batch_dims_ > 0) {
      bool same = indices.dims() >= batch_dims_;
      for (int i = 0; same && i < batch_dims_; ++i) {
        same = indices.dim_size(i) == params.dim_size(i);
      }
      OP_REQUIRES(c, same,
                  absl::InvalidArgumentError(absl::StrCat(
                      "indices.shape[:batch_dims] must equal params.shape[:batch_dims] with "
                      "batch_dims = ", batch_dims_, ", got indices.shape ",
                      indices.shape().DebugString(), " and params.shape ",
                      params.shape().DebugString())));
    }

    const int64_t N = indices.NumElements();
    OP_REQUIRES(c, params.dim_size(0) <= std::numeric_limits<Index>::max(),
                absl::InvalidArgumentError(absl::StrCat(
                    "params.shape[0] too large for ", DataTypeString(DataTypeToEnum<Index>::v()),
                    " indexing: ", params.dim_size(0), " > ", std::numeric_limits<Index>::max())));

    TensorShape result_shape;
    for (int i = 0; i < batch_dims_; ++i) {
      OP_REQUIRES_OK(c, result_shape.AddDimWithStatus(params.dim_size(i)));
    }
    for (int i = batch_dims_; i < indices.dims(); ++i) {
      OP_REQUIRES_OK(c, result_shape.AddDimWithStatus(indices.dim_size(i)));
    }
    for (int i = batch_dims_ + 1; i < params.dims(); ++i) {
      OP_REQUIRES_OK(c, result_shape.AddDimWithStatus(params.dim_size(i)));
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, result_shape, &out));
    if (N == 0) return;

    OP_REQUIRES_OK(c, SyncComputeStream(c));
    // A real NPU would launch a gather kernel on the stream from here on.
    Tensor offset_indices;
    const Tensor* op_indices = &indices;
    if (batch_dims_ > 0) {
      tensorflow::AllocatorAttributes host;
      host.set_on_host(true);
      OP_REQUIRES_OK(c, c->allocate_temp(indices.dtype(), indices.shape(), &offset_indices, host));
      std::memcpy(offset_indices.data(), indices.data(), indices.TotalBytes());
      AddBatchOffsets(c, &offset_indices, params);
      if (!c->status().ok()) return;
      op_indices = &offset_indices;
    }
    int64_t gather_dim_size = 1;
    for (int i = 0; i <= batch_dims_; ++i) gather_dim_size *= params.dim_size(i);
    int64_t inner_size = 1;
    for (int i = batch_dims_ + 1; i < params.dims(); ++i) inner_size *= params.dim_size(i);
    auto params_flat = params.shaped<T, 3>({1, gather_dim_size, inner_size});
    const auto indices_flat = op_indices->flat<Index>();
    auto out_flat = out->shaped<T, 3>({1, N, out->NumElements() / N});

    tensorflow::functor::GatherFunctor<CPUDevice, T, Index> functor;
    const int64_t bad_i = functor(c, params_flat, indices_flat, out_flat);
    OP_REQUIRES(c, bad_i < 0,
                absl::InvalidArgumentError(absl::StrCat(
                    "indices", tensorflow::SliceDebugString(indices.shape(), bad_i), " = ",
                    indices_flat(bad_i), " is not in [0, ", params.dim_size(0), ")")));
  }

 private:
  // TF's batch offsets: batch_dims = 1, indices [[0, 1, 2], [0, 1, 2]] into a dimension of
  // size 4 become [0, 1, 2, 4, 5, 6] (so, as in TF, an index is checked against the size of
  // all batches together).
  void AddBatchOffsets(OpKernelContext* ctx, Tensor* indices, const Tensor& params) {
    int64_t batch_size = 1;
    for (int i = 0; i < batch_dims_; ++i) batch_size *= params.dim_size(i);
    OP_REQUIRES(ctx, batch_size != 0,
                absl::InvalidArgumentError(
                    "Inner size of indices would result in batch_size of 0 and a division by 0 "
                    "in the implementation. This is illegal"));
    auto indices_flat = indices->flat<Index>();
    const int64_t index_inner_size = indices->NumElements() / batch_size;
    const int64_t batch_offset = params.dim_size(batch_dims_);
    for (int64_t b = 0, dest = 0; b < batch_size; ++b) {
      for (int64_t i = 0; i < index_inner_size; ++i) {
        indices_flat(dest++) += batch_offset * b;
      }
    }
  }

  tensorflow::int32 batch_dims_ = 0;
};

// ---------------------------------------------------------------------------------------------
// ResourceGatherNd: output = indices.shape[:-1] + params.shape[indices.shape[-1]:].
template <typename T, typename Index>
class ResourceGatherNdOp : public OpKernel {
 public:
  explicit ResourceGatherNdOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* c) override {
    tensorflow::core::RefCountPtr<Var> v;
    OP_REQUIRES_OK(c, LookupResource(c, HandleFromInput(c, 0), &v));
    OP_REQUIRES_OK(c, EnsureSparseVariableAccess(c, v.get()));
    tsl::tf_shared_lock ml(*v->mu());
    const Tensor& params = *v->tensor();
    const Tensor& indices = c->input(1);
    OP_REQUIRES_OK(c, CheckVariableDtype(params, DataTypeToEnum<T>::v()));
    OP_REQUIRES_OK(c, SyncComputeStream(c));
    // A real NPU would launch a gather kernel on the stream here.
    Tensor out;
    OP_REQUIRES_OK(c, tensorflow::functor::DoGatherNd<CPUDevice, T, Index>(c, params, indices,
                                                                            &out));
    c->set_output(0, out);
  }
};

// ---------------------------------------------------------------------------------------------
// ResourceScatter{Add,Sub,Mul,Div,Min,Max,Update}: params[indices[i], ...] op= updates[i, ...]
// (or the scalar updates), in the order of the indices.
template <typename T, typename Index, ScatterOp op>
class ResourceScatterOp : public OpKernel {
 public:
  explicit ResourceScatterOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* c) override {
    tensorflow::core::RefCountPtr<Var> v;
    OP_REQUIRES_OK(c, LookupResource(c, HandleFromInput(c, 0), &v));
    const DataType update_dtype = c->input(2).dtype();
    OP_REQUIRES(c, v->tensor()->dtype() == update_dtype,
                absl::InvalidArgumentError(
                    "DType of scatter resource and updates does not match."));
    OP_REQUIRES_OK(c, EnsureSparseVariableAccess(c, v.get()));
    // TF's CPU kernel writes POD dtypes under a shared lock. The exclusive lock lets a buffer
    // that is still shared be replaced by a copy before it is written; results are the same.
    tsl::mutex_lock ml(*v->mu());
    DoCompute(c, v.get());
  }

 private:
  void DoCompute(OpKernelContext* c, Var* v) {
    Tensor* params = v->tensor();
    const Tensor& indices = c->input(1);
    const Tensor& updates = c->input(2);
    OP_REQUIRES(c, TensorShapeUtils::IsVectorOrHigher(params->shape()),
                absl::InvalidArgumentError(absl::StrCat(
                    "params must be at least 1 dimensional, got shape ",
                    params->shape().DebugString())));
    OP_REQUIRES(c, updates.dims() == 0 || updates.dims() == indices.dims() + params->dims() - 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "Must have updates.shape = indices.shape + params.shape[1:] or "
                    "updates.shape = [], got ",
                    "updates.shape ", updates.shape().DebugString(), ", indices.shape ",
                    indices.shape().DebugString(), ", params.shape ",
                    params->shape().DebugString())));
    const int64_t N_big = indices.NumElements();
    OP_REQUIRES(c, N_big <= std::numeric_limits<Index>::max(),
                absl::InvalidArgumentError(absl::StrCat(
                    "indices has too many elements for ",
                    DataTypeString(DataTypeToEnum<Index>::v()), " indexing: ", N_big, " > ",
                    std::numeric_limits<Index>::max())));
    const Index N = static_cast<Index>(N_big);
    OP_REQUIRES(c, params->dim_size(0) <= std::numeric_limits<Index>::max(),
                absl::InvalidArgumentError(absl::StrCat(
                    "params.shape[0] too large for ", DataTypeString(DataTypeToEnum<Index>::v()),
                    " indexing: ", params->dim_size(0), " > ",
                    std::numeric_limits<Index>::max())));
    if (N == 0 && op != ScatterOp::DIV) return;

    OP_REQUIRES_OK(c, SyncComputeStream(c));
    // A real NPU would launch a scatter kernel on the stream from here on.
    if (op == ScatterOp::DIV) {  // TF's CPU kernel refuses a zero divisor up front
      const auto u = updates.flat<T>();
      bool no_zero = true;
      for (int64_t i = 0; no_zero && i < u.size(); ++i) no_zero = !(u(i) == T{});
      OP_REQUIRES(c, no_zero, absl::InvalidArgumentError("updates must not contain 0"));
      if (N == 0) return;
    }
    auto indices_flat = indices.flat<Index>();
    if (TensorShapeUtils::IsScalar(updates.shape())) {
      OP_REQUIRES_OK(c, PrepareToUpdateVariable(c, v));
      auto params_flat = v->tensor()->flat_outer_dims<T>();
      tensorflow::functor::ScatterScalarFunctor<CPUDevice, T, Index, op> functor;
      const Index bad_i = functor(c, c->eigen_device<CPUDevice>(), params_flat,
                                  updates.scalar<T>(), indices_flat);
      OP_REQUIRES(c, bad_i < 0, OutOfRange(indices, indices_flat, bad_i, *v->tensor()));
      return;
    }
    const int64_t num_updates = updates.NumElements();
    OP_REQUIRES(c, TensorShapeUtils::StartsWith(updates.shape(), indices.shape()),
                absl::InvalidArgumentError(absl::StrCat(
                    "The shape of indices (", indices.shape().DebugString(),
                    ") must be a prefix of the shape of updates (",
                    updates.shape().DebugString(), ")")));
    // TF's kernel trusts the graph's shape function for the inner dimensions; without it a
    // mismatch would write past a row.
    int64_t row = 1;
    for (int i = 1; i < params->dims(); ++i) row *= params->dim_size(i);
    OP_REQUIRES(c, num_updates == N_big * row,
                absl::InvalidArgumentError(absl::StrCat(
                    "Must have updates.shape = indices.shape + params.shape[1:] or "
                    "updates.shape = [], got ",
                    "updates.shape ", updates.shape().DebugString(), ", indices.shape ",
                    indices.shape().DebugString(), ", params.shape ",
                    params->shape().DebugString())));
    OP_REQUIRES_OK(c, PrepareToUpdateVariable(c, v));
    auto params_flat = v->tensor()->flat_outer_dims<T>();
    auto updates_flat = updates.shaped<T, 2>({N, num_updates / N});
    tensorflow::functor::ScatterFunctor<CPUDevice, T, Index, op> functor;
    const Index bad_i =
        functor(c, c->eigen_device<CPUDevice>(), params_flat, updates_flat, indices_flat);
    OP_REQUIRES(c, bad_i < 0, OutOfRange(indices, indices_flat, bad_i, *v->tensor()));
  }

  static absl::Status OutOfRange(const Tensor& indices,
                                 typename tensorflow::TTypes<Index>::ConstFlat indices_flat,
                                 Index bad_i, const Tensor& params) {
    return absl::InvalidArgumentError(absl::StrCat(
        "indices", tensorflow::SliceDebugString(indices.shape(), bad_i), " = ",
        indices_flat(bad_i), " is not in [0, ", params.dim_size(0), ")"));
  }
};

// ---------------------------------------------------------------------------------------------
// ResourceScatterNd{Add,Sub,Update,Min,Max}: TF's CPU DoScatterNd on the variable's buffer.
template <typename T, typename Index, ScatterNdOp op>
class ResourceScatterNdOp : public OpKernel {
 public:
  explicit ResourceScatterNdOp(OpKernelConstruction* c) : OpKernel(c) {
    std::string policy;
    if (c->HasAttr("bad_indices_policy")) {
      OP_REQUIRES_OK(c, c->GetAttr("bad_indices_policy", &policy));
    }
    absl::StatusOr<tensorflow::BadIndicesPolicy> parsed =
        tensorflow::BadIndicesPolicyFromString(policy);
    OP_REQUIRES_OK(c, parsed.status());
    bad_indices_policy_ = *parsed;
  }

  void Compute(OpKernelContext* c) override {
    tensorflow::core::RefCountPtr<Var> v;
    OP_REQUIRES_OK(c, LookupResource(c, HandleFromInput(c, 0), &v));
    OP_REQUIRES(c, v->tensor()->dtype() == c->input(2).dtype(),
                absl::InvalidArgumentError(
                    "DType of scatter resource and updates does not match."));
    OP_REQUIRES_OK(c, EnsureSparseVariableAccess(c, v.get()));
    tsl::mutex_lock ml(*v->mu());  // TF always takes the exclusive lock for resources
    OP_REQUIRES_OK(c, SyncComputeStream(c));
    // A real NPU would launch a scatter kernel on the stream here.
    OP_REQUIRES_OK(c, PrepareToUpdateVariable(c, v.get()));
    Tensor params = *v->tensor();
    OP_REQUIRES_OK(c, tensorflow::functor::DoScatterNd<CPUDevice, T, Index, op>(
                          c, c->input(1), c->input(2), params.shape(), &params,
                          /*allocate=*/false, bad_indices_policy_));
  }

 private:
  tensorflow::BadIndicesPolicy bad_indices_policy_ = tensorflow::BadIndicesPolicy::kDefault;
};

// ---------------------------------------------------------------------------------------------
// A variable that exists but holds no value (an assignment refused by variable_memory_max_size
// leaves one so): TF's read error rather than touching an empty buffer.
absl::Status CheckInitialized(OpKernelContext* c, Var& v) {
  if (v.is_initialized && v.tensor()->IsInitialized()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "Error while reading resource variable ", HandleFromInput(c, 0).name(),
      ". This could mean that the variable was uninitialized."));
}

// ---------------------------------------------------------------------------------------------
// ResourceStridedSliceAssign: ref[begin:end:strides] = value (value broadcast to the slice).
class ResourceStridedSliceAssignOp : public OpKernel {
 public:
  explicit ResourceStridedSliceAssignOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("T", &dtype_));
    OP_REQUIRES_OK(c, c->GetAttr("begin_mask", &begin_mask_));
    OP_REQUIRES_OK(c, c->GetAttr("end_mask", &end_mask_));
    OP_REQUIRES_OK(c, c->GetAttr("ellipsis_mask", &ellipsis_mask_));
    OP_REQUIRES_OK(c, c->GetAttr("new_axis_mask", &new_axis_mask_));
    OP_REQUIRES_OK(c, c->GetAttr("shrink_axis_mask", &shrink_axis_mask_));
  }

  void Compute(OpKernelContext* c) override {
    tensorflow::core::RefCountPtr<Var> v;
    OP_REQUIRES_OK(c, LookupResource(c, HandleFromInput(c, 0), &v));
    OP_REQUIRES_OK(c, CheckInitialized(c, *v));
    OP_REQUIRES_OK(c, EnsureSparseVariableAccess(c, v.get()));
    tsl::mutex_lock ml(*v->mu());
    const Tensor& lhs = *v->tensor();
    OP_REQUIRES(c, lhs.dtype() == dtype_,
                absl::InvalidArgumentError(absl::StrCat(
                    "l-value dtype ", DataTypeString(lhs.dtype()), " does not match r-value dtype ",
                    DataTypeString(dtype_))));
    TensorShape processing_shape, final_shape;
    bool is_identity = true, is_simple_slice = true, slice_dim0 = true;
    absl::InlinedVector<int64_t, 4> begin, end, strides;
    tensorflow::StridedSliceShapeSpec spec;
    OP_REQUIRES_OK(c, tensorflow::ValidateStridedSliceOp(
                          &c->input(1), &c->input(2), c->input(3), lhs.shape(), begin_mask_,
                          end_mask_, ellipsis_mask_, new_axis_mask_, shrink_axis_mask_,
                          &processing_shape, &final_shape, &is_identity, &is_simple_slice,
                          &slice_dim0, &begin, &end, &strides, &spec));
    if (processing_shape.num_elements() <= 0) return;  // TF checks nothing more either

    const Tensor& value = c->input(4);
    tensorflow::StridedSliceAssignBCast bcast(value.shape().dim_sizes(),
                                              final_shape.dim_sizes());
    OP_REQUIRES(c, bcast.IsValid(),
                absl::InvalidArgumentError(absl::StrCat(
                    "Cannot broadcast input shape ", value.shape().DebugString(),
                    " into final shape ", final_shape.DebugString())));
    // The value's dimensions in those of the variable (shrunk axes back, new axes out).
    const int dims = processing_shape.dims();
    const bool remapped = bcast.RemapDimensions(dims, spec.output_to_processing_mapping);
    const auto& value_dims = bcast.reshape();
    int64_t value_elements = 1;
    for (int64_t d : value_dims) value_elements *= d;
    OP_REQUIRES(c, remapped && static_cast<int>(value_dims.size()) == dims &&
                       value_elements == value.NumElements(),
                absl::InternalError(absl::StrCat(
                    "cannot map the r-value shape ", value.shape().DebugString(),
                    " to the slice ", processing_shape.DebugString(), " of the l-value")));

    OP_REQUIRES_OK(c, SyncComputeStream(c));
    OP_REQUIRES_OK(c, PrepareToUpdateVariable(c, v.get()));  // a reader shares the buffer
    // A real NPU would launch a strided copy on the stream here.
    std::vector<int64_t> size(dims), dst_stride(dims), src_stride(dims);
    int64_t dst = 1, src = 1;
    for (int i = dims - 1; i >= 0; --i) {
      size[i] = processing_shape.dim_size(i);
      dst_stride[i] = dst;
      src_stride[i] = value_dims[i] == 1 ? 0 : src;  // a broadcast dimension repeats
      dst *= lhs.dim_size(i);
      src *= value_dims[i];
    }
    StridedCopy(value, size, dst_stride, src_stride, begin, strides, v->tensor());
  }

 private:
  // Every element of the slice (an odometer over its dimensions, the innermost one a run) gets
  // its element of `value`, as bytes.
  static void StridedCopy(const Tensor& value, const std::vector<int64_t>& size,
                          const std::vector<int64_t>& dst_stride,
                          const std::vector<int64_t>& src_stride,
                          const absl::InlinedVector<int64_t, 4>& begin,
                          const absl::InlinedVector<int64_t, 4>& strides, Tensor* lhs) {
    const size_t elem = tensorflow::DataTypeSize(lhs->dtype());
    char* dst = static_cast<char*>(lhs->data());
    const char* src = static_cast<const char*>(value.data());
    const int dims = static_cast<int>(size.size());
    if (dims == 0) {  // a scalar variable
      std::memcpy(dst, src, elem);
      return;
    }
    const int inner = dims - 1;
    const int64_t dst_step = strides[inner] * dst_stride[inner];
    const int64_t src_step = src_stride[inner];
    const bool contiguous = dst_step == 1 && src_step == 1;
    std::vector<int64_t> index(dims, 0);
    while (true) {
      int64_t d = begin[inner] * dst_stride[inner], s = 0;
      for (int i = 0; i < inner; ++i) {
        d += (begin[i] + index[i] * strides[i]) * dst_stride[i];
        s += index[i] * src_stride[i];
      }
      if (contiguous) {
        std::memcpy(dst + d * elem, src + s * elem, size[inner] * elem);
      } else {
        for (int64_t k = 0; k < size[inner]; ++k, d += dst_step, s += src_step) {
          std::memcpy(dst + d * elem, src + s * elem, elem);
        }
      }
      int i = inner - 1;
      for (; i >= 0 && ++index[i] == size[i]; --i) index[i] = 0;
      if (i < 0) return;
    }
  }

  DataType dtype_;
  tensorflow::int32 begin_mask_ = 0, end_mask_ = 0, ellipsis_mask_ = 0, new_axis_mask_ = 0,
                    shrink_axis_mask_ = 0;
};

// ---------------------------------------------------------------------------------------------
// ResourceCountUpTo: outputs the variable's scalar value and increments it, or OutOfRange once
// the value has reached `limit`.
template <typename T>
class ResourceCountUpToOp : public OpKernel {
 public:
  explicit ResourceCountUpToOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("limit", &limit_));
  }

  void Compute(OpKernelContext* c) override {
    tensorflow::core::RefCountPtr<Var> v;
    OP_REQUIRES_OK(c, LookupResource(c, HandleFromInput(c, 0), &v));
    OP_REQUIRES_OK(c, CheckInitialized(c, *v));
    tsl::mutex_lock ml(*v->mu());
    OP_REQUIRES_OK(c, CheckVariableDtype(*v->tensor(), DataTypeToEnum<T>::v()));
    OP_REQUIRES(c, TensorShapeUtils::IsScalar(v->tensor()->shape()),
                absl::InvalidArgumentError(absl::StrCat(
                    "input is not a scalar: ", v->tensor()->shape().DebugString())));
    OP_REQUIRES_OK(c, SyncComputeStream(c));
    // A real NPU would read the value back from the device and launch the increment.
    T before;
    std::memcpy(&before, v->tensor()->data(), sizeof(T));
    OP_REQUIRES(c, before < limit_,
                absl::OutOfRangeError(absl::StrCat("Reached limit of ", limit_)));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, TensorShape({}), &out));
    std::memcpy(out->data(), &before, sizeof(T));
    // TF's kernel gives the variable a new buffer (the old one becomes the output); a copy of
    // the value as the output and copy-on-write keep the variable's buffer instead.
    OP_REQUIRES_OK(c, PrepareToUpdateVariable(c, v.get()));
    const T after = before + 1;
    std::memcpy(v->tensor()->data(), &after, sizeof(T));
  }

 private:
  T limit_;
};

// ---------------------------------------------------------------------------------------------
// Registration.

template <typename Kernel>
void Register(const char* op, const char* resource_arg, const char* type_attr, DataType type,
              DataType index_type, const char* class_name) {
  // Resource handles live in host memory; values and indices in device memory, like TF's GPU
  // registrations (int32 indices are host memory on the NPU anyway).
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder(op)
          .Device(kNpuDeviceType)
          .HostMemory(resource_arg)
          .TypeConstraint(type_attr, type)
          .TypeConstraint("Tindices", index_type)
          .Build(),
      class_name, [](OpKernelConstruction* c) -> OpKernel* { return new Kernel(c); });
}

// The ops of each dtype class, as TF's CPU registrations: gathers and updates for every dtype,
// the arithmetic scatters for numbers (and ScatterNd add/sub for bool, as TF), min/max for real
// numbers.
template <typename T, typename Index, bool kArithmetic, bool kMinMax>
void RegisterForTypes() {
  const DataType t = DataTypeToEnum<T>::v();
  const DataType ix = DataTypeToEnum<Index>::v();
  Register<ResourceGatherOp<T, Index>>("ResourceGather", "resource", "dtype", t, ix,
                                       "NpuResourceGatherOp");
  Register<ResourceGatherNdOp<T, Index>>("ResourceGatherNd", "resource", "dtype", t, ix,
                                         "NpuResourceGatherNdOp");
#define NPU_SCATTER(name, op)                                                            \
  Register<ResourceScatterOp<T, Index, ScatterOp::op>>(name, "resource", "dtype", t, ix, \
                                                        "NpuResourceScatterOp")
#define NPU_SCATTER_ND(name, op)                                                        \
  Register<ResourceScatterNdOp<T, Index, ScatterNdOp::op>>(name, "ref", "T", t, ix,     \
                                                            "NpuResourceScatterNdOp")
  NPU_SCATTER("ResourceScatterUpdate", ASSIGN);
  NPU_SCATTER_ND("ResourceScatterNdUpdate", ASSIGN);
  if constexpr (kArithmetic) {
    NPU_SCATTER("ResourceScatterAdd", ADD);
    NPU_SCATTER("ResourceScatterSub", SUB);
    NPU_SCATTER("ResourceScatterMul", MUL);
    NPU_SCATTER("ResourceScatterDiv", DIV);
  }
  if constexpr (kArithmetic || std::is_same_v<T, bool>) {
    NPU_SCATTER_ND("ResourceScatterNdAdd", ADD);
    NPU_SCATTER_ND("ResourceScatterNdSub", SUB);
  }
  if constexpr (kMinMax) {
    NPU_SCATTER("ResourceScatterMin", MIN);
    NPU_SCATTER("ResourceScatterMax", MAX);
    NPU_SCATTER_ND("ResourceScatterNdMin", MIN);
    NPU_SCATTER_ND("ResourceScatterNdMax", MAX);
  }
#undef NPU_SCATTER
#undef NPU_SCATTER_ND
}

// Begin, end and strides are read on the host, as TF's kernels do on every device; int32
// values live in host memory on the NPU anyway.
void RegisterStridedSliceAssign(DataType t) {
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder("ResourceStridedSliceAssign")
          .Device(kNpuDeviceType)
          .HostMemory("ref")
          .HostMemory("begin")
          .HostMemory("end")
          .HostMemory("strides")
          .TypeConstraint("T", t)
          .Build(),
      "NpuResourceStridedSliceAssignOp",
      [](OpKernelConstruction* c) -> OpKernel* { return new ResourceStridedSliceAssignOp(c); });
}

template <typename T, bool kArithmetic = true, bool kMinMax = true>
void RegisterForType() {
  RegisterForTypes<T, tensorflow::int32, kArithmetic, kMinMax>();
  RegisterForTypes<T, tensorflow::int64, kArithmetic, kMinMax>();
  RegisterStridedSliceAssign(DataTypeToEnum<T>::v());
}

template <typename T>
void RegisterCountUpTo() {
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder("ResourceCountUpTo")
          .Device(kNpuDeviceType)
          .HostMemory("resource")
          .TypeConstraint("T", DataTypeToEnum<T>::v())
          .Build(),
      "NpuResourceCountUpToOp",
      [](OpKernelConstruction* c) -> OpKernel* { return new ResourceCountUpToOp<T>(c); });
}

}  // namespace

absl::Status CheckNoNpuKernels(absl::Span<const char* const> ops) {
  for (const char* op : ops) {
    const tensorflow::KernelList kernels = tensorflow::GetRegisteredKernelsForOp(op);
    for (const tensorflow::KernelDef& k : kernels.kernel()) {
      if (k.device_type() == kNpuDeviceType) {
        return absl::AlreadyExistsError(
            absl::StrCat("an NPU kernel for ", op, " is already registered"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RegisterResourceKernels(int* registered) {
  *registered = 0;
  static constexpr const char* kOps[] = {
      "ResourceGather",      "ResourceGatherNd",     "ResourceScatterAdd",
      "ResourceScatterSub",  "ResourceScatterMul",   "ResourceScatterDiv",
      "ResourceScatterMin",  "ResourceScatterMax",   "ResourceScatterUpdate",
      "ResourceScatterNdAdd", "ResourceScatterNdSub", "ResourceScatterNdUpdate",
      "ResourceScatterNdMin", "ResourceScatterNdMax", "ResourceStridedSliceAssign",
      "ResourceCountUpTo"};
  absl::Status status = CheckNoNpuKernels(kOps);
  if (!status.ok()) return status;
  RegisterForType<float>();
  RegisterForType<Eigen::half>();
  RegisterForType<Eigen::bfloat16>();
  RegisterForType<double>();
  RegisterForType<tensorflow::int32>();
  RegisterForType<tensorflow::int64>();
  RegisterForType<tensorflow::int8>();
  RegisterForType<tensorflow::uint8>();
  RegisterForType<tensorflow::int16>();
  RegisterForType<tensorflow::uint16>();
  RegisterForType<tensorflow::uint32>();
  RegisterForType<tensorflow::uint64>();
  RegisterForType<tensorflow::complex64, /*kArithmetic=*/true, /*kMinMax=*/false>();
  RegisterForType<tensorflow::complex128, /*kArithmetic=*/true, /*kMinMax=*/false>();
  RegisterForType<bool, /*kArithmetic=*/false, /*kMinMax=*/false>();
  RegisterCountUpTo<tensorflow::int32>();
  RegisterCountUpTo<tensorflow::int64>();
  *registered = static_cast<int>(sizeof(kOps) / sizeof(kOps[0]));
  return absl::OkStatus();
}

}  // namespace npu_tf
