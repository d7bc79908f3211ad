// TensorScatterUpdate/Add/Sub/Max/Min and ScatterNdNonAliasingAdd (reference:
// graph_engine/ops/array_extra.py): the tensor with each updates row combined into the slice
// its index row addresses, in index order (deterministic; the last update of a repeated index
// wins for TensorScatterUpdate). The slice number of each index row is GatherNd of the slice
// numbers of the tensor's first K dims, so the index checks, messages and bad_indices_policy
// are GatherNd's (an ignored row gathers 0: numbers are stored plus one).
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {
namespace {

enum class Combine { kUpdate, kAdd, kSub, kMax, kMin };

class TensorScatterKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, Combine how, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 3, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const TensorDesc &t = def.inputs[0], &idx = def.inputs[1], &u = def.inputs[2], &o = def.outputs[0];
    if (u.dtype != t.dtype || o.dtype != t.dtype || o.dims != t.dims)
      return Error("tensor, updates and output must share one dtype, and output the tensor's shape");
    if (idx.dims.empty() || idx.dims.back() > static_cast<int64_t>(t.dims.size()))
      return Error("indices ", ShapeString(idx.dims), " must end in K <= ", t.dims.size());
    const int64_t k = idx.dims.back();
    const int64_t nt = NumElements(t.dims), ni = NumElements(idx.dims), nu = NumElements(u.dims);
    if ((ni || nu) && !(nt && ni && nu))     // TF's ValidEmptyOutputShape
      return InvalidArgument("Indices and updates specified for empty output shape");
    auto kern = std::make_unique<TensorScatterKernel>();
    // GatherNd(slice numbers + 1 [dims[:K]], indices) -> [rows]
    const KernelFactory* gather = FindKernel("GatherNd");
    if (gather == nullptr) return Error("needs the GatherNd kernel");
    KernelDef gd = def;
    gd.kernel = "GatherNd";
    TensorDesc numbers = t;
    numbers.dims.assign(t.dims.begin(), t.dims.begin() + k);
    numbers.dtype = kInt64;
    TensorDesc rows = idx;
    rows.dims.pop_back();
    rows.dtype = kInt64;
    gd.inputs = {numbers, idx};
    gd.outputs = {rows};
    NPU_RETURN_IF_ERROR((*gather)(gd, &kern->gather_));
    Dims want = rows.dims;
    want.insert(want.end(), t.dims.begin() + k, t.dims.end());
    if (u.dims != want) return Error("updates ", ShapeString(u.dims), " must have shape ", ShapeString(want));
    kern->numbers_.resize(NumElements(numbers.dims));
    for (size_t i = 0; i < kern->numbers_.size(); ++i) kern->numbers_[i] = static_cast<int64_t>(i) + 1;
    kern->rows_ = NumElements(rows.dims);
    kern->slice_ = NumElements(Dims(t.dims.begin() + k, t.dims.end()));
    kern->size_ = NumElements(t.dims);
    kern->dtype_ = t.dtype;
    kern->how_ = how;
    *out = std::move(kern);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<int64_t> at(rows_);
    if (rows_ > 0) {   // with nothing to address, GatherNd reports the first index row
      const void* ins[] = {numbers_.data(), args.in(1)};
      void* outs[] = {at.data()};
      NPU_RETURN_IF_ERROR(gather_->Compute({ins, outs}));
    }
    if (size_ == 0) return Status::Ok();
    const int elem = DTypeSize(dtype_);
    char* o = args.out<char>(0);
    if (o != args.in(0)) std::memcpy(o, args.in(0), size_ * elem);
    if (how_ == Combine::kUpdate) {
      for (int64_t r = 0; r < rows_; ++r)
        if (at[r] > 0) std::memcpy(o + (at[r] - 1) * slice_ * elem, args.in<char>(2) + r * slice_ * elem, slice_ * elem);
      return Status::Ok();
    }
    switch (ComputeTypeOf(dtype_)) {
      case ComputeType::kFloat: Run<float>(at, args); break;
      case ComputeType::kDouble: Run<double>(at, args); break;
      case ComputeType::kInt64: Run<int64_t>(at, args); break;
    }
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }

  template <class T>
  void Run(const std::vector<int64_t>& at, const KernelArgs& args) const {
    std::vector<T> acc(size_), upd(rows_ * slice_);
    Load<T>(dtype_, args.out(0), size_, acc.data());
    Load<T>(dtype_, args.in(2), rows_ * slice_, upd.data());
    for (int64_t r = 0; r < rows_; ++r) {
      if (at[r] <= 0) continue;
      T* dst = acc.data() + (at[r] - 1) * slice_;
      const T* src = upd.data() + r * slice_;
      for (int64_t i = 0; i < slice_; ++i) dst[i] = Apply(dst[i], src[i]);
    }
    Store<T>(dtype_, acc.data(), size_, args.out(0));
  }

  template <class T>
  T Apply(T a, T b) const {
    switch (how_) {
      case Combine::kAdd:
        if constexpr (std::is_integral_v<T>) return static_cast<T>(uint64_t(a) + uint64_t(b));   // wraps
        else return a + b;
      case Combine::kSub:
        if constexpr (std::is_integral_v<T>) return static_cast<T>(uint64_t(a) - uint64_t(b));
        else return a - b;
      case Combine::kMax: return a < b ? b : a;
      case Combine::kMin: return b < a ? b : a;
      default: return b;
    }
  }

  std::unique_ptr<Kernel> gather_;
  std::vector<int64_t> numbers_;
  int64_t rows_ = 0, slice_ = 1, size_ = 0;
  int dtype_ = kFloat;
  Combine how_ = Combine::kUpdate;
};

KernelFactory Scatter(Combine how) {
  return [how](const KernelDef& d, std::unique_ptr<Kernel>* k) { return TensorScatterKernel::Make(d, how, k); };
}

void RegisterAll() {
  RegisterKernel("TensorScatterUpdate", Scatter(Combine::kUpdate));
  RegisterKernel("TensorScatterAdd", Scatter(Combine::kAdd));
  RegisterKernel("TensorScatterSub", Scatter(Combine::kSub));
  RegisterKernel("TensorScatterMax", Scatter(Combine::kMax));
  RegisterKernel("TensorScatterMin", Scatter(Combine::kMin));
  RegisterKernel("ScatterNdNonAliasingAdd", Scatter(Combine::kAdd));
}

StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
