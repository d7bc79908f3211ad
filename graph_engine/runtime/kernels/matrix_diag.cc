// Matrix diagonals and bands (reference: graph_engine/ops/linalg.py): MatrixDiag*, MatrixDiagPart*,
// MatrixSetDiag* (V1-V3), Diag, DiagPart, MatrixBandPart; and Cross and ConjugateTranspose.
//
// The diagonal ops share one plan: for the M x N matrices and diagonals lo..hi, the pairs
// (flat position in the matrix, flat position in the packed [num_diags, max_diag_len] form),
// computed at load as TF aligns short diagonals. Each execution then only copies stored bytes,
// so every dtype (and bool) is one code path.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

Status DiagIndices(const Attrs& attrs, int64_t* lo, int64_t* hi) {
  std::vector<int64_t> k;
  NPU_RETURN_IF_ERROR(attrs.IntList("k", {0}, &k));
  if (k.empty() || k.size() > 2)
    return InvalidArgument("diag_index must have only one or two elements, received ", k.size(), " elements.");
  *lo = k.front();
  *hi = k.back();
  if (*lo > *hi)
    return InvalidArgument("lower_diag_index must not be larger than upper_diag_index: ", *lo, " > ", *hi);
  return Status::Ok();
}

struct BandMap {
  int64_t width = 0;                 // max_diag_len
  std::vector<int64_t> mat, packed;  // element positions in the matrix / in the packed diagonals
};

BandMap MakeBandMap(int64_t m, int64_t n, int64_t lo, int64_t hi, const std::string& align) {
  const bool left_super = align.rfind("LEFT", 0) == 0;
  const bool left_sub = align.size() >= 4 && align.compare(align.size() - 4, 4, "LEFT") == 0;
  BandMap b;
  b.width = std::max<int64_t>(0, std::min(m + std::min<int64_t>(hi, 0), n - std::max<int64_t>(lo, 0)));
  for (int64_t d = lo; d <= hi; ++d) {
    const int64_t len = std::min(m + std::min<int64_t>(0, d), n - std::max<int64_t>(0, d));
    if (len <= 0) continue;
    const int64_t offset = ((d >= 0 && left_super) || (d <= 0 && left_sub)) ? 0 : b.width - len;
    for (int64_t j = 0; j < len; ++j) {
      b.mat.push_back((j + std::max<int64_t>(-d, 0)) * n + j + std::max<int64_t>(d, 0));
      b.packed.push_back((hi - d) * b.width + j + offset);
    }
  }
  return b;
}

// Copies n elements of `elem` bytes from src[from[i]] to dst[to[i]].
void Scatter(int elem, const char* src, const std::vector<int64_t>& from, char* dst,
             const std::vector<int64_t>& to) {
  for (size_t i = 0; i < from.size(); ++i) std::memcpy(dst + to[i] * elem, src + from[i] * elem, elem);
}

void FillWith(int elem, const void* value, int64_t n, char* dst) {
  if (value == nullptr) {
    std::memset(dst, 0, n * elem);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * elem, value, elem);
}

enum class DiagMode { kPart, kDiag, kSet };

class DiagKernel : public Kernel {
 public:
  // `versioned`: V2/V3, which take k (and a padding_value input, except SetDiag).
  static Status Make(const KernelDef& def, DiagMode mode, bool versioned, const char* default_align,
                     std::unique_ptr<Kernel>* out) {
    const int n_in = mode == DiagMode::kSet ? 2 : (versioned ? 2 : 1);
    NPU_RETURN_IF_ERROR(CheckArity(def, n_in, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    for (const TensorDesc& t : def.inputs)
      if (t.dtype != def.outputs[0].dtype) return Error("inputs and output must have one dtype");
    auto k = std::make_unique<DiagKernel>();
    k->mode_ = mode;
    k->elem_ = DTypeSize(def.outputs[0].dtype);
    k->padded_ = mode != DiagMode::kSet && versioned;
    int64_t lo = 0, hi = 0;
    if (versioned) NPU_RETURN_IF_ERROR(DiagIndices(def.attrs, &lo, &hi));
    std::string align;
    NPU_RETURN_IF_ERROR(def.attrs.String("align", default_align, &align));
    const Dims& matrix = mode == DiagMode::kDiag ? def.outputs[0].dims : def.inputs[0].dims;
    const Dims& packed = mode == DiagMode::kDiag ? def.inputs[0].dims
                         : mode == DiagMode::kPart ? def.outputs[0].dims : def.inputs[1].dims;
    if (matrix.size() < 2) return Error("matrix shape ", ShapeString(matrix), " must have rank >= 2");
    const int64_t m = matrix[matrix.size() - 2], n = matrix.back();
    // TF bounds k for existing matrices only: MatrixDiag's output is sized from the diagonals,
    // and an empty diagonal may lie outside it (all padding).
    if (versioned && mode != DiagMode::kDiag)
      for (int64_t d : {lo, hi})
        if (!((-m < d && d < n) || d == 0))
          return InvalidArgument("diag_index is out of bound: ", d, ". It must be between ", -m, " and ", n);
    k->map_ = MakeBandMap(m, n, lo, hi, align);
    k->mat_size_ = m * n;
    k->packed_size_ = (hi - lo + 1) * k->map_.width;
    k->batch_ = k->mat_size_ ? NumElements(matrix) / k->mat_size_ : 0;
    if (k->mat_size_ == 0) k->batch_ = NumElements(packed) / std::max<int64_t>(1, k->packed_size_);
    if (NumElements(packed) != k->batch_ * k->packed_size_)
      return Error("diagonals ", ShapeString(packed), " do not match matrices ", ShapeString(matrix),
                   " and k = (", lo, ", ", hi, ")");
    *out = std::move(k);
    return Status::Ok();
  }

  // Diag / DiagPart: the flat rank-k tensor on the diagonal of a P x P matrix.
  static Status MakeFlat(const KernelDef& def, DiagMode mode, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    const int64_t p = NumElements(mode == DiagMode::kDiag ? def.inputs[0].dims : def.outputs[0].dims);
    const int64_t full = NumElements(mode == DiagMode::kDiag ? def.outputs[0].dims : def.inputs[0].dims);
    if (full != p * p) return Error("a rank-2k tensor of ", p * p, " elements expected, got ", full);
    auto k = std::make_unique<DiagKernel>();
    k->mode_ = mode;
    k->elem_ = DTypeSize(def.outputs[0].dtype);
    k->map_ = MakeBandMap(p, p, 0, 0, "LEFT_LEFT");
    k->mat_size_ = p * p;
    k->packed_size_ = p;
    k->batch_ = 1;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const char* in = args.in<char>(0);
    char* out = args.out<char>(0);
    const void* pad = padded_ ? args.in(1) : nullptr;
    const int64_t e = elem_;
    ParallelFor(batch_, mat_size_ + packed_size_, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        switch (mode_) {
          case DiagMode::kPart:
            FillWith(elem_, pad, packed_size_, out + b * packed_size_ * e);
            Scatter(elem_, in + b * mat_size_ * e, map_.mat, out + b * packed_size_ * e, map_.packed);
            break;
          case DiagMode::kDiag:
            FillWith(elem_, pad, mat_size_, out + b * mat_size_ * e);
            Scatter(elem_, in + b * packed_size_ * e, map_.packed, out + b * mat_size_ * e, map_.mat);
            break;
          case DiagMode::kSet:
            if (in != out) std::memcpy(out + b * mat_size_ * e, in + b * mat_size_ * e, mat_size_ * e);
            Scatter(elem_, args.in<char>(1) + b * packed_size_ * e, map_.packed, out + b * mat_size_ * e,
                    map_.mat);
            break;
        }
      }
    });
    return Status::Ok();
  }

 private:
  DiagMode mode_ = DiagMode::kPart;
  int elem_ = 4;
  bool padded_ = false;
  BandMap map_;
  int64_t batch_ = 0, mat_size_ = 0, packed_size_ = 0;
};

class BandPartKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const Dims& d = def.inputs[0].dims;
    if (d.size() < 2 || d != def.outputs[0].dims) return Error("input ", ShapeString(d), " must be a batch of matrices");
    auto k = std::make_unique<BandPartKernel>();
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("num_lower", &k->lower_));
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("num_upper", &k->upper_));
    k->m_ = d[d.size() - 2];
    k->n_ = d.back();
    if (k->lower_ > k->m_)
      return InvalidArgument("num_lower must be negative or less or equal to number of rows (", k->m_, ") got: ", k->lower_);
    if (k->upper_ > k->n_)
      return InvalidArgument("num_upper must be negative or less or equal to number of columns (", k->n_, ") got: ",
                             k->upper_);
    k->batch_ = k->m_ * k->n_ ? NumElements(d) / (k->m_ * k->n_) : 0;
    k->elem_ = DTypeSize(def.outputs[0].dtype);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const char* in = args.in<char>(0);
    char* out = args.out<char>(0);
    const int64_t e = elem_;
    ParallelFor(batch_ * m_, n_, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t y = r % m_;
        // kept columns: y - lower <= x <= y + upper
        const int64_t x0 = lower_ < 0 ? 0 : std::max<int64_t>(0, y - lower_);
        const int64_t x1 = upper_ < 0 ? n_ : std::min<int64_t>(n_, y + upper_ + 1);
        char* row = out + r * n_ * e;
        const char* src = in + r * n_ * e;
        if (x1 <= x0) {
          std::memset(row, 0, n_ * e);
          continue;
        }
        std::memset(row, 0, x0 * e);
        if (src != row) std::memmove(row + x0 * e, src + x0 * e, (x1 - x0) * e);
        std::memset(row + x1 * e, 0, (n_ - x1) * e);
      }
    });
    return Status::Ok();
  }

 private:
  int64_t lower_ = -1, upper_ = -1, m_ = 0, n_ = 0, batch_ = 0;
  int elem_ = 4;
};

class CrossKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const Dims& d = def.inputs[0].dims;
    if (d != def.inputs[1].dims || d != def.outputs[0].dims)
      return InvalidArgument("Both inputs must be of same shape: ", ShapeString(d), " vs. ",
                             ShapeString(def.inputs[1].dims));
    if (d.empty() || d.back() != 3) return InvalidArgument("Arguments must have a last dimension of 3, got ", ShapeString(d));
    auto k = std::make_unique<CrossKernel>();
    k->dtype_ = def.outputs[0].dtype;
    k->n_ = NumElements(d);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    switch (ComputeTypeOf(dtype_)) {
      case ComputeType::kFloat: Run<float>(args); break;
      case ComputeType::kDouble: Run<double>(args); break;
      case ComputeType::kInt64: Run<int64_t>(args); break;
    }
    return Status::Ok();
  }

 private:
  template <class T>
  void Run(const KernelArgs& args) const {
    std::vector<T> a(n_), b(n_), c(n_);
    Load<T>(dtype_, args.in(0), n_, a.data());
    Load<T>(dtype_, args.in(1), n_, b.data());
    // integers wrap as TF's do (computed unsigned: no signed overflow)
    using U = std::conditional_t<std::is_integral_v<T>, uint64_t, T>;
    for (int64_t i = 0; i < n_; i += 3) {
      const U a0 = U(a[i]), a1 = U(a[i + 1]), a2 = U(a[i + 2]), b0 = U(b[i]), b1 = U(b[i + 1]), b2 = U(b[i + 2]);
      c[i] = T(a1 * b2 - a2 * b1);
      c[i + 1] = T(a2 * b0 - a0 * b2);
      c[i + 2] = T(a0 * b1 - a1 * b0);
    }
    Store<T>(dtype_, c.data(), n_, args.out(0));
  }

  int dtype_ = kFloat;
  int64_t n_ = 0;
};

// ConjugateTranspose of real values: a plain transpose.
class TransposeKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    std::vector<int64_t> perm;
    NPU_RETURN_IF_ERROR(def.attrs.IntList("perm", &perm));
    const Dims &in = def.inputs[0].dims, &o = def.outputs[0].dims;
    const int64_t rank = static_cast<int64_t>(in.size());
    if (static_cast<int64_t>(perm.size()) != rank)
      return InvalidArgument("transpose expects a vector of size ", rank, ". But input(1) is a vector of size ", perm.size());
    const Dims in_strides = RowMajorStrides(in);
    Dims want(rank), src(rank);
    std::vector<bool> seen(rank, false);
    for (int64_t i = 0; i < rank; ++i) {
      int64_t p;
      NPU_RETURN_IF_ERROR(NormalizeAxis(perm[i], rank, &p));
      if (seen[p]) return InvalidArgument(perm[i], " is duplicated in perm");
      seen[p] = true;
      want[i] = in[p];
      src[i] = in_strides[p];
    }
    if (o != want) return Error("output has shape ", ShapeString(o), "; expected ", ShapeString(want));
    auto k = std::make_unique<TransposeKernel>();
    k->plan_ = StridedPlan::Make(o.empty() ? Dims{1} : o, {o.empty() ? Dims{1} : RowMajorStrides(o),
                                                          src.empty() ? Dims{1} : src});
    k->elem_ = DTypeSize(def.outputs[0].dtype);
    k->empty_ = NumElements(o) == 0;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (!empty_) CopyStrided(plan_, elem_, args.in(0), args.out(0));
    return Status::Ok();
  }

 private:
  StridedPlan plan_;
  int elem_ = 4;
  bool empty_ = false;
};

KernelFactory Diag(DiagMode mode, bool versioned, const char* align) {
  return [=](const KernelDef& d, std::unique_ptr<Kernel>* k) { return DiagKernel::Make(d, mode, versioned, align, k); };
}

NPU_REGISTER_KERNEL("MatrixDiagPart", Diag(DiagMode::kPart, false, "LEFT_LEFT"));
NPU_REGISTER_KERNEL("MatrixDiagPartV2", Diag(DiagMode::kPart, true, "LEFT_LEFT"));
NPU_REGISTER_KERNEL("MatrixDiagPartV3", Diag(DiagMode::kPart, true, "RIGHT_LEFT"));
NPU_REGISTER_KERNEL("MatrixDiag", Diag(DiagMode::kDiag, false, "LEFT_LEFT"));
NPU_REGISTER_KERNEL("MatrixDiagV2", Diag(DiagMode::kDiag, true, "LEFT_LEFT"));
NPU_REGISTER_KERNEL("MatrixDiagV3", Diag(DiagMode::kDiag, true, "RIGHT_LEFT"));
NPU_REGISTER_KERNEL("MatrixSetDiag", Diag(DiagMode::kSet, false, "LEFT_LEFT"));
NPU_REGISTER_KERNEL("MatrixSetDiagV2", Diag(DiagMode::kSet, true, "LEFT_LEFT"));
NPU_REGISTER_KERNEL("MatrixSetDiagV3", Diag(DiagMode::kSet, true, "RIGHT_LEFT"));
NPU_REGISTER_KERNEL("Diag", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return DiagKernel::MakeFlat(d, DiagMode::kDiag, k);
});
NPU_REGISTER_KERNEL("DiagPart", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return DiagKernel::MakeFlat(d, DiagMode::kPart, k);
});
NPU_REGISTER_KERNEL("MatrixBandPart", BandPartKernel::Make);
NPU_REGISTER_KERNEL("Cross", CrossKernel::Make);
NPU_REGISTER_KERNEL("ConjugateTranspose", TransposeKernel::Make);

}  // namespace
}  // namespace kernels
}  // namespace npu
