// NPU kernels for ops whose output shape depends on input values: Where, Unique(V2),
// UniqueWithCounts(V2), DynamicPartition, (Parallel)DynamicStitch, ListDiff, Segment{Sum,Mean,
// Max,Min,Prod}, SparseSegment{Sum,Mean,SqrtN}, SparseSegment{Sum,Mean,SqrtN}GradV2 (the sparse
// gradients), (Combined)NonMaxSuppression{,V2,V3,V4,V5,WithOverlaps}, {Dense,Sparse,Ragged}CountSparseOutput
// and {Sparse,Ragged}Bincount.
//
// A compiled graph-engine model has static shapes, so these ops cannot be graph-engine ops: the
// partitioner leaves them out of clusters (they are not in the registry) and TF runs them here,
// as NPU kernels between clusters. Device memory of the simulated NPU is host memory: each kernel
// waits for the work queued on its NPU stream, reads its inputs on the host, learns the output
// shapes and allocates and writes its outputs (int32 tensors live in host memory on the NPU, as
// TF's convention for non-CPU devices). A real NPU would compute the sizes with a device kernel
// and copy them to the host here.
//
// Semantics, checks and messages are those of TF's CPU kernels (where_op.cc, unique_op.cc,
// dynamic_partition_op.cc, dynamic_stitch_op.cc, listdiff_op.cc, segment_reduction_ops_impl.h,
// non_max_suppression_op.cc): Unique orders by first occurrence; Where lists coordinates in
// row-major order as int64; Segment* require sorted ids; NMS visits boxes by score, ties by
// index. Reductions of float16/bfloat16 accumulate in float, of integers in wrapping int64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
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
#include "tensorflow/core/util/util.h"

namespace npu_tf {
namespace {

using tensorflow::DataType;
using tensorflow::DataTypeToEnum;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::TensorShapeUtils;

void SetIndex(Tensor* t, int64_t i, int64_t v) {
  if (t->dtype() == tensorflow::DT_INT32) t->flat<int32_t>()(i) = static_cast<int32_t>(v);
  else t->flat<int64_t>()(i) = v;
}

// ---- Where ----------------------------------------------------------------------------------

template <typename T>
class WhereOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor& x = c->input(0);
    const auto v = x.flat<T>();
    const int rank = x.dims();
    if (rank < 1 || rank > 8) return Invalid("WhereOp : Unhandled input dimensions: ", rank);   // as TF's CPU
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < v.size(); ++i)
      if (v(i) != T(0)) hits.push_back(i);
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({static_cast<int64_t>(hits.size()), rank}), &out));
    auto o = out->matrix<int64_t>();
    for (size_t h = 0; h < hits.size(); ++h) {
      int64_t rest = hits[h];
      for (int d = rank - 1; d >= 0; --d) {   // row-major coordinates of the flat position
        o(h, d) = rest % x.dim_size(d);
        rest /= x.dim_size(d);
      }
    }
    return absl::OkStatus();
  }
};

// ---- Unique, UniqueV2, UniqueWithCounts, UniqueWithCountsV2, ListDiff -----------------------

// Elements compare with == (so -0 equals 0 and each NaN is unique, as TF's hash map); the hash
// goes through double, where equal values hash alike.
template <typename T>
double HashValue(T v) {
  if constexpr (std::is_integral_v<T>) return static_cast<double>(v);
  else return static_cast<double>(static_cast<float>(v));
}

template <typename T>
struct ElementHash {
  size_t operator()(const T& v) const { return std::hash<double>()(HashValue(v)); }
};

// x viewed as [outer, n, inner]: slice i is x[:, i, :]; slices are unique by content.
template <typename T>
class UniqueOp : public HostKernel {
 public:
  explicit UniqueOp(OpKernelConstruction* c) : HostKernel(c) {
    counts_ = c->num_outputs() == 3;
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor& x = c->input(0);
    int64_t axis = -1;                     // -1: x must be a vector (Unique, or an empty axis)
    if (c->num_inputs() == 2) {
      const Tensor& a = c->input(1);
      if (a.NumElements() > 1)
        return Invalid("axis expects a 1D vector with 1 element: axis.shape = ", a.shape().DebugString());
      if (a.NumElements() == 1) {
        axis = IndexAt(a, 0);
        if (axis < 0) axis += x.dims();
        if (axis < 0 || axis >= x.dims()) return Invalid("axis has to be between [0, ", x.dims(), ")");
      }
    }
    if (axis < 0) {
      if (!TensorShapeUtils::IsVector(x.shape())) return Invalid("unique expects a 1D vector.");
      axis = 0;
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim_size(d);
    for (int d = axis + 1; d < x.dims(); ++d) inner *= x.dim_size(d);
    const int64_t n = x.dim_size(axis);
    const T* data = x.flat<T>().data();
    auto at = [&](int64_t o, int64_t i, int64_t k) { return data[(o * n + i) * inner + k]; };
    auto hash = [&](int64_t i) {
      size_t h = 0;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k) h = h * 1000003u ^ ElementHash<T>()(at(o, i, k));
      return h;
    };
    auto equal = [&](int64_t i, int64_t j) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k)
          if (!(at(o, i, k) == at(o, j, k))) return false;
      return true;
    };
    std::unordered_map<int64_t, int64_t, decltype(hash), decltype(equal)> first(16, hash, equal);
    std::vector<int64_t> idx(n), uniques, counts;
    for (int64_t i = 0; i < n; ++i) {
      auto [it, fresh] = first.emplace(i, static_cast<int64_t>(uniques.size()));
      if (fresh) {
        uniques.push_back(i);
        counts.push_back(0);
      }
      idx[i] = it->second;
      ++counts[it->second];
    }
    const int64_t u = static_cast<int64_t>(uniques.size());
    TensorShape y_shape = x.shape();
    TF_RETURN_IF_ERROR(y_shape.SetDimWithStatus(axis, u));
    Tensor *y = nullptr, *idx_out = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, y_shape, &y));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({n}), &idx_out));
    T* yd = y->flat<T>().data();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < u; ++j)
        for (int64_t k = 0; k < inner; ++k) yd[(o * u + j) * inner + k] = at(o, uniques[j], k);
    for (int64_t i = 0; i < n; ++i) SetIndex(idx_out, i, idx[i]);
    if (counts_) {
      Tensor* count = nullptr;
      TF_RETURN_IF_ERROR(c->allocate_output(2, TensorShape({u}), &count));
      for (int64_t j = 0; j < u; ++j) SetIndex(count, j, counts[j]);
    }
    return absl::OkStatus();
  }

 private:
  bool counts_ = false;
};

// The elements of x not in y, in x's order (duplicates kept), and their positions in x.
template <typename T>
class ListDiffOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &x = c->input(0), &y = c->input(1);
    if (!TensorShapeUtils::IsVector(x.shape())) return Invalid("x should be a 1D vector.");
    if (!TensorShapeUtils::IsVector(y.shape())) return Invalid("y should be a 1D vector.");
    const auto xv = x.vec<T>(), yv = y.vec<T>();
    std::unordered_set<T, ElementHash<T>> drop(yv.data(), yv.data() + yv.size());
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < xv.size(); ++i)
      if (drop.find(xv(i)) == drop.end()) keep.push_back(i);
    const int64_t k = static_cast<int64_t>(keep.size());
    Tensor *out = nullptr, *idx = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({k}), &out));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({k}), &idx));
    for (int64_t j = 0; j < k; ++j) {
      out->vec<T>()(j) = xv(keep[j]);
      SetIndex(idx, j, keep[j]);
    }
    return absl::OkStatus();
  }
};

// ---- DynamicPartition, DynamicStitch, ParallelDynamicStitch ---------------------------------

// Bytes of one slice of `data` below its first `prefix` dimensions.
int64_t SliceBytes(const Tensor& data, int prefix) {
  int64_t n = 1;
  for (int d = prefix; d < data.dims(); ++d) n *= data.dim_size(d);
  return n * tensorflow::DataTypeSize(data.dtype());
}

class DynamicPartitionOp : public HostKernel {
 public:
  explicit DynamicPartitionOp(OpKernelConstruction* c) : HostKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("num_partitions", &num_partitions_));
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &data = c->input(0), &partitions = c->input(1);
    if (!TensorShapeUtils::StartsWith(data.shape(), partitions.shape()))
      return Invalid("data.shape must start with partitions.shape, got data.shape = ",
                     data.shape().DebugString(), ", partitions.shape = ", partitions.shape().DebugString());
    const auto p = partitions.flat<int32_t>();
    std::vector<int64_t> sizes(num_partitions_, 0);
    for (int64_t i = 0; i < p.size(); ++i) {
      if (p(i) < 0 || p(i) >= num_partitions_)
        return Invalid("partitions", tensorflow::SliceDebugString(partitions.shape(), i), " = ", p(i),
                       " is not in [0, ", num_partitions_, ")");
      ++sizes[p(i)];
    }
    tensorflow::OpOutputList outputs;
    TF_RETURN_IF_ERROR(c->output_list("outputs", &outputs));
    std::vector<Tensor*> outs(num_partitions_);
    for (int k = 0; k < num_partitions_; ++k) {
      TensorShape shape({sizes[k]});
      for (int d = partitions.dims(); d < data.dims(); ++d) shape.AddDim(data.dim_size(d));
      TF_RETURN_IF_ERROR(outputs.allocate(k, shape, &outs[k]));
    }
    const int64_t bytes = SliceBytes(data, partitions.dims());
    const char* src = static_cast<const char*>(data.data());
    std::vector<int64_t> next(num_partitions_, 0);
    for (int64_t i = 0; i < p.size() && bytes > 0; ++i)
      std::memcpy(static_cast<char*>(outs[p(i)]->data()) + next[p(i)]++ * bytes, src + i * bytes, bytes);
    return absl::OkStatus();
  }

 private:
  int num_partitions_ = 0;
};

// merged[indices[m][i]] = data[m][i] in order (a later index overwrites an earlier one); rows no
// index names are zeros.
class DynamicStitchOp : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    tensorflow::OpInputList indices, data;
    TF_RETURN_IF_ERROR(c->input_list("indices", &indices));
    TF_RETURN_IF_ERROR(c->input_list("data", &data));
    int64_t max_index = -1;
    for (int m = 0; m < indices.size(); ++m) {
      if (!TensorShapeUtils::StartsWith(data[m].shape(), indices[m].shape()))
        return Invalid("data[", m, "].shape = ", data[m].shape().DebugString(),
                       " does not start with indices[", m, "].shape = ", indices[m].shape().DebugString());
      if (m > 0 && SliceBytes(data[m], indices[m].dims()) != SliceBytes(data[0], indices[0].dims()))
        return Invalid("Need data[0].shape[", indices[0].dims(), ":] = data[", m, "].shape[", indices[m].dims(),
                       ":], got data[0].shape = ", data[0].shape().DebugString(), ", data[", m,
                       "].shape = ", data[m].shape().DebugString(), ", indices[0].shape = ",
                       indices[0].shape().DebugString(), ", indices[", m, "].shape = ",
                       indices[m].shape().DebugString());
      const auto v = indices[m].flat<int32_t>();
      for (int64_t i = 0; i < v.size(); ++i) max_index = std::max<int64_t>(max_index, v(i));
    }
    TensorShape shape({max_index + 1});
    for (int d = indices[0].dims(); d < data[0].dims(); ++d) shape.AddDim(data[0].dim_size(d));
    Tensor* merged = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, shape, &merged));
    const int64_t bytes = SliceBytes(data[0], indices[0].dims());
    char* dst = static_cast<char*>(merged->data());
    if (merged->TotalBytes() > 0) std::memset(dst, 0, merged->TotalBytes());
    for (int m = 0; m < indices.size(); ++m) {
      const auto v = indices[m].flat<int32_t>();
      const char* src = static_cast<const char*>(data[m].data());
      for (int64_t i = 0; i < v.size(); ++i) {
        if (v(i) < 0 || v(i) > max_index) return Invalid("indices[", i, "] is out of range");
        if (bytes > 0) std::memcpy(dst + v(i) * bytes, src + i * bytes, bytes);
      }
    }
    return absl::OkStatus();
  }
};

// ---- Segment{Sum,Mean,Max,Min,Prod}, SparseSegment{Sum,Mean,SqrtN} --------------------------

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kSqrtN };

template <typename T>
using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, float>;

template <typename A>
A Combine(Reduce r, A acc, A v) {
  switch (r) {
    case Reduce::kMax: return v < acc ? acc : v;   // Eigen's maxi/mini
    case Reduce::kMin: return acc < v ? acc : v;
    case Reduce::kProd:
      if constexpr (std::is_integral_v<A>) return static_cast<A>(uint64_t(acc) * uint64_t(v));
      else return acc * v;
    default:
      if constexpr (std::is_integral_v<A>) return static_cast<A>(uint64_t(acc) + uint64_t(v));
      else return acc + v;
  }
}

// Sorted segments: rows `rows[i]` of data go into output row seg[i]; TF's checks in its order.
// `rows` empty: row i of data (Segment*), else the sparse indices.
template <typename T>
absl::Status SegmentReduce(OpKernelContext* c, Reduce r, const Tensor& data, const Tensor* indices,
                           const Tensor& seg) {
  const int64_t k = seg.NumElements();
  const int64_t out_rows = k > 0 ? IndexAt(seg, k - 1) + 1 : 0;
  if (out_rows < 0) return Invalid("segment ids must be >= 0");
  const int64_t in_rows = data.dim_size(0);
  int64_t inner = 1;
  for (int d = 1; d < data.dims(); ++d) inner *= data.dim_size(d);
  TensorShape shape = data.shape();
  TF_RETURN_IF_ERROR(shape.SetDimWithStatus(0, out_rows));
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(c->allocate_output(0, shape, &out));
  using A = Acc<T>;
  const T* x = data.flat<T>().data();
  T* y = out->flat<T>().data();
  const A empty = r == Reduce::kProd ? A(1) : A(0);   // TF's value of a segment no id names
  std::fill(y, y + out_rows * inner, static_cast<T>(empty));
  std::vector<A> acc(inner);
  for (int64_t start = 0, end = 1; start < k; start = end++) {
    const int64_t id = IndexAt(seg, start);
    while (end < k && IndexAt(seg, end) == id) ++end;
    if (end < k && IndexAt(seg, end) < id) return Invalid("segment ids are not increasing");
    if (id < 0 || id >= out_rows)
      return Invalid("Segment id ", id, " out of range [0, ", out_rows,
                     "), possibly because 'segment_ids' input is not sorted.");
    for (int64_t i = start; i < end; ++i) {
      const int64_t row = indices ? IndexAt(*indices, i) : i;
      if (row < 0 || row >= in_rows)
        return Invalid("Bad: indices[", i, "] == ", row, " out of range [0, ", in_rows, ")");
      for (int64_t j = 0; j < inner; ++j) {
        const A v = static_cast<A>(x[row * inner + j]);
        acc[j] = i == start ? v : Combine(r, acc[j], v);
      }
    }
    const int64_t n = end - start;
    for (int64_t j = 0; j < inner; ++j) {
      A v = acc[j];
      if (r == Reduce::kMean) v = v / static_cast<A>(n);
      if constexpr (!std::is_integral_v<A>)
        if (r == Reduce::kSqrtN) v = v / std::sqrt(static_cast<A>(n));
      y[id * inner + j] = static_cast<T>(v);
    }
  }
  return absl::OkStatus();
}

template <typename T>
class SegmentOp : public HostKernel {
 public:
  SegmentOp(OpKernelConstruction* c, Reduce r) : HostKernel(c), r_(r) {}

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &data = c->input(0), &seg = c->input(1);
    if (!TensorShapeUtils::IsVector(seg.shape())) return Invalid("segment_ids should be a vector.");
    if (data.dims() == 0 || seg.NumElements() != data.dim_size(0))
      return Invalid("segment_ids should be the same size as dimension 0 of input.");
    return SegmentReduce<T>(c, r_, data, nullptr, seg);
  }

 private:
  Reduce r_;
};

template <typename T>
class SparseSegmentOp : public HostKernel {
 public:
  SparseSegmentOp(OpKernelConstruction* c, Reduce r) : HostKernel(c), r_(r) {}

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &data = c->input(0), &indices = c->input(1), &seg = c->input(2);
    if (!TensorShapeUtils::IsVector(indices.shape())) return Invalid("indices should be a vector.");
    if (!TensorShapeUtils::IsVector(seg.shape())) return Invalid("segment_ids should be a vector.");
    if (indices.NumElements() != seg.NumElements())
      return Invalid("segment_ids and indices should have same size.");
    if (data.dims() < 1) return Invalid("Shape must be at least rank 1 but is rank 0");
    return SegmentReduce<T>(c, r_, data, &indices, seg);
  }

 private:
  Reduce r_;
};

// SparseSegment{Sum,Mean,SqrtN}GradV2: the gradient rows of the distinct indices only, sorted:
// output[k] = sum over i with indices[i] == unique[k] of grad[segment_ids[i]] * scale.
template <typename T>
class SparseSegmentGradV2Op : public HostKernel {
 public:
  SparseSegmentGradV2Op(OpKernelConstruction* c, Reduce r) : HostKernel(c), r_(r) {}

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &grad = c->input(0), &indices = c->input(1), &seg = c->input(2), &dim0 = c->input(3);
    if (!TensorShapeUtils::IsScalar(dim0.shape())) return Invalid("dense_output_dim0 should be a scalar.");
    if (!TensorShapeUtils::IsVector(indices.shape())) return Invalid("indices should be a vector.");
    if (!TensorShapeUtils::IsVector(seg.shape())) return Invalid("segment_ids should be a vector.");
    if (indices.NumElements() != seg.NumElements()) return Invalid("segment_ids and indices should have same size.");
    if (grad.dims() < 1) return Invalid("grad must be at least 1-D");
    const int64_t m = grad.dim_size(0), out_dim0 = dim0.scalar<int32_t>()();
    if (out_dim0 < 0) return Invalid("dense_output_dim0 (", out_dim0, ") must be non-negative");
    // Without output rows TF checks no id: the outputs are empty
    const int64_t k = out_dim0 == 0 ? 0 : seg.NumElements();
    if (k > 0 && IndexAt(seg, k - 1) >= m) return Invalid("Invalid number of segments");
    std::vector<int64_t> count(m, 0);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t id = IndexAt(seg, i), at = IndexAt(indices, i);
      if (id < 0 || id >= m) return Invalid("Segment id ", id, " out of range [0, ", m, ").");
      if (at < 0 || at >= out_dim0) return Invalid("Index ", at, " out of range [0, ", out_dim0, ").");
      ++count[id];
    }
    std::vector<int64_t> unique(k);
    for (int64_t i = 0; i < k; ++i) unique[i] = IndexAt(indices, i);
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    const int64_t u = static_cast<int64_t>(unique.size());
    int64_t inner = 1;
    for (int d = 1; d < grad.dims(); ++d) inner *= grad.dim_size(d);
    TensorShape shape = grad.shape();
    TF_RETURN_IF_ERROR(shape.SetDimWithStatus(0, u));
    Tensor *out = nullptr, *out_idx = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, shape, &out));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({u}), &out_idx));
    std::vector<float> acc(u * inner, 0.0f);
    const T* g = grad.flat<T>().data();
    for (int64_t i = 0; i < k; ++i) {   // in index order, as TF's CPU kernel
      const int64_t id = IndexAt(seg, i);
      const int64_t row = std::lower_bound(unique.begin(), unique.end(), IndexAt(indices, i)) - unique.begin();
      const float n = static_cast<float>(count[id]);
      const float scale = r_ == Reduce::kMean ? 1.0f / n : r_ == Reduce::kSqrtN ? 1.0f / std::sqrt(n) : 1.0f;
      for (int64_t j = 0; j < inner; ++j) acc[row * inner + j] += static_cast<float>(g[id * inner + j]) * scale;
    }
    T* o = out->flat<T>().data();
    for (int64_t j = 0; j < u * inner; ++j) o[j] = static_cast<T>(acc[j]);
    for (int64_t j = 0; j < u; ++j) SetIndex(out_idx, j, unique[j]);
    return absl::OkStatus();
  }

 private:
  Reduce r_;
};

// ---- DenseCountSparseOutput, SparseCountSparseOutput, RaggedCountSparseOutput --------------

// Per-batch bincounts as a SparseTensor (TF's count_ops.cc): entries sorted by batch, then value;
// values >= maxlength (when >= 0; -1 is none) are dropped; the dense width is maxlength if >= 0,
// else max(largest value + 1, minlength).
enum class CountForm { kDense, kSparse, kRagged };   // which input the values come from

template <typename W>
class CountSparseOutputOp : public HostKernel {
 public:
  CountSparseOutputOp(OpKernelConstruction* c, CountForm form) : HostKernel(c), form_(form) {
    OP_REQUIRES_OK(c, c->GetAttr("minlength", &minlength_));
    OP_REQUIRES_OK(c, c->GetAttr("maxlength", &maxlength_));
    OP_REQUIRES_OK(c, c->GetAttr("binary_output", &binary_));
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const int values_at = form_ == CountForm::kDense ? 0 : 1;
    const Tensor& values = c->input(values_at);
    const Tensor& weights = c->input(form_ == CountForm::kDense ? 1 : form_ == CountForm::kSparse ? 3 : 2);
    std::vector<int64_t> batch_of(values.NumElements(), 0);
    int64_t batches = 1;
    bool is_1d = false;
    if (form_ == CountForm::kDense) {
      if (values.dims() != 1 && values.dims() != 2)
        return Invalid("Input must be a 1 or 2-dimensional tensor. Got: ", values.shape().DebugString());
      is_1d = values.dims() == 1;
      if (!is_1d) {
        if (values.dim_size(0) == 0) return Invalid("Invalid input: Shapes dimension cannot be 0.");
        batches = values.dim_size(0);
        for (size_t i = 0; i < batch_of.size(); ++i) batch_of[i] = i / values.dim_size(1);
      }
    } else if (form_ == CountForm::kSparse) {
      TF_RETURN_IF_ERROR(SparseBatches(c->input(0), values, c->input(2), &batch_of, &batches, &is_1d));
    } else {
      TF_RETURN_IF_ERROR(RaggedBatches(c->input(0), values, &batch_of, &batches));
    }
    for (int64_t i = 0; i < values.NumElements(); ++i)
      if (IndexAt(values, i) < 0) return Invalid("Input values must all be non-negative");
    const bool weighted = weights.NumElements() > 0;
    const char* what = form_ == CountForm::kDense ? "data" : "values";
    if (weighted && weights.shape() != values.shape())
      return Invalid("Weights and ", what, " must have the same shape. Weight shape: ", weights.shape().DebugString(),
                     "; ", what, " shape: ", values.shape().DebugString());
    std::vector<std::map<int64_t, W>> counts(batches);
    int64_t max_value = 0;
    for (int64_t i = 0; i < values.NumElements(); ++i) {
      const int64_t v = IndexAt(values, i);
      if (maxlength_ >= 0 && v >= maxlength_) continue;
      W& bin = counts[batch_of[i]][v];
      bin = binary_ ? W(1) : weighted ? W(bin + weights.flat<W>()(i)) : W(bin + W(1));
      max_value = std::max(max_value, v);
    }
    const int64_t width = maxlength_ >= 0 ? maxlength_ : std::max<int64_t>(max_value + 1, minlength_);
    int64_t total = 0;
    for (const auto& m : counts) total += static_cast<int64_t>(m.size());
    Tensor *indices = nullptr, *out_values = nullptr, *shape = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({total, is_1d ? 1 : 2}), &indices));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({total}), &out_values));
    TF_RETURN_IF_ERROR(c->allocate_output(2, TensorShape({is_1d ? 1 : 2}), &shape));
    auto idx = indices->matrix<int64_t>();
    int64_t at = 0;
    for (int64_t b = 0; b < batches; ++b)
      for (const auto& [v, w] : counts[b]) {
        if (!is_1d) idx(at, 0) = b;
        idx(at, is_1d ? 0 : 1) = v;
        out_values->vec<W>()(at++) = w;
      }
    if (is_1d) {
      shape->vec<int64_t>()(0) = width;
    } else {
      shape->vec<int64_t>()(0) = batches;
      shape->vec<int64_t>()(1) = width;
    }
    return absl::OkStatus();
  }

 private:
  // A SparseTensor's batch (its first index column; one batch when it is 1-D), checked.
  static absl::Status SparseBatches(const Tensor& indices, const Tensor& values, const Tensor& shape,
                                    std::vector<int64_t>* batch_of, int64_t* batches, bool* is_1d) {
    if (indices.dims() != 2)
      return Invalid("Input indices must be a 2-dimensional tensor. Got: ", indices.shape().DebugString());
    if (values.dims() != 1) return Invalid("Input values must be a vector. Got: ", values.shape().DebugString());
    if (shape.dims() != 1) return Invalid("Input shape must be a vector. Got: ", shape.shape().DebugString());
    if (values.dim_size(0) != indices.dim_size(0))
      return Invalid("Number of values must match first dimension of indices.Got ", values.dim_size(0),
                     " values, indices shape: ", indices.shape().DebugString());
    if (shape.dim_size(0) != indices.dim_size(1))
      return Invalid("Number of dimensions must match second dimension of indices.Got ", shape.dim_size(0),
                     " dimensions, indices shape: ", indices.shape().DebugString());
    if (shape.NumElements() == 0) return Invalid("The shape argument requires at least one element.");
    const auto ix = indices.matrix<int64_t>();
    const auto dims = shape.vec<int64_t>();
    for (int64_t i = 0; i < ix.dimension(0); ++i)
      for (int64_t j = 0; j < ix.dimension(1); ++j)
        if (ix(i, j) < 0 || ix(i, j) >= dims(j))
          return Invalid("Invalid index value at ", i, ": dimension ", j, " has value ", ix(i, j),
                         " which is not in [0, ", dims(j), ") (as given by dense shape ", shape.DebugString());
    *is_1d = shape.NumElements() == 1;
    *batches = *is_1d ? 1 : dims(0);
    if (*batches <= 0 || *batches >= std::numeric_limits<int>::max())
      return Invalid("Cannot allocate ", *batches, " batches, is the dense shape too wide?");
    for (int64_t i = 0; i < ix.dimension(0); ++i) (*batch_of)[i] = *is_1d ? 0 : ix(i, 0);
    return absl::OkStatus();
  }

  // A RaggedTensor's rows from its splits [0, ..., n]; empty rows are batches too.
  static absl::Status RaggedBatches(const Tensor& splits, const Tensor& values, std::vector<int64_t>* batch_of,
                                    int64_t* batches) {
    const auto sp = splits.flat<int64_t>();
    const int64_t n = values.NumElements();
    *batches = splits.NumElements() - 1;
    if (*batches <= 0) return Invalid("Must provide at least 2 elements for the splits argument");
    if (sp(0) != 0) return Invalid("Splits must start with 0, not with ", sp(0));
    if (sp(*batches) != n)
      return Invalid("Splits must end with the number of values, got ", sp(*batches), " instead of ", n);
    int64_t b = 0;
    for (int64_t i = 0; i < n; ++i) {
      while (b <= *batches && i >= sp(b)) ++b;    // TF's walk: the row whose split passes i
      if (b > *batches) return Invalid("Splits must be non-decreasing, got ", splits.DebugString());
      (*batch_of)[i] = b - 1;
    }
    return absl::OkStatus();
  }

  CountForm form_;
  int64_t minlength_ = -1, maxlength_ = -1;
  bool binary_ = false;
};

// ---- SparseBincount, RaggedBincount ---------------------------------------------------------

// Bincounts of a SparseTensor's or RaggedTensor's rows into a dense [rows, size] (a SparseTensor
// of rank 1: one [size] row), as TF's bincount_op.cc: values >= size are dropped, weights are
// summed (1 without weights; binary_output: 1 per bin hit). Negative values are an error, except
// in a rank-2 SparseTensor, where TF drops them. Weights of another size than the values are an
// InvalidArgumentError here (TF's kernel reads past them).
template <typename W>
class RowBincountOp : public HostKernel {
 public:
  RowBincountOp(OpKernelConstruction* c, bool sparse) : HostKernel(c), sparse_(sparse) {
    OP_REQUIRES_OK(c, c->GetAttr("binary_output", &binary_));
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor& values = c->input(1);
    const Tensor& size_t = c->input(sparse_ ? 3 : 2);
    const Tensor& weights = c->input(sparse_ ? 4 : 3);
    if (size_t.dims() != 0) return Invalid("Shape must be rank 0 but is rank ", size_t.dims());
    const int64_t size = IndexAt(size_t, 0);
    if (size < 0) return Invalid("size (", size, ") must be non-negative");
    const int64_t n = values.NumElements();
    std::vector<int64_t> batch_of(n, 0);
    int64_t rows = 1;
    bool one_row = false;      // a rank-1 SparseTensor: the output is [size]
    bool drop_negative = false;
    if (sparse_) {
      TF_RETURN_IF_ERROR(SparseRows(c->input(0), values, c->input(2), &batch_of, &rows, &one_row));
      drop_negative = !one_row;
    } else {
      const Tensor& splits = c->input(0);
      if (splits.NumElements() == 0) return Invalid("Splits must be non-empty");
      const auto sp = splits.flat<int64_t>();
      rows = splits.NumElements() - 1;
      if (sp(0) != 0) return Invalid("Splits must start with 0, not with ", sp(0));
      if (sp(rows) != n) return Invalid("Splits must end with the number of values, got ", sp(rows), " instead of ", n);
      for (int64_t i = 0, b = 0; i < n; ++i) {
        while (b <= rows && i >= sp(b)) ++b;
        if (b > rows) return Invalid("Splits must be non-decreasing, got ", splits.DebugString());
        batch_of[i] = b - 1;
      }
    }
    const bool weighted = weights.NumElements() > 0;
    // TF reads weights[i] for each value unchecked: longer weights are used as their prefix,
    // shorter ones would be read past their end
    if (weighted && (sparse_ ? weights.NumElements() != n : weights.NumElements() < n))
      return Invalid("Input indices and weights must have the same size.");
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, one_row ? TensorShape({size}) : TensorShape({rows, size}), &out));
    W* o = out->flat<W>().data();
    std::fill(o, o + out->NumElements(), W(0));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = IndexAt(values, i);
      if (v < 0 && !drop_negative)
        return Invalid(sparse_ ? "Input arr must be non-negative!" : "Input must be non-negative");
      if (v < 0 || v >= size) continue;
      W& bin = o[batch_of[i] * size + v];
      bin = binary_ ? W(1) : W(static_cast<Acc<W>>(bin) + (weighted ? static_cast<Acc<W>>(weights.flat<W>()(i)) : 1));
    }
    return absl::OkStatus();
  }

 private:
  // TF's SparseTensor validation, then each value's row (its first index; one row for rank 1).
  static absl::Status SparseRows(const Tensor& indices, const Tensor& values, const Tensor& shape,
                                 std::vector<int64_t>* batch_of, int64_t* rows, bool* one_row) {
    if (indices.dims() != 2) return Invalid("Sparse indices must be rank 2 but is rank ", indices.dims());
    if (values.dims() != 1) return Invalid("Sparse values must be rank 1 but is rank ", values.dims());
    if (shape.dims() != 1) return Invalid("Sparse shape must be rank 1 but is rank ", shape.dims());
    if (indices.dim_size(0) != values.dim_size(0))
      return Invalid("Number of elements in indices (", indices.dim_size(0), ") and values (", values.dim_size(0),
                     ") do not match");
    if (indices.dim_size(1) != shape.dim_size(0))
      return Invalid("Index rank (", indices.dim_size(1), ") and shape rank (", shape.dim_size(0), ") do not match");
    if (shape.NumElements() == 0) return Invalid("The shape argument requires at least one element.");
    const auto ix = indices.matrix<int64_t>();
    const auto dims = shape.vec<int64_t>();
    for (int64_t i = 0; i < ix.dimension(0); ++i)
      for (int64_t j = 0; j < ix.dimension(1); ++j)
        if (ix(i, j) < 0 || ix(i, j) >= dims(j)) {
          std::string tuple;
          for (int64_t k = 0; k < ix.dimension(1); ++k) absl::StrAppend(&tuple, k ? ", " : "", ix(i, k));
          return Invalid("Sparse index tuple indices[", i, ", :] = [", tuple, "] is out of bounds");
        }
    *one_row = shape.NumElements() == 1;
    *rows = *one_row ? 1 : dims(0);
    for (int64_t i = 0; i < ix.dimension(0); ++i) (*batch_of)[i] = *one_row ? 0 : ix(i, 0);
    return absl::OkStatus();
  }

  bool sparse_;
  bool binary_ = false;
};

// ---- NonMaxSuppression, V2, V3, V4, V5, WithOverlaps ---------------------------------------

// TF's IOU of boxes i and j (corners in either order); 0 when either box is empty.
float Iou(const float* b, int64_t i, int64_t j) {
  const float* p = b + 4 * i;
  const float* q = b + 4 * j;
  const float ymin_i = std::min(p[0], p[2]), xmin_i = std::min(p[1], p[3]);
  const float ymax_i = std::max(p[0], p[2]), xmax_i = std::max(p[1], p[3]);
  const float ymin_j = std::min(q[0], q[2]), xmin_j = std::min(q[1], q[3]);
  const float ymax_j = std::max(q[0], q[2]), xmax_j = std::max(q[1], q[3]);
  const float area_i = (ymax_i - ymin_i) * (xmax_i - xmin_i);
  const float area_j = (ymax_j - ymin_j) * (xmax_j - xmin_j);
  if (area_i <= 0 || area_j <= 0) return 0.0f;
  const float ih = std::max(std::min(ymax_i, ymax_j) - std::max(ymin_i, ymin_j), 0.0f);
  const float iw = std::max(std::min(xmax_i, xmax_j) - std::max(xmin_i, xmin_j), 0.0f);
  const float inter = ih * iw;
  return inter / (area_i + area_j - inter);
}

// The variants differ in their inputs and outputs only. Inputs: boxes (WithOverlaps: the
// [n, n] overlaps), scores, max_output_size, then the threshold (iou_threshold; an attr of
// version 1; overlap_threshold), score_threshold (versions 3-5, WithOverlaps; else none) and
// soft_nms_sigma (5). Outputs: selected_indices, selected_scores (5), valid_outputs (4, 5).
constexpr int kWithOverlaps = 0;   // the version number of NonMaxSuppressionWithOverlaps

template <typename T>
class NonMaxSuppressionOp : public HostKernel {
 public:
  NonMaxSuppressionOp(OpKernelConstruction* c, int version) : HostKernel(c), version_(version) {
    if (version == 1) OP_REQUIRES_OK(c, c->GetAttr("iou_threshold", &iou_attr_));
    if (version > 3) OP_REQUIRES_OK(c, c->GetAttr("pad_to_max_output_size", &pad_));
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &boxes = c->input(0), &scores = c->input(1);
    const Tensor& max_size = c->input(2);
    const bool overlaps = version_ == kWithOverlaps;
    if (!TensorShapeUtils::IsScalar(max_size.shape()))
      return Invalid("max_output_size must be 0-D, got shape ", max_size.shape().DebugString());
    static constexpr const char* kScalars[] = {"iou_threshold", "score_threshold", "soft_nms_sigma"};
    for (int a = 3; a < c->num_inputs(); ++a)
      if (!TensorShapeUtils::IsScalar(c->input(a).shape()))
        return Invalid(overlaps && a == 3 ? "overlap_threshold" : kScalars[a - 3], " must be 0-D, got shape ",
                       c->input(a).shape().DebugString());
    auto scalar = [&](int a) {
      const Tensor& t = c->input(a);
      return t.dtype() == tensorflow::DT_HALF ? static_cast<float>(t.scalar<Eigen::half>()()) : t.scalar<float>()();
    };
    const float threshold = version_ == 1 ? iou_attr_ : scalar(3);
    const bool has_score_threshold = version_ >= 3 || overlaps;
    const float score_threshold = has_score_threshold ? scalar(4) : std::numeric_limits<float>::lowest();
    const float sigma = version_ == 5 ? scalar(5) : 0.0f;
    if (!overlaps && !(threshold >= 0 && threshold <= 1)) return Invalid("iou_threshold must be in [0, 1]");
    if (version_ == 5 && !(sigma >= 0)) return Invalid("soft_nms_sigma_val must be >= 0");
    const char* what = overlaps ? "overlaps" : "boxes";
    if (boxes.dims() != 2) return Invalid(what, " must be 2-D", boxes.shape().DebugString());
    const int64_t n = boxes.dim_size(0);
    if (overlaps && boxes.dim_size(1) != n) return Invalid("overlaps must be square", boxes.shape().DebugString());
    if (!overlaps && boxes.dim_size(1) != 4)
      return Invalid("boxes must have 4 columns (Dimension must be 4 but is ", boxes.dim_size(1), ")");
    if (scores.dims() != 1) return Invalid("scores must be 1-D", scores.shape().DebugString());
    if (scores.dim_size(0) != n)
      return Invalid("scores has incompatible shape (Dimensions must be equal, but are ", n, " and ",
                     scores.dim_size(0), ")");
    const int64_t max_output = max_size.scalar<int32_t>()();
    if (max_output < 0) return Invalid("output size must be non-negative");

    std::vector<float> b(boxes.NumElements()), s(n);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(boxes.flat<T>()(i));
    for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(scores.flat<T>()(i));
    auto similarity = [&](int64_t i, int64_t j) { return overlaps ? b[i * n + j] : Iou(b.data(), i, j); };
    const bool soft = sigma > 0;
    const float scale = soft ? -0.5f / sigma : 0.0f;
    auto weight = [&](float sim) { return soft || sim <= threshold ? std::exp(scale * sim * sim) : 0.0f; };
    struct Candidate {
      int64_t index;
      float score;
      int64_t suppress_begin;
    };
    // Highest score first; equal scores: lower index first (TF's comparator).
    auto lower = [](const Candidate& x, const Candidate& y) {
      return (x.score == y.score && x.index > y.index) || x.score < y.score;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
    for (int64_t i = 0; i < n; ++i)
      if (s[i] > score_threshold) queue.push({i, s[i], 0});
    const int64_t limit = std::min(max_output, n);
    std::vector<int64_t> selected;
    std::vector<float> selected_scores;
    while (static_cast<int64_t>(selected.size()) < limit && !queue.empty()) {
      Candidate next = queue.top();
      queue.pop();
      const float original = next.score;
      bool hard = false;
      // Against the boxes selected since this candidate was last compared, newest first.
      for (int64_t j = static_cast<int64_t>(selected.size()) - 1; j >= next.suppress_begin; --j) {
        const float sim = similarity(next.index, selected[j]);
        next.score *= weight(sim);
        if (!soft && sim > threshold) {
          hard = true;
          break;
        }
        if (next.score <= score_threshold) break;
      }
      next.suppress_begin = static_cast<int64_t>(selected.size());
      if (hard) continue;
      if (next.score == original) {
        selected.push_back(next.index);
        selected_scores.push_back(next.score);
      } else if (next.score > score_threshold) {
        queue.push(next);   // soft-suppressed, still above the threshold: back in line
      }
    }
    const int64_t valid = static_cast<int64_t>(selected.size());
    const int64_t size = pad_ ? std::max(max_output, valid) : valid;
    Tensor* idx = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({size}), &idx));
    for (int64_t i = 0; i < size; ++i) idx->vec<int32_t>()(i) = i < valid ? static_cast<int32_t>(selected[i]) : 0;
    int next_out = 1;
    if (version_ == 5) {
      Tensor* sc = nullptr;
      TF_RETURN_IF_ERROR(c->allocate_output(next_out++, TensorShape({size}), &sc));
      for (int64_t i = 0; i < size; ++i) sc->vec<T>()(i) = static_cast<T>(i < valid ? selected_scores[i] : 0.0f);
    }
    if (version_ > 3) {
      Tensor* v = nullptr;
      TF_RETURN_IF_ERROR(c->allocate_output(next_out, TensorShape({}), &v));
      v->scalar<int32_t>()() = static_cast<int32_t>(valid);
    }
    return absl::OkStatus();
  }

 private:
  int version_;
  float iou_attr_ = 0.5f;
  bool pad_ = false;
};

// CombinedNonMaxSuppression: per batch and class, hard NMS of the boxes scoring above
// score_threshold (boxes [batch, anchors, q, 4] with q 1 or per class; scores [batch, anchors,
// classes]); the survivors of all classes are sorted by score and the best max_total_size kept,
// zero-padded, as TF's BatchedNonMaxSuppressionOp (the same priority queue and sort).
class CombinedNonMaxSuppressionOp : public HostKernel {
 public:
  explicit CombinedNonMaxSuppressionOp(OpKernelConstruction* c) : HostKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("pad_per_class", &pad_per_class_));
    OP_REQUIRES_OK(c, c->GetAttr("clip_boxes", &clip_boxes_));
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    const Tensor &boxes = c->input(0), &scores = c->input(1);
    static constexpr const char* kScalars[] = {"max_size_per_class", "max_total_size", "iou_threshold",
                                               "score_threshold"};
    for (int a = 2; a < 6; ++a)
      if (!TensorShapeUtils::IsScalar(c->input(a).shape()))
        return Invalid(kScalars[a - 2], " must be 0-D, got shape ", c->input(a).shape().DebugString());
    const int64_t per_class = c->input(2).scalar<int32_t>()(), total = c->input(3).scalar<int32_t>()();
    const float iou_threshold = c->input(4).scalar<float>()(), score_threshold = c->input(5).scalar<float>()();
    if (per_class <= 0) return Invalid("max_size_per_class must be positive");
    if (total <= 0) return Invalid("max_total_size must be > 0");
    if (!(iou_threshold >= 0 && iou_threshold <= 1)) return Invalid("iou_threshold must be in [0, 1]");
    if (boxes.dims() < 1 || scores.dims() < 1 || boxes.dim_size(0) != scores.dim_size(0))
      return Invalid("boxes and scores must have same batch size");
    if (boxes.dims() != 4) return Invalid("boxes must be 4-D", boxes.shape().DebugString());
    if (scores.dims() != 3) return Invalid("scores must be 3-D", scores.shape().DebugString());
    const int64_t batches = boxes.dim_size(0), n = boxes.dim_size(1), q = boxes.dim_size(2);
    const int64_t classes = scores.dim_size(2);
    if (q != 1 && q != classes) return Invalid("third dimension of boxes must be either 1 or num classes");
    if (boxes.dim_size(3) != 4) return Invalid("boxes must have 4 columns");
    if (scores.dim_size(1) != n) return Invalid("scores has incompatible shape");

    const float* box = boxes.flat<float>().data();
    const float* score = scores.flat<float>().data();
    const int64_t size_per_class = std::min(per_class, n);
    const int64_t per_batch = pad_per_class_ ? std::min(total, per_class * classes) : total;
    Tensor *out_boxes = nullptr, *out_scores = nullptr, *out_classes = nullptr, *valid = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({batches, per_batch, 4}), &out_boxes));
    TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({batches, per_batch}), &out_scores));
    TF_RETURN_IF_ERROR(c->allocate_output(2, TensorShape({batches, per_batch}), &out_classes));
    TF_RETURN_IF_ERROR(c->allocate_output(3, TensorShape({batches}), &valid));
    float* ob = out_boxes->flat<float>().data();
    float* os = out_scores->flat<float>().data();
    float* oc = out_classes->flat<float>().data();
    std::fill(ob, ob + out_boxes->NumElements(), 0.0f);
    std::fill(os, os + out_scores->NumElements(), 0.0f);
    std::fill(oc, oc + out_classes->NumElements(), 0.0f);
    struct Result {
      int64_t box = -1;      // the box's offset in `box`, in boxes of 4; -1: no result
      float score = -1.0f;
      int64_t cls = -1;
    };
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<Result> results(size_per_class * classes);
      const float* bb = box + b * n * q * 4;
      for (int64_t k = 0; k < classes; ++k) {
        struct Candidate {
          int64_t index;
          float score;
        };
        auto lower = [](const Candidate& x, const Candidate& y) { return x.score < y.score; };
        std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
        for (int64_t i = 0; i < n; ++i) {
          const float sc = score[(b * n + i) * classes + k];
          if (sc > score_threshold) queue.push({i, sc});
        }
        const int64_t col = q > 1 ? k : 0;
        std::vector<int64_t> selected;
        while (static_cast<int64_t>(selected.size()) < size_per_class && !queue.empty()) {
          const Candidate next = queue.top();
          queue.pop();
          bool keep = true;
          for (int64_t j = static_cast<int64_t>(selected.size()) - 1; j >= 0 && keep; --j)
            keep = !(Iou(bb, next.index * q + col, selected[j] * q + col) > iou_threshold);
          if (!keep) continue;
          results[selected.size() + size_per_class * k] = {next.index * q + col, next.score, k};
          selected.push_back(next.index);
        }
      }
      std::sort(results.begin(), results.end(), [](const Result& x, const Result& y) { return x.score > y.score; });
      const int64_t found = std::count_if(results.begin(), results.end(), [](const Result& r) { return r.box > -1; });
      const int64_t kept = std::min(found, per_batch);
      valid->vec<int32_t>()(b) = static_cast<int32_t>(kept);
      for (int64_t j = 0; j < kept; ++j) {
        const Result& r = results[j];
        for (int e = 0; e < 4; ++e) {
          const float v = bb[r.box * 4 + e];
          ob[(b * per_batch + j) * 4 + e] = clip_boxes_ ? std::max(std::min(v, 1.0f), 0.0f) : v;
        }
        os[b * per_batch + j] = r.score;
        oc[b * per_batch + j] = static_cast<float>(r.cls);
      }
    }
    return absl::OkStatus();
  }

 private:
  bool pad_per_class_ = false, clip_boxes_ = true;
};

// ---- Registration ---------------------------------------------------------------------------

void Register(const char* op, const char* type_attr, DataType type, HostKernelFactory factory) {
  RegisterHostKernel(op, type_attr, type, "NpuDynamicShapeOp", std::move(factory));
}

template <typename T>
void RegisterAllTypes() {   // every NPU dtype, bool included
  const DataType t = DataTypeToEnum<T>::v();
  Register("Where", "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new WhereOp<T>(c); });
  for (const char* op : {"Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2"})
    Register(op, "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new UniqueOp<T>(c); });
  Register("DynamicPartition", "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new DynamicPartitionOp(c); });
  for (const char* op : {"DynamicStitch", "ParallelDynamicStitch"})
    Register(op, "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new DynamicStitchOp(c); });
}

template <typename T>
void RegisterNumberTypes() {   // float32, float16, bfloat16, int32, int64
  const DataType t = DataTypeToEnum<T>::v();
  Register("ListDiff", "T", t, [](OpKernelConstruction* c) -> OpKernel* { return new ListDiffOp<T>(c); });
  static constexpr std::pair<const char*, Reduce> kSegment[] = {
      {"SegmentSum", Reduce::kSum}, {"SegmentMean", Reduce::kMean}, {"SegmentMax", Reduce::kMax},
      {"SegmentMin", Reduce::kMin}, {"SegmentProd", Reduce::kProd}};
  for (const auto& [op, r] : kSegment)
    Register(op, "T", t, [r = r](OpKernelConstruction* c) -> OpKernel* { return new SegmentOp<T>(c, r); });
  Register("SparseSegmentSum", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new SparseSegmentOp<T>(c, Reduce::kSum); });
}

template <typename T>
void RegisterBincountTypes() {   // the op def's int32, int64, float32 (and float64)
  const DataType t = DataTypeToEnum<T>::v();
  Register("SparseBincount", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new RowBincountOp<T>(c, true); });
  Register("RaggedBincount", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new RowBincountOp<T>(c, false); });
}

template <typename W>
void RegisterCountTypes() {   // output_type (the weights): float32, int32, int64
  static constexpr std::pair<const char*, CountForm> kCounts[] = {
      {"DenseCountSparseOutput", CountForm::kDense}, {"SparseCountSparseOutput", CountForm::kSparse},
      {"RaggedCountSparseOutput", CountForm::kRagged}};
  for (const auto& [op, form] : kCounts)
    Register(op, "output_type", DataTypeToEnum<W>::v(),
             [form = form](OpKernelConstruction* c) -> OpKernel* { return new CountSparseOutputOp<W>(c, form); });
}

template <typename T>
void RegisterFloatTypes() {   // float32, float16, bfloat16
  const DataType t = DataTypeToEnum<T>::v();
  Register("SparseSegmentMean", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new SparseSegmentOp<T>(c, Reduce::kMean); });
  Register("SparseSegmentSqrtN", "T", t,
           [](OpKernelConstruction* c) -> OpKernel* { return new SparseSegmentOp<T>(c, Reduce::kSqrtN); });
  static constexpr std::pair<const char*, Reduce> kGradV2[] = {
      {"SparseSegmentSumGradV2", Reduce::kSum}, {"SparseSegmentMeanGradV2", Reduce::kMean},
      {"SparseSegmentSqrtNGradV2", Reduce::kSqrtN}};
  for (const auto& [op, r] : kGradV2)
    Register(op, "T", t, [r = r](OpKernelConstruction* c) -> OpKernel* { return new SparseSegmentGradV2Op<T>(c, r); });
}

template <typename T>
void RegisterNmsTypes() {   // float32, float16 (TF's CPU kernels)
  const DataType t = DataTypeToEnum<T>::v();
  for (int version : {2, 3, 4, 5}) {
    Register(absl::StrCat("NonMaxSuppressionV", version).c_str(), "T", t,
             [version](OpKernelConstruction* c) -> OpKernel* { return new NonMaxSuppressionOp<T>(c, version); });
  }
}

}  // namespace

absl::Status RegisterDynamicShapeKernels(int* registered) {
  *registered = 0;
  static constexpr const char* kOps[] = {
      "Where", "Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2", "DynamicPartition",
      "DynamicStitch", "ParallelDynamicStitch", "ListDiff", "SegmentSum", "SegmentMean",
      "SegmentMax", "SegmentMin", "SegmentProd", "SparseSegmentSum", "SparseSegmentMean",
      "SparseSegmentSqrtN", "SparseSegmentSumGradV2", "SparseSegmentMeanGradV2",
      "SparseSegmentSqrtNGradV2", "NonMaxSuppression", "NonMaxSuppressionV2", "NonMaxSuppressionV3",
      "NonMaxSuppressionV4", "NonMaxSuppressionV5", "NonMaxSuppressionWithOverlaps",
      "DenseCountSparseOutput", "SparseCountSparseOutput", "RaggedCountSparseOutput", "SparseBincount",
      "RaggedBincount", "CombinedNonMaxSuppression"};
  absl::Status status = CheckNoNpuKernels(kOps);
  if (!status.ok()) return status;
  RegisterAllTypes<float>();
  RegisterAllTypes<Eigen::half>();
  RegisterAllTypes<Eigen::bfloat16>();
  RegisterAllTypes<tensorflow::int32>();
  RegisterAllTypes<tensorflow::int64>();
  RegisterAllTypes<bool>();
  RegisterNumberTypes<float>();
  RegisterNumberTypes<Eigen::half>();
  RegisterNumberTypes<Eigen::bfloat16>();
  RegisterNumberTypes<tensorflow::int32>();
  RegisterNumberTypes<tensorflow::int64>();
  RegisterBincountTypes<float>();
  RegisterBincountTypes<tensorflow::int32>();
  RegisterBincountTypes<tensorflow::int64>();
  RegisterFloatTypes<float>();
  RegisterFloatTypes<Eigen::half>();
  RegisterFloatTypes<Eigen::bfloat16>();
  RegisterNmsTypes<float>();
  RegisterNmsTypes<Eigen::half>();
  RegisterCountTypes<float>();
  RegisterCountTypes<tensorflow::int32>();
  RegisterCountTypes<tensorflow::int64>();
  // float32 only, no type attr
  Register("CombinedNonMaxSuppression", nullptr, tensorflow::DT_FLOAT,
           [](OpKernelConstruction* c) -> OpKernel* { return new CombinedNonMaxSuppressionOp(c); });
  Register("NonMaxSuppression", nullptr, tensorflow::DT_FLOAT,
           [](OpKernelConstruction* c) -> OpKernel* { return new NonMaxSuppressionOp<float>(c, 1); });
  Register("NonMaxSuppressionWithOverlaps", nullptr, tensorflow::DT_FLOAT,
           [](OpKernelConstruction* c) -> OpKernel* { return new NonMaxSuppressionOp<float>(c, kWithOverlaps); });
  *registered = static_cast<int>(sizeof(kOps) / sizeof(kOps[0]));
  return absl::OkStatus();
}

}  // namespace npu_tf
