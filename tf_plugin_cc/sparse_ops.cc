// NPU kernels for the sparse ops whose output size or shape depends on the values: SparseSlice
// (how many entries fall in the slice), SparseFillEmptyRows (how many rows are empty),
// SparseReshape (the output shape's -1), and the gradients SparseSliceGrad and
// SparseFillEmptyRowsGrad (kept beside their ops).
//
// As the other plugin kernels (dynamic_shape_ops.cc): device memory of the simulated NPU is host
// memory, so each kernel waits for its NPU stream, then reads its inputs and writes its outputs on
// the host. Semantics, checks and messages are TF's CPU kernels' (sparse_slice_op.cc,
// sparse_slice_grad_op.cc, SparseTensor::Slice, sparse_fill_empty_rows_op.cc, reshape_util.cc):
// SparseSlice does not check indices against the shape, cuts a slice reaching past the shape at
// it and keeps the entries' order; SparseFillEmptyRows groups entries by row (stable) and gives an
// empty row one default entry at [row, 0, ...]; SparseReshape re-linearizes row-major.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "host_kernel.h"
#include "model_runner.h"
#include "registration.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace npu_tf {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::TensorShapeUtils;

// int64 arithmetic that wraps (TF's start + size and input_size - size overflow silently).
int64_t WrapAdd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }

// SparseSlice(indices [N, R], values [N], shape [R], start [R], size [R]): the entries with
// start <= index < start + size in every dim, shifted by -start; the output shape is the slice's
// overlap with the shape (size, cut at the shape's end; 0 where the slice starts past it).
template <typename T>
class SparseSliceOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &indices = c->input(0), &values = c->input(1), &shape = c->input(2);
    const Tensor &start = c->input(3), &size = c->input(4);
    if (!TensorShapeUtils::IsMatrix(indices.shape()))
      return Invalid("Input indices should be a matrix but received shape ", indices.shape().DebugString());
    if (!TensorShapeUtils::IsVector(values.shape()))
      return Invalid("Input values should be a vector but received shape ", values.shape().DebugString());
    if (!TensorShapeUtils::IsVector(shape.shape()))
      return Invalid("Input shape should be a vector but received shape ", shape.shape().DebugString());
    if (!TensorShapeUtils::IsVector(start.shape()))
      return Invalid("Input start should be a vector but received shape ", start.shape().DebugString());
    if (!TensorShapeUtils::IsVector(size.shape()))
      return Invalid("Input size should be a vector but received shape ", size.shape().DebugString());
    const int64_t rank = shape.NumElements();
    if (start.NumElements() != rank)
      return Invalid("Expected start to be a vector of length ", rank, " but got length ", start.NumElements());
    if (size.NumElements() != rank)
      return Invalid("Expected size to be a vector of length ", rank, " but got length ", size.NumElements());
    const int64_t nnz = indices.dim_size(0);
    if (values.dim_size(0) != nnz)
      return Invalid("Number of elements in indices (", nnz, ") and values (", values.dim_size(0), ") do not match");
    if (indices.dim_size(1) != rank)
      return Invalid("Index rank (", indices.dim_size(1), ") and shape rank (", rank, ") do not match");
    const auto sh = shape.flat<int64_t>(), st = start.flat<int64_t>(), sz = size.flat<int64_t>();
    const auto ix = indices.matrix<int64_t>();
    std::vector<int64_t> out_shape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      if (sh(d) < 0) return Invalid("Expected shape dimensions to be non-negative, got ", sh(d));
      // SparseTensor::Slice's three cases; a negative size is an error only where it is kept.
      out_shape[d] = st(d) < WrapAdd(sh(d), -sz(d)) ? sz(d) : st(d) < sh(d) ? sh(d) - st(d) : 0;
      if (out_shape[d] < 0) return Invalid("Expected a non-negative size, got ", out_shape[d]);
    }
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < nnz; ++i) {
      bool hit = true;
      for (int64_t d = 0; d < rank && hit; ++d) hit = st(d) <= ix(i, d) && ix(i, d) < WrapAdd(st(d), sz(d));
      if (hit) hits.push_back(i);
    }
    const int64_t m = static_cast<int64_t>(hits.size());
    Tensor *out_ix = nullptr, *out_vals = nullptr, *out_sh = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({m, rank}), &out_ix));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({m}), &out_vals));
    TF_RETURN_IF_ERROR(c->allocate_output(2, TensorShape({rank}), &out_sh));
    auto oi = out_ix->matrix<int64_t>();
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t d = 0; d < rank; ++d) oi(j, d) = ix(hits[j], d) - st(d);
      out_vals->flat<T>()(j) = values.flat<T>()(hits[j]);
    }
    for (int64_t d = 0; d < rank; ++d) out_sh->flat<int64_t>()(d) = out_shape[d];
    return absl::OkStatus();
  }
};

// SparseSliceGrad(backprop_val_grad [M], input_indices [N, R], input_start [R],
// output_indices [M, R]): each slice entry's gradient goes to the input entry it came from
// (matched in order, as SparseSlice kept them); zeros elsewhere.
template <typename T>
class SparseSliceGradOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &grad = c->input(0), &in_ix = c->input(1), &start = c->input(2), &out_ix = c->input(3);
    if (!TensorShapeUtils::IsVector(grad.shape()))
      return Invalid("Input backprop_val_grad should be a vector but received shape: ", grad.shape().DebugString());
    if (!TensorShapeUtils::IsMatrix(in_ix.shape()) || !TensorShapeUtils::IsMatrix(out_ix.shape()))
      return Invalid("Input and output indices should be matrices but received shapes: ",
                     in_ix.shape().DebugString(), " and ", out_ix.shape().DebugString());
    if (!TensorShapeUtils::IsVector(start.shape()))
      return Invalid("The input_start should be a vector but received shape ", start.shape().DebugString());
    const int64_t rank = in_ix.dim_size(1), n = in_ix.dim_size(0), m = out_ix.dim_size(0);
    if (out_ix.dim_size(1) != rank)
      return Invalid("The input and output should have the same ndims: got: ", rank, " and ", out_ix.dim_size(1));
    if (m > n)
      return Invalid("# rows of output_indices should be not greater than of input_indices, got ", m, " and ", n);
    if (grad.NumElements() != m)
      return Invalid("# elements of backprop_val_grad and # rows of output_indices should match (#nnz of sum): got ",
                     grad.NumElements(), " and ", m);
    if (start.NumElements() != rank)
      return Invalid("Expected input_start to be a vector of length ", rank, " but got length ", start.NumElements());
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({n}), &out));
    auto o = out->flat<T>();
    const auto a = in_ix.matrix<int64_t>(), b = out_ix.matrix<int64_t>();
    const auto st = start.flat<int64_t>();
    int64_t j = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool same = j < m;
      for (int64_t d = 0; d < rank && same; ++d) same = a(i, d) == WrapAdd(b(j, d), st(d));
      o(i) = same ? grad.flat<T>()(j++) : T(0);
    }
    if (j != m) return Invalid("Elements of backprop_val_grad aren't all propagated. Num elements:", m, ", used: ", j);
    return absl::OkStatus();
  }
};

// SparseFillEmptyRows(indices [N, R], values [N], dense_shape [R], default_value []): the
// entries grouped by row in order, an empty row given one default_value entry at [row, 0, ...];
// empty_row_indicator [rows] and reverse_index_map [N] (each entry's output position).
template <typename T>
class SparseFillEmptyRowsOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &indices = c->input(0), &values = c->input(1), &shape = c->input(2), &dflt = c->input(3);
    if (!TensorShapeUtils::IsVector(shape.shape()))
      return Invalid("dense_shape must be a vector, saw: ", shape.shape().DebugString());
    if (!TensorShapeUtils::IsMatrix(indices.shape()))
      return Invalid("indices must be a matrix, saw: ", indices.shape().DebugString());
    if (!TensorShapeUtils::IsVector(values.shape()))
      return Invalid("values must be a vector, saw: ", values.shape().DebugString());
    if (!TensorShapeUtils::IsScalar(dflt.shape()))
      return Invalid("default_value must be a scalar, saw: ", dflt.shape().DebugString());
    const int64_t n = indices.dim_size(0), rank = indices.dim_size(1);
    if (values.dim_size(0) != n)
      return Invalid("The length of `values` (", values.dim_size(0), ") must match the first dimension of `indices` (", n, ").");
    if (shape.NumElements() != rank)
      return Invalid("The length of `dense_shape` (", shape.NumElements(), ") must match the second dimension of `indices` (", rank, ").");
    if (rank == 0) return Invalid("Received a dense_shape of rank 0");   // a row needs a dimension
    const int64_t rows = shape.flat<int64_t>()(0);
    if (rows < 0) return Invalid("dense_shape[0] must be non-negative, got ", rows);
    if (rows == 0 && n != 0)
      return Invalid("Received SparseTensor with dense_shape[0] = 0 but indices.shape[0] = ", n);
    const auto ix = indices.matrix<int64_t>();
    std::vector<int64_t> start(rows + 1, 0);   // output position of each row's first entry
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = ix(i, 0);
      if (row < 0 || row >= rows) return Invalid("indices(", i, ", 0) is invalid: ", row, " >= ", rows);
      ++start[row + 1];
    }
    Tensor* empty = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(2, TensorShape({rows}), &empty));
    for (int64_t r = 0; r < rows; ++r) {
      empty->flat<bool>()(r) = start[r + 1] == 0;
      start[r + 1] = std::max<int64_t>(start[r + 1], 1) + start[r];
    }
    Tensor *out_ix = nullptr, *out_vals = nullptr, *reverse = nullptr;
    const int64_t total = start[rows];
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({total, rank}), &out_ix));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({total}), &out_vals));
    TF_RETURN_IF_ERROR(c->allocate_output(3, TensorShape({n}), &reverse));
    auto oi = out_ix->matrix<int64_t>();
    auto ov = out_vals->flat<T>();
    auto rev = reverse->flat<int64_t>();
    std::vector<int64_t> filled(rows, 0);
    for (int64_t i = 0; i < n; ++i) {   // (sorted rows, none empty: the input order, as TF's shortcut)
      const int64_t row = ix(i, 0), at = start[row] + filled[row]++;
      for (int64_t d = 0; d < rank; ++d) oi(at, d) = ix(i, d);
      ov(at) = values.flat<T>()(i);
      rev(i) = at;
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (filled[r]) continue;
      oi(start[r], 0) = r;
      for (int64_t d = 1; d < rank; ++d) oi(start[r], d) = 0;
      ov(start[r]) = dflt.scalar<T>()();
    }
    return absl::OkStatus();
  }
};

// SparseFillEmptyRowsGrad(reverse_index_map [N], grad_values [M]): d_values[i] =
// grad_values[reverse_index_map[i]]; d_default_value sums the grads of the filled-in entries.
template <typename T>
class SparseFillEmptyRowsGradOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &rev = c->input(0), &grad = c->input(1);
    if (!TensorShapeUtils::IsVector(rev.shape()))
      return Invalid("reverse_index_map must be a vector, saw: ", rev.shape().DebugString());
    if (!TensorShapeUtils::IsVector(grad.shape()))
      return Invalid("grad_values must be a vector, saw: ", grad.shape().DebugString());
    const int64_t n = rev.NumElements(), m = grad.NumElements();
    Tensor *d_values = nullptr, *d_default = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({n}), &d_values));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({}), &d_default));
    std::vector<bool> visited(m, false);
    const auto g = grad.flat<T>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = rev.flat<int64_t>()(i);
      if (j < 0 || j >= m) return Invalid("Elements in reverse index must be in [0, ", m, ") but got ", j);
      d_values->flat<T>()(i) = g(j);
      visited[j] = true;
    }
    // Summed in float for float16/bfloat16 (TF reduces with Eigen's sum), in T otherwise.
    using Sum = std::conditional_t<std::is_floating_point_v<T> || std::is_integral_v<T>, T, float>;
    Sum sum = Sum(0);
    for (int64_t j = 0; j < m; ++j)
      if (!visited[j]) sum += static_cast<Sum>(g(j));
    d_default->scalar<T>()() = static_cast<T>(sum);
    return absl::OkStatus();
  }
};

// SparseReshape(input_indices [N, R], input_shape [R], new_shape [R']): the entries' row-major
// positions re-expressed in new_shape, whose one -1 is inferred.
class SparseReshapeOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &indices = c->input(0), &in_shape = c->input(1), &target = c->input(2);
    if (!TensorShapeUtils::IsMatrix(indices.shape()))
      return Invalid("Input indices should be a matrix but received shape ", indices.shape().DebugString());
    if (!TensorShapeUtils::IsVector(in_shape.shape()))
      return Invalid("Input shape should be a vector but received shape ", in_shape.shape().DebugString());
    if (!TensorShapeUtils::IsVector(target.shape()))
      return Invalid("Target shape should be a vector but received shape ", target.shape().DebugString());
    const int64_t rank = in_shape.NumElements(), out_rank = target.NumElements(), n = indices.dim_size(0);
    if (indices.dim_size(1) != rank)
      return Invalid("Input tensor rank (", indices.dim_size(1), ") and input shape rank (", rank, ") do not match");
    TensorShape input_shape;
    TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape(in_shape.vec<int64_t>(), &input_shape));
    const int64_t dense = input_shape.num_elements();
    std::vector<int64_t> out(out_rank);
    int64_t product = 1, unknown = -1;
    for (int64_t d = 0; d < out_rank; ++d) {
      const int64_t size = target.flat<int64_t>()(d);
      if (size == -1) {
        if (unknown != -1) return Invalid("only one output dimension may be -1, not both ", unknown, " and ", d);
        unknown = d;
        out[d] = 1;
      } else {
        if (size < 0) return Invalid("size ", d, " must be non-negative, not ", size);
        product *= size;
        out[d] = size;
      }
    }
    if (unknown != -1) {
      if (product <= 0)
        return Invalid("reshape cannot infer the missing input size for an empty tensor unless all specified "
                       "input sizes are non-zero");
      if (dense % product)
        return Invalid("Input to reshape is a SparseTensor with ", dense, " dense values, but the requested shape "
                       "requires a multiple of ", product, ". input_shape=", input_shape.DebugString());
      out[unknown] = dense / product;
    }
    int64_t out_dense = 1;
    for (int64_t d : out) out_dense *= d;
    if (out_dense != dense)
      return Invalid("Input to reshape is a tensor with ", dense, " dense values, but the requested shape has ",
                     out_dense, ". input_shape=", input_shape.DebugString());
    Tensor *out_ix = nullptr, *out_shape = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({n, out_rank}), &out_ix));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({out_rank}), &out_shape));
    for (int64_t d = 0; d < out_rank; ++d) out_shape->flat<int64_t>()(d) = out[d];
    const auto ix = indices.matrix<int64_t>();
    auto oi = out_ix->matrix<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t id = 0;
      for (int64_t d = 0; d < rank; ++d) id = id * input_shape.dim_size(d) + ix(i, d);
      for (int64_t d = out_rank - 1; d >= 0; --d) {
        oi(i, d) = out[d] ? id % out[d] : 0;
        id = out[d] ? id / out[d] : 0;
      }
    }
    return absl::OkStatus();
  }
};

void Register(const char* op, const char* type_attr, tensorflow::DataType type, HostKernelFactory create) {
  RegisterHostKernel(op, type_attr, type, "NpuSparseOp", std::move(create));
}

template <typename T>
void RegisterTypes(bool grad) {
  const tensorflow::DataType t = tensorflow::DataTypeToEnum<T>::v();
  Register("SparseSlice", "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new SparseSliceOp<T>(c); });
  Register("SparseFillEmptyRows", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new SparseFillEmptyRowsOp<T>(c); });
  if (!grad) return;
  Register("SparseSliceGrad", "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new SparseSliceGradOp<T>(c); });
  Register("SparseFillEmptyRowsGrad", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new SparseFillEmptyRowsGradOp<T>(c); });
}

}  // namespace

absl::Status RegisterSparseKernels(int* registered) {
  *registered = 0;
  static constexpr const char* kOps[] = {"SparseSlice", "SparseSliceGrad", "SparseFillEmptyRows",
                                         "SparseFillEmptyRowsGrad", "SparseReshape"};
  absl::Status status = CheckNoNpuKernels(kOps);
  if (!status.ok()) return status;
  RegisterTypes<float>(true);              // SparseSliceGrad: TF's numeric types
  RegisterTypes<Eigen::half>(true);
  RegisterTypes<Eigen::bfloat16>(true);
  RegisterTypes<tensorflow::int32>(true);
  RegisterTypes<tensorflow::int64>(true);
  RegisterTypes<bool>(false);
  Register("SparseReshape", nullptr, tensorflow::DT_INT64,
           [](OpKernelConstruction* c) -> OpKernel* { return new SparseReshapeOp(c); });
  *registered = static_cast<int>(sizeof(kOps) / sizeof(kOps[0]));
  return absl::OkStatus();
}

}  // namespace npu_tf
