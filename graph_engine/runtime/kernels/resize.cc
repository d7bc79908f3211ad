// Image resizing, NHWC, with TF's sampling positions (see graph_engine/ops/resize.py), all
// computed per output row and column at load time:
// * ResizeBilinear(Grad): two source indices and the weight of the second; the forward blends
//   four pixels, the gradient sends each output gradient back to the same four pixels;
// * ResizeNearestNeighbor(Grad): one source index; the forward copies pixels in their storage
//   type, the gradient adds them up in the compute type (exact for integers);
// * ResizeBicubic(Grad), ResizeArea: separable taps (source indices and float weights per
//   output position, as TF's kernels compute them); out = post * sum wy * (sum wx * in).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

// TF's CPU kernels are built without FMA: contracting a * b + c into one rounding would move
// sampling positions, weights and sums off TF's by an ulp (and into other pixels at edges).
#pragma GCC optimize("fp-contract=off")

namespace npu {
namespace kernels {
namespace {

struct Taps {
  std::vector<int64_t> lo, hi;
  std::vector<float> frac;   // weight of `hi`
};

// TF's CalculateResizeScale.
float ResizeScale(int64_t in, int64_t out, bool align) {
  return align && out > 1 ? float(in - 1) / float(out - 1) : float(in) / float(out);
}

Taps MakeTaps(int64_t in, int64_t out, bool align, bool half_pixel) {
  const float scale = ResizeScale(in, out, align);
  Taps t;
  for (int64_t i = 0; i < out; ++i) {
    const float pos = half_pixel ? (float(i) + 0.5f) * scale - 0.5f : float(i) * scale;
    const float f = std::floor(pos);
    t.lo.push_back(std::max<int64_t>(static_cast<int64_t>(f), 0));
    t.hi.push_back(std::min<int64_t>(static_cast<int64_t>(std::ceil(pos)), in - 1));
    t.frac.push_back(pos - f);
  }
  return t;
}

class ResizeBilinearKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, grad ? 2 : 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    bool align, half;
    NPU_RETURN_IF_ERROR(def.attrs.Bool("align_corners", false, &align));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("half_pixel_centers", false, &half));
    if (align && half) return Error("align_corners and half_pixel_centers cannot both be true");
    // small: the image; big: the resized one (the forward's output, the gradient's input 0)
    const Dims& img = grad ? def.outputs[0].dims : def.inputs[0].dims;
    const Dims& big = grad ? def.inputs[0].dims : def.outputs[0].dims;
    if (img.size() != 4 || big.size() != 4 || img[0] != big[0] || img[3] != big[3])
      return Error("images must be 4-D NHWC with equal batch and channels, got ", ShapeString(img),
                   " and ", ShapeString(big));
    // Sampling needs source pixels (TF: "input image must be of non-zero size"); an empty
    // result never gets here (the executor skips nodes whose outputs are all empty).
    if (img[1] <= 0 || img[2] <= 0 || big[1] <= 0 || big[2] <= 0)
      return Status::Error("input image must be of non-zero size and resized dimensions must be positive, got " +
                               ShapeString(img) + " and " + ShapeString(big),
                           kCodeInvalidArgument);
    const int in_dtype = def.inputs[0].dtype, out_dtype = def.outputs[0].dtype;
    const bool in_ok = ComputeTypeOf(in_dtype) == ComputeType::kFloat || (!grad && IsInteger(in_dtype));
    if (!in_ok || ComputeTypeOf(out_dtype) != ComputeType::kFloat)
      return Error("dtypes ", DTypeName(in_dtype), " -> ", DTypeName(out_dtype), " not supported "
                   "(allowed: float32, float16, bfloat16", grad ? ")" : "; integer images)");
    auto k = std::make_unique<ResizeBilinearKernel>();
    k->grad_ = grad;
    k->img_ = img;
    k->big_ = big;
    k->ys_ = MakeTaps(img[1], big[1], align, half);
    k->xs_ = MakeTaps(img[2], big[2], align, half);
    k->in_dtype_ = def.inputs[0].dtype;
    k->out_dtype_ = def.outputs[0].dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t n = img_[0], h = img_[1], w = img_[2], c = img_[3], oh = big_[1], ow = big_[2];
    std::vector<float> src(NumElements(grad_ ? big_ : img_));
    Load<float>(in_dtype_, args.in(0), static_cast<int64_t>(src.size()), src.data());
    std::vector<float> dst(NumElements(grad_ ? img_ : big_), 0.f);
    // The gradient accumulates into shared pixels: parallel over images, not rows.
    ParallelFor(grad_ ? n : n * oh, 8 * ow * c * (grad_ ? oh : 1), [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t b = grad_ ? job : job / oh;
        for (int64_t y = grad_ ? 0 : job % oh; y < (grad_ ? oh : job % oh + 1); ++y) {
          const float fy = ys_.frac[y];
          const int64_t r0 = (b * h + ys_.lo[y]) * w, r1 = (b * h + ys_.hi[y]) * w;
          for (int64_t x = 0; x < ow; ++x) {
            const float fx = xs_.frac[x];
            const int64_t p00 = (r0 + xs_.lo[x]) * c, p01 = (r0 + xs_.hi[x]) * c;
            const int64_t p10 = (r1 + xs_.lo[x]) * c, p11 = (r1 + xs_.hi[x]) * c;
            const int64_t o = ((b * oh + y) * ow + x) * c;
            for (int64_t ch = 0; ch < c; ++ch) {
              if (grad_) {
                const float g = src[o + ch];
                dst[p00 + ch] += g * (1 - fy) * (1 - fx);
                dst[p01 + ch] += g * (1 - fy) * fx;
                dst[p10 + ch] += g * fy * (1 - fx);
                dst[p11 + ch] += g * fy * fx;
              } else {
                const float top = src[p00 + ch] + (src[p01 + ch] - src[p00 + ch]) * fx;
                const float bottom = src[p10 + ch] + (src[p11 + ch] - src[p10 + ch]) * fx;
                dst[o + ch] = top + (bottom - top) * fy;
              }
            }
          }
        }
      }
    });
    Store<float>(out_dtype_, dst.data(), static_cast<int64_t>(dst.size()), args.out(0));
    return Status::Ok();
  }

 private:
  bool grad_ = false;
  Dims img_, big_;
  Taps ys_, xs_;
  int in_dtype_ = 0, out_dtype_ = 0;
};

NPU_REGISTER_KERNEL("ResizeBilinear", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ResizeBilinearKernel::Make(d, false, k);
});
NPU_REGISTER_KERNEL("ResizeBilinearGrad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ResizeBilinearKernel::Make(d, true, k);
});

// Checks shared by the resize kernels: 4-D images with equal batch and channels and non-empty
// spatial sizes (an empty result never gets here: the executor skips it). `empty_big`: a
// gradient that may be empty (ResizeNearestNeighborGrad's: TF returns zeros).
Status CheckImages(const Dims& img, const Dims& big, bool empty_big = false) {
  if (img.size() != 4 || big.size() != 4 || img[0] != big[0] || img[3] != big[3])
    return Error("images must be 4-D NHWC with equal batch and channels, got ", ShapeString(img),
                 " and ", ShapeString(big));
  if (img[1] <= 0 || img[2] <= 0 || big[1] < 0 || big[2] < 0 || (!empty_big && (big[1] == 0 || big[2] == 0)))
    return InvalidArgument("input image must be of non-zero size and resized dimensions must be "
                           "positive, got ", ShapeString(img), " and ", ShapeString(big));
  return Status::Ok();
}

// ---- nearest neighbor ----------------------------------------------------------------------

// TF's source index per output position: floor (with align_corners round) of the position.
std::vector<int64_t> NearestIndices(int64_t in, int64_t out, bool align, bool half) {
  const float scale = ResizeScale(in, out, align);
  std::vector<int64_t> idx(out);
  for (int64_t i = 0; i < out; ++i) {
    const float pos = half ? (float(i) + 0.5f) * scale : float(i) * scale;
    const int64_t x = std::min<int64_t>(align ? static_cast<int64_t>(std::round(pos))
                                              : static_cast<int64_t>(std::floor(pos)), in - 1);
    idx[i] = half ? std::max<int64_t>(x, 0) : x;
  }
  return idx;
}

class ResizeNearestKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    bool align, half;
    NPU_RETURN_IF_ERROR(def.attrs.Bool("align_corners", false, &align));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("half_pixel_centers", false, &half));
    if (!grad && align && half) return Error("align_corners and half_pixel_centers cannot both be true");
    const Dims& img = grad ? def.outputs[0].dims : def.inputs[0].dims;
    const Dims& big = grad ? def.inputs[0].dims : def.outputs[0].dims;
    NPU_RETURN_IF_ERROR(CheckImages(img, big, grad));
    if (def.inputs[0].dtype != def.outputs[0].dtype || !IsSupportedDType(def.inputs[0].dtype))
      return Error("dtypes ", DTypeName(def.inputs[0].dtype), " -> ", DTypeName(def.outputs[0].dtype),
                   " not supported");
    auto k = std::make_unique<ResizeNearestKernel>();
    k->grad_ = grad;
    k->img_ = img;
    k->big_ = big;
    k->ys_ = NearestIndices(img[1], big[1], align, half);
    k->xs_ = NearestIndices(img[2], big[2], align, half);
    k->dtype_ = def.inputs[0].dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (!grad_) {
      const int64_t oh = big_[1], ow = big_[2], row = img_[3] * DTypeSize(dtype_);
      const char* src = args.in<char>(0);
      char* dst = args.out<char>(0);
      ParallelFor(big_[0] * oh, ow * row, [&](int64_t begin, int64_t end) {
        for (int64_t job = begin; job < end; ++job) {
          const int64_t b = job / oh, y = job % oh;
          const char* in_row = src + (b * img_[1] + ys_[y]) * img_[2] * row;
          for (int64_t x = 0; x < ow; ++x)
            std::memcpy(dst + (job * ow + x) * row, in_row + xs_[x] * row, row);
        }
      });
      return Status::Ok();
    }
    if (ComputeTypeOf(dtype_) == ComputeType::kInt64) return Grad<int64_t>(args);
    return Grad<float>(args);
  }

 private:
  template <class T>
  Status Grad(const KernelArgs& args) const {
    const int64_t h = img_[1], w = img_[2], c = img_[3], oh = big_[1], ow = big_[2];
    std::vector<T> src(NumElements(big_)), dst(NumElements(img_), T(0));
    Load<T>(dtype_, args.in(0), static_cast<int64_t>(src.size()), src.data());
    ParallelFor(img_[0], oh * ow * c, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t x = 0; x < ow; ++x) {
            const T* g = &src[((b * oh + y) * ow + x) * c];
            T* d = &dst[((b * h + ys_[y]) * w + xs_[x]) * c];
            for (int64_t ch = 0; ch < c; ++ch) d[ch] += g[ch];
          }
    });
    Store<T>(dtype_, dst.data(), static_cast<int64_t>(dst.size()), args.out(0));
    return Status::Ok();
  }

  bool grad_ = false;
  Dims img_, big_;
  std::vector<int64_t> ys_, xs_;
  int dtype_ = 0;
};

NPU_REGISTER_KERNEL("ResizeNearestNeighbor", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ResizeNearestKernel::Make(d, false, k);
});
NPU_REGISTER_KERNEL("ResizeNearestNeighborGrad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ResizeNearestKernel::Make(d, true, k);
});

// ---- separable resampling: bicubic and area ------------------------------------------------

// Per output position along one axis, the source indices it reads and their weights: position
// i reads index[begin[i] .. begin[i + 1]).
struct AxisTaps {
  std::vector<int64_t> begin{0}, index;
  std::vector<float> weight;
  void Add(int64_t i, float w) { index.push_back(i); weight.push_back(w); }
  void Next() { begin.push_back(static_cast<int64_t>(index.size())); }
};

int64_t Bound(int64_t i, int64_t n) { return std::min(n - 1, std::max<int64_t>(0, i)); }

constexpr int kCubicTable = 1024;

// TF's InitCoeffsTable: per 1/1024 step x of the fractional position, the cubic's weight at
// distance x and at distance x + 1 (a in double, stored as float, exactly as TF).
std::vector<float> CubicTable(double a) {
  std::vector<float> t((kCubicTable + 1) * 2);
  for (int i = 0; i <= kCubicTable; ++i) {
    float x = i * 1.0 / kCubicTable;
    t[i * 2] = ((a + 2) * x - (a + 3)) * x * x + 1;
    x += 1.0;
    t[i * 2 + 1] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  }
  return t;
}

// TF's GetWeightsAndIndices: Keys' cubic (a = -0.5) with half_pixel_centers, taps outside the
// image dropped and the rest renormalized; else a = -0.75 with the taps clamped to the edge.
AxisTaps BicubicTaps(int64_t in, int64_t out, bool align, bool half) {
  static const std::vector<float> legacy = CubicTable(-0.75), keys = CubicTable(-0.5);
  const float* t = half ? keys.data() : legacy.data();
  const float scale = ResizeScale(in, out, align);
  AxisTaps taps;
  for (int64_t i = 0; i < out; ++i) {
    const float pos = half ? (float(i) + 0.5f) * scale - 0.5f : float(i) * scale;
    const int64_t loc = static_cast<int64_t>(std::floor(pos));
    const int64_t off = lrintf((pos - loc) * kCubicTable);
    float w[4] = {t[off * 2 + 1], t[off * 2], t[(kCubicTable - off) * 2],
                  t[(kCubicTable - off) * 2 + 1]};
    int64_t idx[4];
    for (int k = 0; k < 4; ++k) {
      idx[k] = Bound(loc - 1 + k, in);
      if (half && idx[k] != loc - 1 + k) w[k] = 0.0f;
    }
    const float sum = w[0] + w[1] + w[2] + w[3];
    if (half && std::abs(sum) >= 1000.0f * std::numeric_limits<float>::min())
      for (float& v : w) v *= 1.0f / sum;
    for (int k = 0; k < 4; ++k) taps.Add(idx[k], w[k]);
    taps.Next();
  }
  return taps;
}

// TF's ResizeArea: the source pixels the box [i * scale, (i + 1) * scale) covers, each weighted
// by the part of it covered (indices clamped to the image).
// ResizeArea's scale: TF 2.21's area kernel does not align the corners of a 1-pixel axis (its
// aligned scale would be 0): in / out there, as its results show.
float AreaScale(int64_t in, int64_t out, bool align) { return ResizeScale(in, out, align && in > 1); }

AxisTaps AreaTaps(int64_t in, int64_t out, bool align) {
  const float scale = AreaScale(in, out, align);
  AxisTaps taps;
  for (int64_t i = 0; i < out; ++i) {
    const float lo = i * scale, hi = (i + 1) * scale;
    const int64_t end = static_cast<int64_t>(std::ceil(hi));
    for (int64_t j = static_cast<int64_t>(std::floor(lo)); j < end; ++j) {
      const float w = j < lo ? (j + 1 > hi ? scale : j + 1 - lo) : (j + 1 > hi ? hi - j : 1.0f);
      taps.Add(Bound(j, in), w);
    }
    taps.Next();
  }
  return taps;
}

enum class Resampling { kBicubic, kArea };

class SeparableResizeKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, Resampling how, bool grad, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, grad ? 2 : 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    bool align, half;
    NPU_RETURN_IF_ERROR(def.attrs.Bool("align_corners", false, &align));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("half_pixel_centers", false, &half));
    if (align && half) return Error("align_corners and half_pixel_centers cannot both be true");
    const Dims& img = grad ? def.outputs[0].dims : def.inputs[0].dims;
    const Dims& big = grad ? def.inputs[0].dims : def.outputs[0].dims;
    NPU_RETURN_IF_ERROR(CheckImages(img, big));
    const int in_dtype = def.inputs[0].dtype, out_dtype = def.outputs[0].dtype;
    const bool in_ok = ComputeTypeOf(in_dtype) == ComputeType::kFloat || (!grad && IsInteger(in_dtype));
    if (!in_ok || ComputeTypeOf(out_dtype) != ComputeType::kFloat)
      return Error("dtypes ", DTypeName(in_dtype), " -> ", DTypeName(out_dtype), " not supported");
    auto k = std::make_unique<SeparableResizeKernel>();
    k->grad_ = grad;
    k->img_ = img;
    k->big_ = big;
    if (how == Resampling::kBicubic) {
      k->ys_ = BicubicTaps(img[1], big[1], align, half);
      k->xs_ = BicubicTaps(img[2], big[2], align, half);
    } else {
      k->ys_ = AreaTaps(img[1], big[1], align);
      k->xs_ = AreaTaps(img[2], big[2], align);
      k->post_ = 1.0 / (AreaScale(img[1], big[1], align) * AreaScale(img[2], big[2], align));
    }
    k->in_dtype_ = in_dtype;
    k->out_dtype_ = out_dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t h = img_[1], w = img_[2], c = img_[3], oh = big_[1], ow = big_[2];
    std::vector<float> src(NumElements(grad_ ? big_ : img_));
    Load<float>(in_dtype_, args.in(0), static_cast<int64_t>(src.size()), src.data());
    std::vector<float> dst(NumElements(grad_ ? img_ : big_), 0.f);
    if (grad_) {        // accumulates into shared pixels: parallel over images
      ParallelFor(img_[0], 16 * oh * ow * c, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b)
          for (int64_t y = 0; y < oh; ++y)
            for (int64_t x = 0; x < ow; ++x) {
              const float* g = &src[((b * oh + y) * ow + x) * c];
              for (int64_t ty = ys_.begin[y]; ty < ys_.begin[y + 1]; ++ty)
                for (int64_t tx = xs_.begin[x]; tx < xs_.begin[x + 1]; ++tx) {
                  const float wy = ys_.weight[ty], wx = xs_.weight[tx];
                  float* d = &dst[((b * h + ys_.index[ty]) * w + xs_.index[tx]) * c];
                  for (int64_t ch = 0; ch < c; ++ch) d[ch] += g[ch] * wy * wx;
                }
            }
      });
    } else {
      ParallelFor(img_[0] * oh, 16 * ow * c, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(c), row(c);
        for (int64_t job = begin; job < end; ++job) {
          const int64_t b = job / oh, y = job % oh;
          for (int64_t x = 0; x < ow; ++x) {
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t ty = ys_.begin[y]; ty < ys_.begin[y + 1]; ++ty) {
              std::fill(row.begin(), row.end(), 0.f);
              for (int64_t tx = xs_.begin[x]; tx < xs_.begin[x + 1]; ++tx) {
                const float wx = xs_.weight[tx];
                const float* p = &src[((b * h + ys_.index[ty]) * w + xs_.index[tx]) * c];
                for (int64_t ch = 0; ch < c; ++ch) row[ch] += p[ch] * wx;
              }
              const float wy = ys_.weight[ty];
              for (int64_t ch = 0; ch < c; ++ch) acc[ch] += row[ch] * wy;
            }
            float* o = &dst[(job * ow + x) * c];
            for (int64_t ch = 0; ch < c; ++ch) o[ch] = acc[ch] * post_;
          }
        }
      });
    }
    Store<float>(out_dtype_, dst.data(), static_cast<int64_t>(dst.size()), args.out(0));
    return Status::Ok();
  }

 private:
  bool grad_ = false;
  Dims img_, big_;
  AxisTaps ys_, xs_;
  float post_ = 1.0f;
  int in_dtype_ = 0, out_dtype_ = 0;
};

NPU_REGISTER_KERNEL("ResizeBicubic", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return SeparableResizeKernel::Make(d, Resampling::kBicubic, false, k);
});
NPU_REGISTER_KERNEL("ResizeBicubicGrad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return SeparableResizeKernel::Make(d, Resampling::kBicubic, true, k);
});
NPU_REGISTER_KERNEL("ResizeArea", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return SeparableResizeKernel::Make(d, Resampling::kArea, false, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
