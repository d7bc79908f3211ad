// Segment reductions, bincounts, HistogramFixedWidth and EuclideanNorm
// (reference: graph_engine/ops/segment.py). Output sizes are compile-time attrs; ids and indices
// are read at run time and checked as TF's CPU kernels check them, with TF's messages, before
// anything is written. Floating types compute in float (float16/bfloat16 widened), integers in
// wrapping int64; rows are combined in index order, so results are deterministic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

std::vector<int64_t> LoadIds(int dtype, const void* data, int64_t n) {
  std::vector<int64_t> v(n);
  if (n > 0) Load<int64_t>(dtype, data, n, v.data());
  return v;
}

Status CheckIndexType(const TensorDesc& t, const char* what) {
  if (t.dtype != kInt32 && t.dtype != kInt64)
    return Error(what, " are ", DTypeName(t.dtype), "; expected int32 or int64");
  return Status::Ok();
}

Status CheckNumber(const TensorDesc& in, const TensorDesc& out) {
  if (!(IsFloating(in.dtype) || in.dtype == kInt32 || in.dtype == kInt64) || in.dtype != out.dtype)
    return Error("does not support ", DTypeName(in.dtype), " -> ", DTypeName(out.dtype),
                 "; supported: float32, float16, bfloat16, int32, int64 (same dtype in and out)");
  return Status::Ok();
}

// Wrapping integer arithmetic, as TF's integer kernels (no UB on overflow).
template <class A> A Add(A a, A b) {
  if constexpr (std::is_integral_v<A>) return static_cast<A>(uint64_t(a) + uint64_t(b));
  else return a + b;
}
template <class A> A Mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) return static_cast<A>(uint64_t(a) * uint64_t(b));
  else return a * b;
}

// The lowest (sign < 0) / highest finite value of the stored dtype: TF's Max/Min identity.
template <class A> A Extreme(int dtype, int sign) {
  if constexpr (std::is_integral_v<A>) {
    if (dtype == kInt32) return sign < 0 ? std::numeric_limits<int32_t>::lowest() : std::numeric_limits<int32_t>::max();
    return sign < 0 ? std::numeric_limits<int64_t>::lowest() : std::numeric_limits<int64_t>::max();
  } else {
    return sign < 0 ? LowestOf(dtype) : -LowestOf(dtype);
  }
}

// ---- UnsortedSegment{Max,Min,Prod} ----------------------------------------------------------

enum class SegOp { kMax, kMin, kProd };

class UnsortedSegmentKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, SegOp op, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const TensorDesc &data = def.inputs[0], &ids = def.inputs[1], &o = def.outputs[0];
    NPU_RETURN_IF_ERROR(CheckNumber(data, o));
    NPU_RETURN_IF_ERROR(CheckIndexType(ids, "segment_ids"));
    auto k = std::make_unique<UnsortedSegmentKernel>();
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("num_segments", &k->segments_));
    if (ids.dims.size() > data.dims.size() || !std::equal(ids.dims.begin(), ids.dims.end(), data.dims.begin()))
      return Error("segment_ids ", ShapeString(ids.dims), " must be a prefix of data ", ShapeString(data.dims));
    Dims want{k->segments_};
    want.insert(want.end(), data.dims.begin() + ids.dims.size(), data.dims.end());
    if (o.dims != want) return Error("output has shape ", ShapeString(o.dims), "; expected ", ShapeString(want));
    k->op_ = op;
    k->n_ids_ = NumElements(ids.dims);
    k->inner_ = NumElements(Dims(data.dims.begin() + ids.dims.size(), data.dims.end()));
    k->dtype_ = data.dtype;
    k->id_dtype_ = ids.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (n_ids_ * inner_ > 0) {               // TF checks the ids only when data is not empty
      const std::vector<int64_t> ids = LoadIds(id_dtype_, args.in(1), n_ids_);
      for (int64_t i = 0; i < n_ids_; ++i)
        if (ids[i] >= segments_)
          return InvalidArgument("segment_ids[", i, "] = ", ids[i], " is out of range [0, ", segments_, ")");
      if (segments_ * inner_ == 0) return Status::Ok();
      if (IsFloating(dtype_)) Run<float>(ids, args);
      else Run<int64_t>(ids, args);
    } else if (segments_ * inner_ > 0) {
      if (IsFloating(dtype_)) Run<float>({}, args);
      else Run<int64_t>({}, args);
    }
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }

  template <class A>
  void Run(const std::vector<int64_t>& ids, const KernelArgs& args) const {
    const A init = op_ == SegOp::kProd ? A(1) : Extreme<A>(dtype_, op_ == SegOp::kMax ? -1 : 1);
    std::vector<A> acc(segments_ * inner_, init), row(inner_);
    const int size = DTypeSize(dtype_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0) continue;
      Load<A>(dtype_, args.in<char>(0) + i * inner_ * size, inner_, row.data());
      A* a = acc.data() + ids[i] * inner_;
      for (int64_t c = 0; c < inner_; ++c) {
        switch (op_) {   // Eigen's maxi/mini (a NaN in data is taken) and products
          case SegOp::kMax: a[c] = row[c] < a[c] ? a[c] : row[c]; break;
          case SegOp::kMin: a[c] = a[c] < row[c] ? a[c] : row[c]; break;
          case SegOp::kProd: a[c] = Mul(a[c], row[c]); break;
        }
      }
    }
    Store<A>(dtype_, acc.data(), segments_ * inner_, args.out(0));
  }

  SegOp op_ = SegOp::kMax;
  int64_t n_ids_ = 0, inner_ = 1, segments_ = 0;
  int dtype_ = kFloat, id_dtype_ = kInt32;
};

// ---- SparseSegment{Sum,Mean,SqrtN}WithNumSegments and SparseSegment*Grad --------------------

enum class Norm { kSum, kMean, kSqrtN };

double Scale(Norm norm, int64_t count) {
  if (norm == Norm::kSum) return 1.0;
  const double n = static_cast<double>(std::max<int64_t>(count, 1));
  return norm == Norm::kMean ? 1.0 / n : 1.0 / std::sqrt(n);
}

// Both directions share one plan: rows of `inner` elements, `k` (index, segment id) pairs.
struct SparsePlan {
  Norm norm = Norm::kSum;
  int64_t k = 0, inner = 1, in_rows = 0, out_rows = 0;
  int dtype = kFloat, idx_dtype = kInt32, seg_dtype = kInt32;

  Status Init(const KernelDef& def, Norm n, const char* rows_attr) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 3, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const TensorDesc &data = def.inputs[0], &idx = def.inputs[1], &seg = def.inputs[2], &o = def.outputs[0];
    NPU_RETURN_IF_ERROR(CheckNumber(data, o));
    NPU_RETURN_IF_ERROR(CheckIndexType(idx, "indices"));
    NPU_RETURN_IF_ERROR(CheckIndexType(seg, "segment_ids"));
    if (idx.dims.size() != 1 || seg.dims != idx.dims)
      return Error("indices ", ShapeString(idx.dims), " and segment_ids ", ShapeString(seg.dims),
                   " must be vectors of the same size");
    if (data.dims.empty()) return Error("data must be at least 1-D");
    NPU_RETURN_IF_ERROR(def.attrs.Scalar(rows_attr, &out_rows));
    Dims want{out_rows};
    want.insert(want.end(), data.dims.begin() + 1, data.dims.end());
    if (o.dims != want) return Error("output has shape ", ShapeString(o.dims), "; expected ", ShapeString(want));
    norm = n;
    k = idx.dims[0];
    in_rows = data.dims[0];
    inner = NumElements(Dims(data.dims.begin() + 1, data.dims.end()));
    dtype = data.dtype;
    idx_dtype = idx.dtype;
    seg_dtype = seg.dtype;
    return Status::Ok();
  }

  // out[to[i]] += in[from[i]] * scale[i]; `out` starts at zeros.
  template <class A>
  void Accumulate(const std::vector<int64_t>& from, const std::vector<int64_t>& to,
                  const std::vector<double>& scale, const KernelArgs& args) const {
    std::vector<A> acc(out_rows * inner, A(0)), row(inner);
    const int size = DTypeSize(dtype);
    for (int64_t i = 0; i < k; ++i) {
      Load<A>(dtype, args.in<char>(0) + from[i] * inner * size, inner, row.data());
      A* a = acc.data() + to[i] * inner;
      const A s = static_cast<A>(scale[i]);
      for (int64_t c = 0; c < inner; ++c) a[c] = Add(a[c], scale[i] == 1.0 ? row[c] : row[c] * s);
    }
    if (out_rows * inner > 0) Store<A>(dtype, acc.data(), out_rows * inner, args.out(0));
  }

  void Run(const std::vector<int64_t>& from, const std::vector<int64_t>& to, const std::vector<double>& scale,
           const KernelArgs& args) const {
    if (IsFloating(dtype)) Accumulate<float>(from, to, scale, args);
    else Accumulate<int64_t>(from, to, scale, args);
  }
};

// output[segment_ids[i]] += data[indices[i]] * scale(segment); segment_ids sorted.
class SparseSegmentKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, Norm norm, std::unique_ptr<Kernel>* out) {
    auto k = std::make_unique<SparseSegmentKernel>();
    NPU_RETURN_IF_ERROR(k->p_.Init(def, norm, "num_segments"));
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const std::vector<int64_t> idx = LoadIds(p_.idx_dtype, args.in(1), p_.k);
    const std::vector<int64_t> seg = LoadIds(p_.seg_dtype, args.in(2), p_.k);
    // TF's checks, in its order (sparse_segment_reduction_ops / segment_reduction_ops_impl.h)
    if (p_.k > 0 && seg[p_.k - 1] >= p_.out_rows) return InvalidArgument("segment ids must be < num_segments");
    for (int64_t i = 1; i < p_.k; ++i)
      if (seg[i] < seg[i - 1]) return InvalidArgument("segment ids are not increasing");
    if (p_.k > 0 && seg[0] < 0)
      return InvalidArgument("Segment id ", seg[0], " out of range [0, ", p_.out_rows,
                             "), possibly because 'segment_ids' input is not sorted.");
    for (int64_t i = 0; i < p_.k; ++i)
      if (idx[i] < 0 || idx[i] >= p_.in_rows)
        return InvalidArgument("Bad: indices[", i, "] == ", idx[i], " out of range [0, ", p_.in_rows, ")");
    std::vector<int64_t> count(p_.out_rows, 0);
    for (int64_t s : seg) ++count[s];
    std::vector<double> scale(p_.k);
    for (int64_t i = 0; i < p_.k; ++i) scale[i] = Scale(p_.norm, count[seg[i]]);
    p_.Run(idx, seg, scale, args);
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }
  SparsePlan p_;
};

// output[indices[i]] += grad[segment_ids[i]] * scale(segment); any order.
class SparseSegmentGradKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, Norm norm, std::unique_ptr<Kernel>* out) {
    auto k = std::make_unique<SparseSegmentGradKernel>();
    NPU_RETURN_IF_ERROR(k->p_.Init(def, norm, "output_dim0"));
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const std::vector<int64_t> idx = LoadIds(p_.idx_dtype, args.in(1), p_.k);
    // TF returns before any check when the output or the index list is empty (leaving its
    // output unwritten; zeros here, the gradient of nothing)
    if (p_.out_rows == 0 || p_.k == 0) {
      if (p_.out_rows * p_.inner > 0) std::memset(args.out(0), 0, p_.out_rows * p_.inner * DTypeSize(p_.dtype));
      return Status::Ok();
    }
    const std::vector<int64_t> seg = LoadIds(p_.seg_dtype, args.in(2), p_.k);
    if (seg[p_.k - 1] >= p_.in_rows) return InvalidArgument("Invalid number of segments");
    for (int64_t i = 0; i < p_.k; ++i)
      if (seg[i] < 0 || seg[i] >= p_.in_rows)
        return InvalidArgument("Segment id ", seg[i], " out of range [0, ", p_.in_rows, ").");
    for (int64_t i = 0; i < p_.k; ++i)
      if (idx[i] < 0 || idx[i] >= p_.out_rows)
        return InvalidArgument("Index ", idx[i], " out of range [0, ", p_.out_rows, ").");
    std::vector<int64_t> count(p_.in_rows, 0);
    for (int64_t s : seg) ++count[s];
    std::vector<double> scale(p_.k);
    for (int64_t i = 0; i < p_.k; ++i) scale[i] = Scale(p_.norm, count[seg[i]]);
    p_.Run(seg, idx, scale, args);
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }
  SparsePlan p_;
};

// ---- Bincount, DenseBincount ----------------------------------------------------------------

// rows x cols values counted into `size` bins per row (Bincount: one row). Without weights a
// value counts 1; binary_output: a bin hit is 1.
class BincountKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, bool dense, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const TensorDesc &arr = def.inputs[0], &w = def.inputs[1], &o = def.outputs[0];
    NPU_RETURN_IF_ERROR(CheckNumber(w, o));
    NPU_RETURN_IF_ERROR(CheckIndexType(arr, "input values"));
    auto k = std::make_unique<BincountKernel>();
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("size", &k->size_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("binary_output", false, &k->binary_));
    if (dense && arr.dims.size() > 2) return Error("Shape must be at most rank 2 but is rank ", arr.dims.size());
    const int64_t n = NumElements(arr.dims);
    k->rows_ = dense && arr.dims.size() == 2 ? arr.dims[0] : 1;
    k->cols_ = k->rows_ > 0 ? n / std::max<int64_t>(k->rows_, 1) : 0;
    k->weighted_ = NumElements(w.dims) > 0;   // empty weights: count occurrences
    if (k->weighted_ && NumElements(w.dims) != n)
      return Error("Input indices and weights must have the same size.");
    const Dims want = dense && arr.dims.size() == 2 ? Dims{arr.dims[0], k->size_} : Dims{k->size_};
    if (o.dims != want) return Error("output has shape ", ShapeString(o.dims), "; expected ", ShapeString(want));
    k->arr_dtype_ = arr.dtype;
    k->dtype_ = w.dtype;
    k->dense_ = dense;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const std::vector<int64_t> arr = LoadIds(arr_dtype_, args.in(0), rows_ * cols_);
    for (int64_t v : arr) {   // TF's two kernels word it differently
      if (v < 0 && dense_) return InvalidArgument("Input 'in' must be non-negative! Negative input value found: ", v);
      if (v < 0) return InvalidArgument("Input arr must be non-negative!");
    }
    if (rows_ * size_ == 0) return Status::Ok();
    if (IsFloating(dtype_)) Run<float>(arr, args);
    else Run<int64_t>(arr, args);
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }

  template <class A>
  void Run(const std::vector<int64_t>& arr, const KernelArgs& args) const {
    std::vector<A> w;
    if (weighted_ && !binary_) {
      w.resize(arr.size());
      Load<A>(dtype_, args.in(1), static_cast<int64_t>(arr.size()), w.data());
    }
    auto count = [&](auto&& add_to_bin) {
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t c = 0; c < cols_; ++c) {
          const int64_t v = arr[r * cols_ + c];
          if (v < size_) add_to_bin(r * size_ + v, w.empty() ? A(1) : w[r * cols_ + c]);
        }
    };
    const int64_t bins = rows_ * size_;
    if (bins * static_cast<int64_t>(sizeof(A)) > (int64_t{64} << 20)) {
      // Into the output itself (zero bits are zero in every dtype): a scratch as large (a
      // `minlength` of 2**31 - 1) could be more than the host backs, an OOM-killed process.
      char* out = static_cast<char*>(args.out(0));
      const int64_t esize = DTypeSize(dtype_);
      std::memset(out, 0, bins * esize);
      count([&](int64_t i, A x) {
        A bin;
        Load<A>(dtype_, out + i * esize, 1, &bin);
        bin = binary_ ? A(1) : Add(bin, x);
        Store<A>(dtype_, &bin, 1, out + i * esize);
      });
      return;
    }
    std::vector<A> acc(bins, A(0));
    count([&](int64_t i, A x) { acc[i] = binary_ ? A(1) : Add(acc[i], x); });
    Store<A>(dtype_, acc.data(), bins, args.out(0));
  }

  int64_t size_ = 0, rows_ = 1, cols_ = 0;
  bool binary_ = false, weighted_ = false, dense_ = false;
  int arr_dtype_ = kInt32, dtype_ = kFloat;
};

// ---- HistogramFixedWidth --------------------------------------------------------------------

class HistogramKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const TensorDesc &v = def.inputs[0], &range = def.inputs[1], &o = def.outputs[0];
    auto k = std::make_unique<HistogramKernel>();
    NPU_RETURN_IF_ERROR(CheckNumber(v, range));
    NPU_RETURN_IF_ERROR(CheckIndexType(o, "outputs"));
    if (range.dims != Dims{2}) return Error("value_range must have shape [2], got ", ShapeString(range.dims));
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("nbins", &k->nbins_));
    if (k->nbins_ <= 0) return Error("nbins should be a positive number, but got '", k->nbins_, "'");
    if (o.dims != Dims{k->nbins_})
      return Error("output has shape ", ShapeString(o.dims), "; expected [", k->nbins_, "]");
    k->n_ = NumElements(v.dims);
    k->dtype_ = v.dtype;
    k->out_dtype_ = o.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (IsFloating(dtype_)) return Run<float>(args);
    return Run<int64_t>(args);
  }

 private:
  bool ChecksValues() const override { return true; }

  template <class A>
  Status Run(const KernelArgs& args) const {
    A range[2];
    Load<A>(dtype_, args.in(1), 2, range);
    if (!(range[0] < range[1]))
      return InvalidArgument("value_range should satisfy value_range[0] < value_range[1], but got '[",
                             range[0], ", ", range[1], "]'");
    std::vector<A> v(n_);
    if (n_ > 0) Load<A>(dtype_, args.in(0), n_, v.data());
    // TF: the step from the range's difference in T, the bin in double, clamped to the bins
    const double step = static_cast<double>(Add<A>(range[1], -range[0])) / static_cast<double>(nbins_);
    std::vector<int64_t> counts(nbins_, 0);
    for (A x : v) {
      if constexpr (!std::is_integral_v<A>)
        if (std::isnan(x)) return InvalidArgument("Histogram values must not contain NaN");
      const double b = (static_cast<double>(x) - static_cast<double>(range[0])) / step;
      ++counts[static_cast<int64_t>(std::min(std::max(b, 0.0), static_cast<double>(nbins_ - 1)))];
    }
    Store<int64_t>(out_dtype_, counts.data(), nbins_, args.out(0));
    return Status::Ok();
  }

  int64_t nbins_ = 1, n_ = 0;
  int dtype_ = kFloat, out_dtype_ = kInt32;
};

// ---- EuclideanNorm --------------------------------------------------------------------------

// sqrt(sum(x * x)) over the reduction axes: each input element adds into the output element its
// kept coordinates address (strides of the output, 0 on reduced axes).
class EuclideanNormKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const TensorDesc &in = def.inputs[0], &o = def.outputs[0];
    NPU_RETURN_IF_ERROR(CheckNumber(in, o));
    auto k = std::make_unique<EuclideanNormKernel>();
    std::vector<int64_t> axes;
    NPU_RETURN_IF_ERROR(def.attrs.IntList("reduction_indices", &axes));
    const int64_t rank = static_cast<int64_t>(in.dims.size());
    std::vector<bool> reduced(rank, false);
    for (int64_t a : axes) {
      NPU_RETURN_IF_ERROR(NormalizeAxis(a, rank, &a));
      if (reduced[a]) return Error("reduction axes contain the duplicate dimension ", a);
      reduced[a] = true;
    }
    int64_t stride = 1;
    k->dims_ = in.dims;
    k->strides_.assign(rank, 0);
    for (int64_t a = rank - 1; a >= 0; --a)
      if (!reduced[a]) { k->strides_[a] = stride; stride *= in.dims[a]; }
    k->n_ = NumElements(in.dims);
    k->out_n_ = NumElements(o.dims);
    if (k->out_n_ != stride) return Error("output has shape ", ShapeString(o.dims), "; expected ", stride, " elements");
    k->dtype_ = in.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (IsFloating(dtype_)) Run<float>(args);
    else Run<int64_t>(args);
    return Status::Ok();
  }

 private:
  template <class A>
  void Run(const KernelArgs& args) const {
    if (out_n_ == 0) return;
    std::vector<A> x(n_), acc(out_n_, A(0));
    if (n_ > 0) Load<A>(dtype_, args.in(0), n_, x.data());
    const int64_t rank = static_cast<int64_t>(dims_.size());
    std::vector<int64_t> pos(rank, 0);
    int64_t at = 0;
    for (int64_t i = 0; i < n_; ++i) {
      acc[at] = Add(acc[at], Mul(x[i], x[i]));
      for (int64_t a = rank - 1; a >= 0; --a) {     // odometer step: the next input coordinate
        at += strides_[a];
        if (++pos[a] < dims_[a]) break;
        at -= strides_[a] * dims_[a];
        pos[a] = 0;
      }
    }
    for (A& v : acc) {
      if constexpr (std::is_integral_v<A>) {
        // TF squares and sums in T itself (wrapping: the low 32 bits of this int64 sum for
        // int32), then converts std::sqrt's double back to T: the truncated root, and for a
        // negative (wrapped) sum NaN, which x86 converts to T's lowest
        const int64_t sum = dtype_ == kInt32 ? int64_t(int32_t(v)) : v;
        const int64_t lowest = dtype_ == kInt32 ? std::numeric_limits<int32_t>::lowest()
                                                : std::numeric_limits<int64_t>::lowest();
        v = sum < 0 ? lowest : static_cast<A>(std::sqrt(static_cast<double>(sum)));
      } else {
        v = std::sqrt(v);
      }
    }
    Store<A>(dtype_, acc.data(), out_n_, args.out(0));
  }

  Dims dims_;
  std::vector<int64_t> strides_;
  int64_t n_ = 0, out_n_ = 0;
  int dtype_ = kFloat;
};

#define NPU_SEGMENT_KERNEL(name, make, arg) \
  NPU_REGISTER_KERNEL(name, [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return make(d, arg, k); })
NPU_SEGMENT_KERNEL("UnsortedSegmentMax", UnsortedSegmentKernel::Make, SegOp::kMax);
NPU_SEGMENT_KERNEL("UnsortedSegmentMin", UnsortedSegmentKernel::Make, SegOp::kMin);
NPU_SEGMENT_KERNEL("UnsortedSegmentProd", UnsortedSegmentKernel::Make, SegOp::kProd);
NPU_SEGMENT_KERNEL("SparseSegmentSumWithNumSegments", SparseSegmentKernel::Make, Norm::kSum);
NPU_SEGMENT_KERNEL("SparseSegmentMeanWithNumSegments", SparseSegmentKernel::Make, Norm::kMean);
NPU_SEGMENT_KERNEL("SparseSegmentSqrtNWithNumSegments", SparseSegmentKernel::Make, Norm::kSqrtN);
NPU_SEGMENT_KERNEL("SparseSegmentSumGrad", SparseSegmentGradKernel::Make, Norm::kSum);
NPU_SEGMENT_KERNEL("SparseSegmentMeanGrad", SparseSegmentGradKernel::Make, Norm::kMean);
NPU_SEGMENT_KERNEL("SparseSegmentSqrtNGrad", SparseSegmentGradKernel::Make, Norm::kSqrtN);
NPU_SEGMENT_KERNEL("Bincount", BincountKernel::Make, false);
NPU_SEGMENT_KERNEL("DenseBincount", BincountKernel::Make, true);
#undef NPU_SEGMENT_KERNEL
NPU_REGISTER_KERNEL("HistogramFixedWidth", HistogramKernel::Make);
NPU_REGISTER_KERNEL("EuclideanNorm", EuclideanNormKernel::Make);

}  // namespace
}  // namespace kernels
}  // namespace npu
