// More neural-network ops (graph_engine/ops/nn_extra.py): L2Loss, DataFormatDimMap,
// DataFormatVecPermute, LRN and LRNGrad; BiasAddV1 and the V2 pools (ksize and strides folded
// into attrs) are the kernels of BiasAdd and the pools under another name.
// Float math in float32 on float32/float16/bfloat16 storage (sums in double), rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {
namespace {

// ---- ops whose kernel is another op's --------------------------------------------------------

template <const char* kTarget>
Status MakeAlias(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  const KernelFactory* factory = FindKernel(kTarget);
  if (factory == nullptr) return Error("no kernel ", kTarget);
  return (*factory)(def, out);
}

constexpr char kBiasAdd[] = "BiasAdd";   // no data_format attr: NHWC, BiasAddV1's only one
constexpr char kMaxPoolGradGrad[] = "MaxPoolGradGrad";
NPU_REGISTER_KERNEL("BiasAddV1", MakeAlias<kBiasAdd>);
NPU_REGISTER_KERNEL("MaxPoolGradGradV2", MakeAlias<kMaxPoolGradGrad>);

// ---- L2Loss ----------------------------------------------------------------------------------

class L2LossKernel : public Kernel {
 public:
  L2LossKernel(int64_t n, int dtype) : n_(n), dtype_(dtype) {}
  Status Compute(const KernelArgs& args) const override {
    FloatIn x(dtype_, args.in(0), n_);
    FloatOut y(dtype_, args.out(0), 1);
    double sum = 0;
    for (int64_t i = 0; i < n_; ++i) sum += double(x.data()[i]) * x.data()[i];
    y.data()[0] = static_cast<float>(sum / 2);
    y.Finish();
    return Status::Ok();
  }

 private:
  int64_t n_;
  int dtype_;
};

Status MakeL2Loss(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  *out = std::make_unique<L2LossKernel>(NumElements(def.inputs[0].dims), def.outputs[0].dtype);
  return Status::Ok();
}
NPU_REGISTER_KERNEL("L2Loss", MakeL2Loss);

// ---- data-format maps ------------------------------------------------------------------------

Status ReadFormats(const Attrs& attrs, std::string* src, std::string* dst) {
  NPU_RETURN_IF_ERROR(attrs.String("src_format", "NHWC", src));
  NPU_RETURN_IF_ERROR(attrs.String("dst_format", "NCHW", dst));
  if (src->size() != 4 && src->size() != 5)
    return InvalidArgument("Source format must be of length 4 or 5, received src_format = ", *src);
  if (dst->size() != 4 && dst->size() != 5)
    return InvalidArgument("Destination format must be of length 4 or 5, received dst_format = ", *dst);
  std::string a = *src, b = *dst;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b || std::unique(a.begin(), a.end()) != a.end())
    return InvalidArgument("Destination and source format must determine a permutation, got ",
                           *src, " and ", *dst);
  return Status::Ok();
}

// DimMap: out[i] = table[m] for m = (in[i] + size) % size in [0, size - 1), else the last entry
// (TF's select chain; the sum wraps in T, the remainder truncates: INT_MIN or -7 of 5 map to the
// last entry). VecPermute (`rows`): out row i = in row table[i], rows of `width` elements.
template <class T>
class TableKernel : public Kernel {
 public:
  TableKernel(std::vector<int64_t> table, bool rows, int64_t width, int64_t n)
      : table_(std::move(table)), rows_(rows), width_(width), n_(n) {}
  Status Compute(const KernelArgs& args) const override {
    const T* x = args.in<T>(0);
    T* y = args.out<T>(0);
    const int64_t size = static_cast<int64_t>(table_.size());
    if (rows_) {
      for (int64_t r = 0; r < size; ++r)
        for (int64_t j = 0; j < width_; ++j) y[r * width_ + j] = x[table_[r] * width_ + j];
    } else {
      using U = std::make_unsigned_t<T>;
      for (int64_t i = 0; i < n_; ++i) {
        const T m = static_cast<T>(static_cast<U>(x[i]) + static_cast<U>(size)) % static_cast<T>(size);
        y[i] = static_cast<T>(table_[m >= 0 && m < size - 1 ? m : size - 1]);
      }
    }
    return Status::Ok();
  }

 private:
  std::vector<int64_t> table_;
  bool rows_;
  int64_t width_, n_;
};

Status MakeTableKernel(const KernelDef& def, std::vector<int64_t> table, bool rows, int64_t width,
                       std::unique_ptr<Kernel>* out) {
  const int dtype = def.outputs[0].dtype;
  if (def.inputs[0].dtype != dtype || (dtype != kInt32 && dtype != kInt64))
    return Error("does not support ", DTypeName(def.inputs[0].dtype), "; supported: int32, int64");
  const int64_t n = NumElements(def.inputs[0].dims);
  if (dtype == kInt32) *out = std::make_unique<TableKernel<int32_t>>(std::move(table), rows, width, n);
  else *out = std::make_unique<TableKernel<int64_t>>(std::move(table), rows, width, n);
  return Status::Ok();
}

Status MakeDimMap(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  std::string src, dst;
  NPU_RETURN_IF_ERROR(ReadFormats(def.attrs, &src, &dst));
  std::vector<int64_t> table;
  for (char ch : src) table.push_back(static_cast<int64_t>(dst.find(ch)));
  return MakeTableKernel(def, std::move(table), false, 1, out);
}

Status MakeVecPermute(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  std::string src, dst;
  NPU_RETURN_IF_ERROR(ReadFormats(def.attrs, &src, &dst));
  const Dims& x = def.inputs[0].dims;
  const int64_t full = static_cast<int64_t>(src.size()), spatial = full - 2;
  if (x.size() != 1 && x.size() != 2)
    return InvalidArgument("input must be a vector or 2D tensor, but got shape ", ShapeString(x));
  if (x[0] != full && x[0] != spatial)
    return InvalidArgument(x.size() == 1 ? "1D input" : "First dimension of 2D input",
                           " must be of size ", spatial, " or ", full, ", but got shape ", ShapeString(x));
  if (x.size() == 2 && x[1] != 2)
    return InvalidArgument("Second dimension of 2D input must be of size 2, but got shape ", ShapeString(x));
  if (x[0] == spatial) {   // the spatial dimensions only
    auto strip = [](std::string s) {
      std::string r;
      for (char ch : s) if (ch != 'N' && ch != 'C') r += ch;
      return r;
    };
    src = strip(src);
    dst = strip(dst);
  }
  std::vector<int64_t> table;
  for (char ch : dst) table.push_back(static_cast<int64_t>(src.find(ch)));
  return MakeTableKernel(def, std::move(table), true, x.size() == 2 ? 2 : 1, out);
}
NPU_REGISTER_KERNEL("DataFormatDimMap", MakeDimMap);
NPU_REGISTER_KERNEL("DataFormatVecPermute", MakeVecPermute);

// ---- LRN -------------------------------------------------------------------------------------

// Over the depth (last) axis of rows of `depth` values, in float32 as TF's CPU kernels (lrn_op.cc),
// whose non-finite values this follows:
// * LRN: norm = bias + alpha * (window sum of x^2), the window [d - radius, d + radius];
//   y = x * norm^-beta (1 / norm for beta 1, rsqrt for 0.5, else exp(log(norm) * -beta)). TF sums
//   by a band-matrix product, where an inf square outside the window meets a 0 of the band (NaN)
//   and a NaN reaches every position; past depth 384 with beta 0.5 or 1, by a sliding sum
//   (alpha * x^2 added as it enters, subtracted as it leaves: inf - inf spreads NaN onward).
// * LRNGrad, TF's loop: for each position j and k in its window, dx[k] += g[j] * (-2 alpha beta
//   x[k] y[j] / norm[j] (+ norm[j]^-beta where k == j)), norm[j] summed in order.
class LrnKernel : public Kernel {
 public:
  LrnKernel(bool grad, int64_t rows, int64_t depth, int64_t radius, float bias, float alpha,
            float beta, int dtype)
      : grad_(grad), rows_(rows), depth_(depth), radius_(std::min(radius, depth)), bias_(bias),
        alpha_(alpha), beta_(beta), dtype_(dtype) {}

  Status Compute(const KernelArgs& args) const override {
    const int64_t n = rows_ * depth_;
    FloatIn first(dtype_, args.in(0), n), x(dtype_, args.in(grad_ ? 1 : 0), n),
        y(dtype_, args.in(grad_ ? 2 : 0), grad_ ? n : 0);
    FloatOut out(dtype_, args.out(0), n);
    ParallelFor(rows_, 4 * depth_ * (2 * std::max<int64_t>(radius_, 0) + 1), [&](int64_t r0, int64_t r1) {
      std::vector<float> norm(depth_);
      std::vector<int64_t> infs(depth_ + 1);
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x.data() + r * depth_;
        float* o = out.data() + r * depth_;
        if (grad_) {
          Grad(first.data() + r * depth_, xr, y.data() + r * depth_, o);
          continue;
        }
        if (depth_ > 384 && radius_ >= 0 && (beta_ == 1.0f || beta_ == 0.5f)) SlidingNorm(xr, norm.data());
        else BandNorm(xr, norm.data(), &infs);
        for (int64_t d = 0; d < depth_; ++d) {
          const float t = norm[d];
          o[d] = xr[d] * (beta_ == 1.0f ? 1.0f / t
                          : beta_ == 0.5f ? 1.0f / std::sqrt(t)
                                          : std::exp(std::log(t) * -beta_));
        }
      }
    });
    out.Finish();
    return Status::Ok();
  }

 private:
  int64_t Begin(int64_t d) const { return std::max<int64_t>(d - radius_, 0); }
  int64_t End(int64_t d) const { return std::max(Begin(d), std::min(d + radius_ + 1, depth_)); }

  // Window sums in float, in order (no prefix sums: x^2 of 9e18 beside 1 cancels them), NaN
  // where the band's zeros meet an inf square outside the window, or a NaN is in the row.
  void BandNorm(const float* x, float* norm, std::vector<int64_t>* infs) const {
    bool nan = false;
    for (int64_t d = 0; d < depth_; ++d) {
      const float sq = x[d] * x[d];
      nan |= std::isnan(sq);
      (*infs)[d + 1] = (*infs)[d] + (std::isinf(sq) ? 1 : 0);
    }
    for (int64_t d = 0; d < depth_; ++d) {
      const int64_t b = Begin(d), e = End(d);
      float sum = 0;
      for (int64_t k = b; k < e; ++k) sum += x[k] * x[k];
      if (nan || (*infs)[e] - (*infs)[b] < (*infs)[depth_]) sum = std::numeric_limits<float>::quiet_NaN();
      norm[d] = sum * alpha_ + bias_;
    }
  }

  void SlidingNorm(const float* x, float* norm) const {
    auto padded = [&](int64_t i) {   // alpha * x^2 with `radius` zeros on either side
      const int64_t d = i - radius_;
      return d >= 0 && d < depth_ ? x[d] * x[d] * alpha_ : 0.0f;
    };
    float acc = 0;
    for (int64_t i = 0; i < 2 * radius_; ++i) acc += padded(i);
    for (int64_t d = 0; d < depth_; ++d) {
      acc += padded(d + 2 * radius_);
      norm[d] = bias_ + acc;
      acc -= padded(d);
    }
  }

  void Grad(const float* g, const float* x, const float* y, float* dx) const {
    std::fill(dx, dx + depth_, 0.0f);
    for (int64_t j = 0; j < depth_; ++j) {
      float norm = 0;
      for (int64_t k = Begin(j); k < End(j); ++k) norm += x[k] * x[k];
      norm = alpha_ * norm + bias_;
      for (int64_t k = Begin(j); k < End(j); ++k) {
        float d = -2.0f * alpha_ * beta_ * x[k] * y[j] / norm;
        if (k == j) d += std::pow(norm, -beta_);
        dx[k] += d * g[j];
      }
    }
  }

  bool grad_;
  int64_t rows_, depth_, radius_;
  float bias_, alpha_, beta_;
  int dtype_;
};

Status MakeLrn(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, grad ? 3 : 1, 1));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const Dims& x = def.inputs[0].dims;
  if (x.size() != 4) return InvalidArgument("in must be 4-dimensional, got ", ShapeString(x));
  for (const TensorDesc& t : def.inputs)
    if (t.dims != x) return InvalidArgument("inputs must have one shape, got ", ShapeString(t.dims), " and ", ShapeString(x));
  int64_t radius;
  double bias, alpha, beta;
  NPU_RETURN_IF_ERROR(def.attrs.Int("depth_radius", 5, &radius));
  NPU_RETURN_IF_ERROR(def.attrs.Float("bias", 1.0, &bias));
  NPU_RETURN_IF_ERROR(def.attrs.Float("alpha", 1.0, &alpha));
  NPU_RETURN_IF_ERROR(def.attrs.Float("beta", 0.5, &beta));
  // As TF: float attrs are float32.
  *out = std::make_unique<LrnKernel>(grad, x[0] * x[1] * x[2], x[3], radius, float(bias), float(alpha),
                                     float(beta), def.outputs[0].dtype);
  return Status::Ok();
}
NPU_REGISTER_KERNEL("LRN", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeLrn(d, false, k); });
NPU_REGISTER_KERNEL("LRNGrad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeLrn(d, true, k); });

}  // namespace
}  // namespace kernels
}  // namespace npu
