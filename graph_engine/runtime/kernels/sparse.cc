// Sparse ops with static output shapes (reference: graph_engine/ops/sparse.py).
// SparseTensorDenseMatMul: A in COO form times a dense B. Each entry i of A adds
// a_values[i] * op(B)[k, :] to output row m, in entry order as TF's CPU functor does: float16
// accumulates in float (TF's SumType), bfloat16 in bfloat16 (TF has no SumType for it: each
// product and sum rounds), int32 in wrapping int64 stored narrowed. Indices are checked, k
// first, only when there is work.
// SparseToDense: a fill of default_value and element copies of any dtype at the checked indices.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {
namespace {

class SparseDenseMatMulKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 3, 1));
    const TensorDesc &idx = def.inputs[0], &vals = def.inputs[1], &b = def.inputs[2], &o = def.outputs[0];
    auto k = std::make_unique<SparseDenseMatMulKernel>();
    std::vector<int64_t> a;
    NPU_RETURN_IF_ERROR(def.attrs.IntList("a_shape", &a));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adjoint_a", false, &k->adj_a_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adjoint_b", false, &k->adj_b_));
    if (idx.dtype != kInt32 && idx.dtype != kInt64) return Error("a_indices must be int32 or int64");
    if (vals.dtype != b.dtype || o.dtype != b.dtype) return Error("a_values, b and the output must share one dtype");
    if (a.size() != 2 || a[0] < 0 || a[1] < 0 || b.dims.size() != 2 || vals.dims.size() != 1 ||
        idx.dims != Dims{vals.dims[0], 2})
      return Error("a_indices ", ShapeString(idx.dims), ", a_values ", ShapeString(vals.dims), ", a_shape ",
                   ShapeString(a), " and b ", ShapeString(b.dims), " do not describe a matrix product");
    k->outer_ = k->adj_a_ ? a[1] : a[0];
    k->inner_ = k->adj_a_ ? a[0] : a[1];
    k->right_ = k->adj_b_ ? b.dims[0] : b.dims[1];
    if ((k->adj_b_ ? b.dims[1] : b.dims[0]) != k->inner_)
      return Error("inner dimensions differ: a_shape ", ShapeString(a), ", b ", ShapeString(b.dims));
    if (o.dims != Dims{k->outer_, k->right_}) return Error("output must have shape [", k->outer_, ",", k->right_, "]");
    k->nnz_ = vals.dims[0];
    k->index_dtype_ = idx.dtype;
    k->dtype_ = b.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    switch (ComputeTypeOf(dtype_)) {
      case ComputeType::kInt64: return Run<int64_t>(args);
      case ComputeType::kDouble: return Run<double>(args);
      default: return Run<float>(args);
    }
  }

 private:
  template <class T>
  Status Run(const KernelArgs& args) const {
    const int64_t size = outer_ * right_;
    if (size == 0) return Status::Ok();
    std::vector<T> acc(size, T(0));
    if (nnz_ > 0 && inner_ * right_ > 0) {
      std::vector<int64_t> idx(2 * nnz_);
      std::vector<T> vals(nnz_), b(inner_ * right_);
      Load<int64_t>(index_dtype_, args.in(0), 2 * nnz_, idx.data());
      Load<T>(dtype_, args.in(1), nnz_, vals.data());
      Load<T>(dtype_, args.in(2), inner_ * right_, b.data());
      // op(B)[k, n]: B is [inner, right], or [right, inner] read transposed.
      const int64_t k_stride = adj_b_ ? 1 : right_, n_stride = adj_b_ ? inner_ : 1;
      const bool bf16 = dtype_ == kBFloat16;
      auto round = [](T x) {
        if constexpr (std::is_same_v<T, float>) return BFloat16ToFloat(FloatToBFloat16(x));
        else return x;
      };
      for (int64_t i = 0; i < nnz_; ++i) {
        const int64_t m = idx[2 * i + (adj_a_ ? 1 : 0)], kk = idx[2 * i + (adj_a_ ? 0 : 1)];
        if (kk < 0 || kk >= inner_)
          return InvalidArgument("k (", kk, ") from index[", i, ",", adj_a_ ? 0 : 1, "] out of bounds (>=", inner_, ")");
        if (m < 0 || m >= outer_)
          return InvalidArgument("m (", m, ") from index[", i, ",", adj_a_ ? 1 : 0, "] out of bounds (>=", outer_, ")");
        T* row = acc.data() + m * right_;
        const T* src = b.data() + kk * k_stride;
        for (int64_t n = 0; n < right_; ++n) {
          if constexpr (std::is_integral_v<T>)   // wraps, as TF's int32 arithmetic in practice
            row[n] = static_cast<T>(uint64_t(row[n]) + uint64_t(vals[i]) * uint64_t(src[n * n_stride]));
          else if (bf16)
            row[n] = round(row[n] + round(vals[i] * src[n * n_stride]));
          else
            row[n] += vals[i] * src[n * n_stride];
        }
      }
    }
    Store<T>(dtype_, acc.data(), size, args.out(0));
    return Status::Ok();
  }

  bool adj_a_ = false, adj_b_ = false;
  int64_t outer_ = 0, inner_ = 0, right_ = 0, nnz_ = 0;
  int index_dtype_ = kInt64, dtype_ = kFloat;
};

class SparseToDenseKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 3, 1));
    const TensorDesc &idx = def.inputs[0], &vals = def.inputs[1], &dflt = def.inputs[2], &o = def.outputs[0];
    auto k = std::make_unique<SparseToDenseKernel>();
    NPU_RETURN_IF_ERROR(def.attrs.IntList("output_shape", &k->shape_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("validate_indices", true, &k->validate_));
    if (idx.dtype != kInt32 && idx.dtype != kInt64) return Error("sparse_indices must be int32 or int64");
    if (vals.dtype != o.dtype || dflt.dtype != o.dtype) return Error("values, default_value and output must share one dtype");
    if (idx.dims.size() > 2) return Error("sparse_indices should be a scalar, vector, or matrix, got ", ShapeString(idx.dims));
    k->n_ = idx.dims.empty() ? 1 : idx.dims[0];
    k->rank_ = idx.dims.size() > 1 ? idx.dims[1] : 1;
    if (static_cast<int64_t>(k->shape_.size()) != k->rank_ || o.dims != k->shape_ ||
        std::any_of(k->shape_.begin(), k->shape_.end(), [](int64_t d) { return d < 0; }))
      return Error("output_shape ", ShapeString(k->shape_), " does not fit indices ", ShapeString(idx.dims),
                   " and output ", ShapeString(o.dims));
    if (!(vals.dims.empty() || vals.dims == Dims{k->n_}) || !dflt.dims.empty())
      return Error("sparse_values ", ShapeString(vals.dims), " must be [] or [", k->n_, "] and default_value a scalar");
    k->scalar_values_ = vals.dims.empty();
    k->index_dtype_ = idx.dtype;
    k->elem_ = DTypeSize(o.dtype);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<int64_t> idx(n_ * rank_);
    Load<int64_t>(index_dtype_, args.in(0), n_ * rank_, idx.data());
    std::vector<int64_t> at(n_);
    const Dims strides = RowMajorStrides(shape_);
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t* row = idx.data() + i * rank_;
      at[i] = 0;
      for (int64_t d = 0; d < rank_; ++d) {
        if (row[d] < 0 || row[d] >= shape_[d]) {
          if (validate_) return InvalidArgument("indices[", i, "] = ", Row(row), " is out of bounds: need 0 <= index < ", ShapeString(shape_));
          return InvalidArgument("Indices are not valid (out of bounds).  Shape: ", ShapeString(shape_));
        }
        at[i] += row[d] * strides[d];
      }
      if (validate_ && i > 0) {   // strictly increasing in row-major order
        const int c = Compare(row - rank_, row);
        if (c >= 0) return InvalidArgument("indices[", i, "] = ", Row(row), c > 0 ? " is out of order" : " is repeated");
      }
    }
    const int64_t size = NumElements(shape_);
    const char* dflt = args.in<char>(2);
    char* o = args.out<char>(0);
    for (int64_t j = 0; j < size; ++j) std::memcpy(o + j * elem_, dflt, elem_);
    const char* vals = args.in<char>(1);
    for (int64_t i = 0; i < n_; ++i) std::memcpy(o + at[i] * elem_, vals + (scalar_values_ ? 0 : i) * elem_, elem_);
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }
  // -1, 0, 1 as index row a is before, equal to, after row b (lexicographically).
  int Compare(const int64_t* a, const int64_t* b) const {
    for (int64_t d = 0; d < rank_; ++d)
      if (a[d] != b[d]) return a[d] < b[d] ? -1 : 1;
    return 0;
  }
  std::string Row(const int64_t* row) const { return ShapeString(Dims(row, row + rank_)); }

  Dims shape_;
  bool validate_ = true, scalar_values_ = false;
  int64_t n_ = 0, rank_ = 1;
  int index_dtype_ = kInt64, elem_ = 4;
};

void RegisterAll() {
  RegisterKernel("SparseTensorDenseMatMul", SparseDenseMatMulKernel::Make);
  RegisterKernel("SparseToDense", SparseToDenseKernel::Make);
}

StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
