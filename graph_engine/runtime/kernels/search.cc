// Top-k and sorted searches (reference: graph_engine/ops/array_extra.py): TopKV2,
// InTopKV2, Bucketize, LowerBound, UpperBound. Values are compared in their compute type
// (float for the float dtypes, int64 for the integers), so integer order is exact.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

bool IsIndexType(int dtype) { return dtype == kInt32 || dtype == kInt64; }

// Calls fn.template operator()<T>() with T the compute type of `dtype` (float or int64).
template <class Fn>
void ByComputeType(int dtype, Fn&& fn) {
  if (ComputeTypeOf(dtype) == ComputeType::kInt64) fn(int64_t{});
  else if (ComputeTypeOf(dtype) == ComputeType::kDouble) fn(double{});
  else fn(float{});
}

// NaN is larger than every number in TF's top-k order.
template <class T>
bool Greater(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
  }
  return a > b;
}

// The k largest of each row, larger first, equal values by lower index (TF's order). With
// sorted=False and 1 < k < columns, in the order TF's CPU kernel leaves them: its gtl::TopN
// heap's (the first k+1 columns heapified with std::make_heap and the least popped, then each
// larger column replacing the least with pop_heap/push_heap), replayed with the same std::
// heap algorithms and comparator.
class TopKKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 2));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<TopKKernel>();
    const TensorDesc &in = def.inputs[0], &v = def.outputs[0], &i = def.outputs[1];
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("k", &k->k_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("sorted", true, &k->sorted_));
    if (in.dims.empty()) return Error("input must be >= 1-D, got shape []");
    if (k->k_ < 0) return InvalidArgument("Need k >= 0, got ", k->k_);
    k->cols_ = in.dims.back();
    if (k->cols_ < k->k_) return InvalidArgument("input must have at least k columns. Had ", k->cols_, ", needed ", k->k_);
    Dims want = in.dims;
    want.back() = k->k_;
    if (v.dims != want || i.dims != want) return Error("outputs must have shape ", ShapeString(want));
    if (!InTypeSet(kNumeric, in.dtype) || v.dtype != in.dtype || !IsIndexType(i.dtype))
      return Error("does not support ", DTypeName(in.dtype), " -> ", DTypeName(v.dtype), ", ", DTypeName(i.dtype));
    k->rows_ = k->cols_ ? NumElements(in.dims) / k->cols_ : 0;
    k->dtype_ = in.dtype;
    k->index_dtype_ = i.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (k_ == 0 || rows_ == 0) return Status::Ok();
    ByComputeType(dtype_, [&](auto zero) { Run<decltype(zero)>(args); });
    return Status::Ok();
  }

 private:
  template <class T>
  void Run(const KernelArgs& args) const {
    const int elem = DTypeSize(dtype_), ielem = DTypeSize(index_dtype_);
    ParallelFor(rows_, cols_ * 8, [&](int64_t r0, int64_t r1) {
      std::vector<T> row(cols_), top(k_);
      std::vector<int64_t> order(cols_);
      for (int64_t r = r0; r < r1; ++r) {
        Load<T>(dtype_, args.in<char>(0) + r * cols_ * elem, cols_, row.data());
        auto before = [&](int64_t a, int64_t b) {
          return Greater(row[a], row[b]) || (!Greater(row[b], row[a]) && a < b);
        };
        if (!sorted_ && k_ > 1 && k_ < cols_) {
          order.resize(k_ + 1);
          std::iota(order.begin(), order.end(), 0);
          std::make_heap(order.begin(), order.end(), before);
          std::pop_heap(order.begin(), order.end(), before);
          order.pop_back();
          for (int64_t c = k_ + 1; c < cols_; ++c) {
            if (before(c, order.front())) {
              std::pop_heap(order.begin(), order.end(), before);
              order.back() = c;
              std::push_heap(order.begin(), order.end(), before);
            }
          }
          order.resize(cols_);
        } else {
          order.resize(cols_);
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + k_, order.end(), before);
        }
        for (int64_t j = 0; j < k_; ++j) top[j] = row[order[j]];
        Store<T>(dtype_, top.data(), k_, args.out<char>(0) + r * k_ * elem);
        Store<int64_t>(index_dtype_, order.data(), k_, args.out<char>(1) + r * k_ * ielem);
      }
    });
  }

  int64_t k_ = 0, cols_ = 0, rows_ = 0;
  bool sorted_ = true;
  int dtype_ = kFloat, index_dtype_ = kInt32;
};

// InTopKV2: fewer than k predictions of row b are larger than predictions[b, targets[b]]; a
// non-finite row or an out-of-range target is never in the top k.
class InTopKKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<InTopKKernel>();
    const TensorDesc &p = def.inputs[0], &t = def.inputs[1], &o = def.outputs[0];
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("k", &k->k_));
    if (p.dtype != kFloat || !IsIndexType(t.dtype) || o.dtype != kBool)
      return Error("expects float32 predictions, int32/int64 targets and a bool output");
    if (p.dims.size() != 2 || t.dims != Dims{p.dims[0]} || o.dims != t.dims)
      return Error("predictions ", ShapeString(p.dims), " must be 2-D and targets ", ShapeString(t.dims),
                   " their first dimension");
    k->batch_ = p.dims[0];
    k->classes_ = p.dims[1];
    k->target_dtype_ = t.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<int64_t> t(batch_);
    Load<int64_t>(target_dtype_, args.in(1), batch_, t.data());
    const float* p = args.in<float>(0);
    bool* o = args.out<bool>(0);
    for (int64_t b = 0; b < batch_; ++b) {
      const float* row = p + b * classes_;
      bool in = t[b] >= 0 && t[b] < classes_ && std::all_of(row, row + classes_, [](float v) { return std::isfinite(v); });
      if (in) {
        const float target = row[t[b]];
        in = std::count_if(row, row + classes_, [&](float v) { return v > target; }) < k_;
      }
      o[b] = in;
    }
    return Status::Ok();
  }

 private:
  int64_t k_ = 1, batch_ = 0, classes_ = 0;
  int target_dtype_ = kInt32;
};

// Bucketize: the number of boundaries <= x, x compared as float (TF's boundaries are floats).
class BucketizeKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    auto k = std::make_unique<BucketizeKernel>();
    auto it = def.attrs.values.find("boundaries");
    if (it != def.attrs.values.end()) {
      if (it->second.type == AttrValue::kFloatList) k->bounds_.assign(it->second.floats.begin(), it->second.floats.end());
      else for (int64_t v : it->second.ints) k->bounds_.push_back(static_cast<float>(v));   // an empty list
    }
    if (!std::is_sorted(k->bounds_.begin(), k->bounds_.end())) return InvalidArgument("Expected sorted boundaries");
    const TensorDesc &in = def.inputs[0], &o = def.outputs[0];
    if (o.dtype != kInt32 || o.dims != in.dims || !InTypeSet(kNumeric, in.dtype))
      return Error("maps ", DTypeName(in.dtype), ShapeString(in.dims), " to int32 of the same shape");
    k->n_ = NumElements(in.dims);
    k->dtype_ = in.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<float> x(n_);
    Load<float>(dtype_, args.in(0), n_, x.data());
    int32_t* o = args.out<int32_t>(0);
    ParallelFor(n_, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        o[i] = static_cast<int32_t>(std::upper_bound(bounds_.begin(), bounds_.end(), x[i]) - bounds_.begin());
    });
    return Status::Ok();
  }

 private:
  std::vector<float> bounds_;
  int64_t n_ = 0;
  int dtype_ = kFloat;
};

// LowerBound/UpperBound: per row b, each value's insertion point in sorted_inputs[b].
class BoundKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, bool upper, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<BoundKernel>();
    const TensorDesc &s = def.inputs[0], &v = def.inputs[1], &o = def.outputs[0];
    if (s.dims.size() != 2 || v.dims.size() != 2 || s.dims[0] != v.dims[0])
      return InvalidArgument("Leading dim_size of both tensors must match: sorted_inputs ", ShapeString(s.dims),
                             ", values ", ShapeString(v.dims));
    if (s.dtype != v.dtype || !InTypeSet(kNumeric, s.dtype) || !IsIndexType(o.dtype) || o.dims != v.dims)
      return Error("expects sorted_inputs and values of one numeric dtype and an int32/int64 output of values' shape");
    k->upper_ = upper;
    k->batch_ = s.dims[0];
    k->n_ = s.dims[1];
    k->m_ = v.dims[1];
    k->dtype_ = s.dtype;
    k->out_dtype_ = o.dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    ByComputeType(dtype_, [&](auto zero) { Run<decltype(zero)>(args); });
    return Status::Ok();
  }

 private:
  template <class T>
  void Run(const KernelArgs& args) const {
    std::vector<T> s(batch_ * n_), v(batch_ * m_);
    Load<T>(dtype_, args.in(0), s.size(), s.data());
    Load<T>(dtype_, args.in(1), v.size(), v.data());
    std::vector<int64_t> o(v.size());
    for (int64_t b = 0; b < batch_; ++b) {
      const T *lo = s.data() + b * n_, *hi = lo + n_;
      for (int64_t j = 0; j < m_; ++j) {
        const T x = v[b * m_ + j];
        o[b * m_ + j] = (upper_ ? std::upper_bound(lo, hi, x) : std::lower_bound(lo, hi, x)) - lo;
      }
    }
    Store<int64_t>(out_dtype_, o.data(), o.size(), args.out(0));
  }

  bool upper_ = false;
  int64_t batch_ = 0, n_ = 0, m_ = 0;
  int dtype_ = kFloat, out_dtype_ = kInt32;
};

void RegisterAll() {
  RegisterKernel("TopKV2", TopKKernel::Make);
  RegisterKernel("InTopKV2", InTopKKernel::Make);
  RegisterKernel("Bucketize", BucketizeKernel::Make);
  RegisterKernel("LowerBound", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return BoundKernel::Make(d, false, k); });
  RegisterKernel("UpperBound", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return BoundKernel::Make(d, true, k); });
}

StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
