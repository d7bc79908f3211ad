// CropAndResize (with its image and boxes gradients) and ImageProjectiveTransformV2/V3, NHWC, as
// TF's CPU kernels compute them (tensorflow/core/kernels/image/crop_and_resize_op.cc,
// image_ops.h): sampling positions in float32, the same floor/ceil/round of them, the same
// extrapolation and fill rules; see graph_engine/ops/image.py for the references.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <string>
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

// ---- CropAndResize -----------------------------------------------------------------------------

// TF's sampling positions of one box along an axis of `size` pixels for a crop of `crop`:
// lo * (size - 1) + i * scale, or the box's middle for a crop of 1. CropAndResizeGradBoxes
// computes scale as (hi - lo) * ((size - 1) / (crop - 1)) (`ratio_form`), the others as
// (hi - lo) * (size - 1) / (crop - 1).
void CropPositions(float lo, float hi, int64_t size, int64_t crop, bool ratio_form, float* pos) {
  if (crop == 1) {
    pos[0] = 0.5 * (lo + hi) * (size - 1);
    return;
  }
  const float scale = ratio_form ? (hi - lo) * (static_cast<float>(size - 1) / (crop - 1))
                                 : (hi - lo) * (size - 1) / (crop - 1);
  for (int64_t i = 0; i < crop; ++i) pos[i] = lo * (size - 1) + i * scale;
}

bool Inside(float p, int64_t size) { return !(p < 0 || p > size - 1); }

// Whether a crop samples at a NaN position (a non-finite box): TF's gradients do not check the
// boxes, and such a position passes their range check and indexes pixel floor(NaN), out of
// bounds. Here an InvalidArgument (tools/fuzz/ops.py TF_UNCHECKED); infinite positions are
// outside the image, skipped as TF skips them.
bool SamplesNaN(const std::vector<float>& ys, int64_t h, const std::vector<float>& xs, int64_t w) {
  bool ny = false, nx = false, iy = false, ix = false;
  for (float p : ys) (std::isnan(p) ? ny : iy) |= Inside(p, h);
  for (float p : xs) (std::isnan(p) ? nx : ix) |= Inside(p, w);
  return (ny && (nx || ix)) || (nx && iy);
}

enum class CropOp { kForward, kGradImage, kGradBoxes };

class CropAndResizeKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, CropOp op, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, op == CropOp::kGradBoxes ? 4 : 3, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<CropAndResizeKernel>();
    k->op_ = op;
    std::string method;
    NPU_RETURN_IF_ERROR(def.attrs.String("method", "bilinear", &method));
    if (method != "bilinear" && (method != "nearest" || op == CropOp::kGradBoxes))
      return InvalidArgument("method must be 'bilinear'", op == CropOp::kGradBoxes ? "" : " or 'nearest'",
                             ", got '", method, "'");
    k->nearest_ = method == "nearest";
    double extrapolation;
    NPU_RETURN_IF_ERROR(def.attrs.Float("extrapolation_value", 0.0, &extrapolation));
    k->extrapolation_ = static_cast<float>(extrapolation);
    // image: the forward's and GradBoxes' input, GradImage's output; crops: [N, ch, cw, D]
    const int boxes_at = op == CropOp::kGradBoxes ? 2 : 1;
    k->image_ = op == CropOp::kGradImage ? def.outputs[0].dims : def.inputs[op == CropOp::kGradBoxes ? 1 : 0].dims;
    k->crops_ = op == CropOp::kForward ? def.outputs[0].dims : def.inputs[0].dims;
    const Dims& boxes = def.inputs[boxes_at].dims;
    const Dims& box_ind = def.inputs[boxes_at + 1].dims;
    if (k->image_.size() != 4 || k->crops_.size() != 4 || k->image_[3] != k->crops_[3])
      return Error("image ", ShapeString(k->image_), " and crops ", ShapeString(k->crops_),
                   " must be 4-D with equal depth");
    if (k->image_[1] <= 0 || k->image_[2] <= 0 || k->crops_[1] <= 0 || k->crops_[2] <= 0)
      return InvalidArgument("image and crop dimensions must be positive, got ", ShapeString(k->image_),
                             " and ", ShapeString(k->crops_));
    if (boxes.size() != 2 || boxes[1] != 4 || box_ind != Dims{boxes[0]} || boxes[0] != k->crops_[0])
      return Error("boxes ", ShapeString(boxes), " must be [num_boxes, 4] and box_ind ",
                   ShapeString(box_ind), " [num_boxes] with num_boxes = ", k->crops_[0]);
    if (def.inputs[boxes_at].dtype != kFloat || def.inputs[boxes_at + 1].dtype != kInt32)
      return Error("boxes must be float32 and box_ind int32");
    k->image_dtype_ = op == CropOp::kGradImage ? def.outputs[0].dtype : def.inputs[op == CropOp::kGradBoxes ? 1 : 0].dtype;
    if (ComputeTypeOf(k->image_dtype_) == ComputeType::kDouble || !IsSupportedDType(k->image_dtype_))
      return Error("image dtype ", DTypeName(k->image_dtype_), " not supported");
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int boxes_at = op_ == CropOp::kGradBoxes ? 2 : 1;
    const int64_t n = crops_[0];
    const float* boxes = args.in<float>(boxes_at);
    std::vector<int64_t> box_ind(n);
    Load<int64_t>(kInt32, args.in(boxes_at + 1), n, box_ind.data());
    const int64_t h = image_[1], w = image_[2], d = image_[3], ch = crops_[1], cw = crops_[2];
    if (op_ == CropOp::kForward) {       // as TF: only the forward checks the boxes
      for (int64_t i = 0; i < 4 * n; ++i)
        if (!std::isfinite(boxes[i])) return InvalidArgument("Boxes contains at least one element that is not finite");
    } else {
      std::vector<float> ys(ch), xs(cw);
      for (int64_t b = 0; b < n; ++b) {
        CropPositions(boxes[4 * b], boxes[4 * b + 2], h, ch, op_ == CropOp::kGradBoxes, ys.data());
        CropPositions(boxes[4 * b + 1], boxes[4 * b + 3], w, cw, op_ == CropOp::kGradBoxes, xs.data());
        if (SamplesNaN(ys, h, xs, w))
          return InvalidArgument("Boxes sample the image at NaN positions (box ", b, " is not finite)");
      }
    }
    for (int64_t i = 0; i < n; ++i)
      if (box_ind[i] < 0 || box_ind[i] >= image_[0])
        return OutOfRange("box_index has values outside [0, batch_size = ", image_[0], "): box_ind[", i,
                               "] = ", box_ind[i]);
    std::vector<float> image(op_ == CropOp::kGradImage ? 0 : NumElements(image_));
    if (!image.empty()) Load<float>(image_dtype_, args.in(op_ == CropOp::kGradBoxes ? 1 : 0), image.size(), image.data());
    const float* grads = op_ == CropOp::kForward ? nullptr : args.in<float>(0);
    std::vector<float> out(op_ == CropOp::kForward ? NumElements(crops_)
                           : op_ == CropOp::kGradImage ? NumElements(image_) : 4 * n, 0.f);
    // GradImage adds crops into shared pixels: one box after the other, each term and sum rounded
    // to T as TF's CPU kernel accumulates in T (float16 sums differ from float32 ones).
    const bool half = op_ == CropOp::kGradImage && image_dtype_ == kHalf;
    auto round = [half](float v) { return half ? HalfToFloat(FloatToHalf(v)) : v; };
    auto add = [&](float& sum, float v) { sum = round(sum + round(v)); };
    ParallelFor(op_ == CropOp::kGradImage ? 1 : n, ch * cw * d * 8, [&](int64_t begin, int64_t end) {
      std::vector<float> ys(ch), xs(cw);
      for (int64_t b = op_ == CropOp::kGradImage ? 0 : begin; b < (op_ == CropOp::kGradImage ? n : end); ++b) {
        const float* box = boxes + 4 * b;
        CropPositions(box[0], box[2], h, ch, op_ == CropOp::kGradBoxes, ys.data());
        CropPositions(box[1], box[3], w, cw, op_ == CropOp::kGradBoxes, xs.data());
        const float* img = image.data() + box_ind[b] * h * w * d;
        for (int64_t y = 0; y < ch; ++y) {
          const bool y_in = Inside(ys[y], h);
          const int64_t top = y_in ? static_cast<int64_t>(std::floor(ys[y])) : 0;
          const int64_t bottom = y_in ? static_cast<int64_t>(std::ceil(ys[y])) : 0;
          const float fy = ys[y] - top;
          for (int64_t x = 0; x < cw; ++x) {
            const int64_t o = ((b * ch + y) * cw + x) * d;
            if (!y_in || !Inside(xs[x], w)) {
              if (op_ == CropOp::kForward)
                for (int64_t c = 0; c < d; ++c) out[o + c] = extrapolation_;
              continue;
            }
            const int64_t left = static_cast<int64_t>(std::floor(xs[x]));
            const int64_t right = static_cast<int64_t>(std::ceil(xs[x]));
            const float fx = xs[x] - left;
            if (nearest_ && op_ != CropOp::kGradBoxes) {
              const int64_t p = (std::lround(ys[y]) * w + std::lround(xs[x])) * d;
              for (int64_t c = 0; c < d; ++c) {
                if (op_ == CropOp::kForward) out[o + c] = img[p + c];
                else add(out[box_ind[b] * h * w * d + p + c], grads[o + c]);
              }
              continue;
            }
            const int64_t tl = (top * w + left) * d, tr = (top * w + right) * d;
            const int64_t bl = (bottom * w + left) * d, br = (bottom * w + right) * d;
            for (int64_t c = 0; c < d; ++c) {
              if (op_ == CropOp::kForward) {
                const float t = img[tl + c] + (img[tr + c] - img[tl + c]) * fx;
                const float bo = img[bl + c] + (img[br + c] - img[bl + c]) * fx;
                out[o + c] = t + (bo - t) * fy;
              } else if (op_ == CropOp::kGradImage) {
                float* g = out.data() + box_ind[b] * h * w * d;
                const float dtop = (1 - fy) * grads[o + c], dbottom = fy * grads[o + c];
                add(g[tl + c], (1 - fx) * dtop);
                add(g[tr + c], fx * dtop);
                add(g[bl + c], (1 - fx) * dbottom);
                add(g[br + c], fx * dbottom);
              } else {
                float gy = (1 - fx) * (img[bl + c] - img[tl + c]) + fx * (img[br + c] - img[tr + c]);
                float gx = (1 - fy) * (img[tr + c] - img[tl + c]) + fy * (img[br + c] - img[bl + c]);
                gy *= grads[o + c];
                gx *= grads[o + c];
                float* gb = out.data() + 4 * b;
                if (ch > 1) {
                  const float ratio = static_cast<float>(h - 1) / (ch - 1);
                  gb[0] += gy * (h - 1 - y * ratio);
                  gb[2] += gy * (y * ratio);
                } else {
                  gb[0] += gy * 0.5 * (h - 1);
                  gb[2] += gy * 0.5 * (h - 1);
                }
                if (cw > 1) {
                  const float ratio = static_cast<float>(w - 1) / (cw - 1);
                  gb[1] += gx * (w - 1 - x * ratio);
                  gb[3] += gx * (x * ratio);
                } else {
                  gb[1] += gx * 0.5 * (w - 1);
                  gb[3] += gx * 0.5 * (w - 1);
                }
              }
            }
          }
        }
      }
    });
    Store<float>(op_ == CropOp::kGradImage ? image_dtype_ : kFloat, out.data(), out.size(), args.out(0));
    return Status::Ok();
  }

 private:
  CropOp op_ = CropOp::kForward;
  bool nearest_ = false;
  float extrapolation_ = 0.f;
  Dims image_, crops_;
  int image_dtype_ = 0;
};

NPU_REGISTER_KERNEL("CropAndResize", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return CropAndResizeKernel::Make(d, CropOp::kForward, k);
});
NPU_REGISTER_KERNEL("CropAndResizeGradImage", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return CropAndResizeKernel::Make(d, CropOp::kGradImage, k);
});
NPU_REGISTER_KERNEL("CropAndResizeGradBoxes", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return CropAndResizeKernel::Make(d, CropOp::kGradBoxes, k);
});

// ---- ImageProjectiveTransformV2/V3 -----------------------------------------------------------------

enum class Fill { kReflect, kWrap, kConstant, kNearest };

// DenseIndex(v) and int(v) of a float as TF's x86 build computes them (cvttss2si): truncation,
// and the "integer indefinite" INT64_MIN / INT32_MIN for NaN and out-of-range values.
int64_t ToIndex(float v) {
  return v >= -9223372036854775808.0f && v < 9223372036854775808.0f ? static_cast<int64_t>(v)
                                                                      : std::numeric_limits<int64_t>::min();
}

int64_t ToInt(float v, bool int32) {
  if (!int32) return ToIndex(v);
  return v >= -2147483648.0f && v < 2147483648.0f ? static_cast<int64_t>(v) : std::numeric_limits<int32_t>::min();
}

// n * i in DenseIndex arithmetic, wrapping as TF's build does on overflow.
float WrapMul(int64_t n, int64_t i) {
  return static_cast<float>(static_cast<int64_t>(static_cast<uint64_t>(n) * static_cast<uint64_t>(i)));
}

// TF's MapCoordinate (scipy.ndimage's modes): a coordinate outside [0, n - 1] mapped inside, in
// TF's mixed float / DenseIndex arithmetic (huge and infinite coordinates included); NaN stays.
float MapCoordinate(float c, int64_t n, Fill mode) {
  if (mode == Fill::kConstant) return c;
  if (mode == Fill::kReflect) {
    if (c < 0) {
      if (n <= 1) {
        c = 0;
      } else {
        const int64_t sz2 = 2 * n;
        if (c < sz2) c = WrapMul(sz2, ToIndex(-c / sz2)) + c;
        c = c < -n ? c + sz2 : -c - 1;
      }
    } else if (c > n - 1) {
      if (n <= 1) {
        c = 0;
      } else {
        const int64_t sz2 = 2 * n;
        c -= WrapMul(sz2, ToIndex(c / sz2));
        if (c >= n) c = sz2 - c - 1;
      }
    }
  } else if (mode == Fill::kWrap) {
    if (c < 0) {
      c = n <= 1 ? 0 : c + WrapMul(n, ToIndex(-c / (n - 1)) + 1);
    } else if (c > n - 1) {
      c = n <= 1 ? 0 : c - WrapMul(n, ToIndex(c / (n - 1)));
    }
  }
  return std::min<float>(std::max<float>(c, 0.0f), n - 1);     // std::: NaN stays NaN
}

class ProjectiveTransformKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, bool v3, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, v3 ? 3 : 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<ProjectiveTransformKernel>();
    std::string interpolation, fill;
    NPU_RETURN_IF_ERROR(def.attrs.String("interpolation", &interpolation));
    NPU_RETURN_IF_ERROR(def.attrs.String("fill_mode", "CONSTANT", &fill));
    if (interpolation != "NEAREST" && interpolation != "BILINEAR")
      return InvalidArgument("Invalid interpolation ", interpolation);
    k->bilinear_ = interpolation == "BILINEAR";
    if (fill == "REFLECT") k->fill_ = Fill::kReflect;
    else if (fill == "WRAP") k->fill_ = Fill::kWrap;
    else if (fill == "CONSTANT") k->fill_ = Fill::kConstant;
    else if (fill == "NEAREST") k->fill_ = Fill::kNearest;
    else return InvalidArgument("Invalid fill_mode ", fill);
    k->in_ = def.inputs[0].dims;
    k->out_ = def.outputs[0].dims;
    const Dims& t = def.inputs[1].dims;
    if (k->in_.size() != 4 || k->out_.size() != 4 || k->in_[0] != k->out_[0] || k->in_[3] != k->out_[3])
      return Error("images ", ShapeString(k->in_), " and output ", ShapeString(k->out_), " must be 4-D NHWC");
    if (t.size() != 2 || t[1] != 8 || (t[0] != 1 && t[0] != k->in_[0]))
      return InvalidArgument("Input transform should be num_images x 8 or 1 x 8, got ", ShapeString(t));
    if (def.inputs[1].dtype != kFloat || (v3 && def.inputs[2].dtype != kFloat))
      return Error("transforms and fill_value must be float32");
    k->per_image_ = t[0] != 1;
    k->v3_ = v3;
    k->dtype_ = def.inputs[0].dtype;
    if (def.outputs[0].dtype != k->dtype_ || ComputeTypeOf(k->dtype_) == ComputeType::kDouble)
      return Error("dtype ", DTypeName(k->dtype_), " not supported");
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const float fill = v3_ ? *args.in<float>(2) : 0.0f;
    // Integers: TF's T(fill_value); floats keep fill_value's float32 (float16 and bfloat16 are
    // float32 computations rounded once, as the sweep's reference).
    if (ComputeTypeOf(dtype_) == ComputeType::kInt64) return Run<int64_t>(args, ToInt(fill, dtype_ == kInt32));
    return Run<float>(args, fill);
  }

 private:
  // T: the compute type (exact for integers: NEAREST copies values; BILINEAR computes in float32
  // and converts as TF's T(), x86's INT_MIN for NaN and out-of-range results).
  template <class T>
  Status Run(const KernelArgs& args, T fill) const {
    const int64_t h = in_[1], w = in_[2], c = in_[3], oh = out_[1], ow = out_[2];
    const bool int32 = dtype_ == kInt32;
    std::vector<T> src(NumElements(in_)), dst(NumElements(out_));
    Load<T>(dtype_, args.in(0), src.size(), src.data());
    const float* transforms = args.in<float>(1);
    ParallelFor(out_[0] * oh, ow * c * 8, [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t b = job / oh, y = job % oh;
        const float* t = transforms + (per_image_ ? 8 * b : 0);
        const T* img = src.data() + b * h * w * c;
        // Indices from ToIndex: NaN and huge coordinates read fill_value, as TF's.
        auto read = [&](int64_t yy, int64_t xx, int64_t ch) -> T {
          return 0 <= yy && yy < h && 0 <= xx && xx < w ? img[(yy * w + xx) * c + ch] : fill;
        };
        for (int64_t x = 0; x < ow; ++x) {
          T* o = dst.data() + (job * ow + x) * c;
          const float k = t[6] * x + t[7] * y + 1.f;
          if (k == 0) {          // an infinite coordinate: outside the image
            for (int64_t ch = 0; ch < c; ++ch) o[ch] = fill;
            continue;
          }
          const float ix = (t[0] * x + t[1] * y + t[2]) / k, iy = (t[3] * x + t[4] * y + t[5]) / k;
          const float mx = MapCoordinate(ix, w, fill_), my = MapCoordinate(iy, h, fill_);
          if (!bilinear_) {
            const int64_t ry = ToIndex(std::round(my)), rx = ToIndex(std::round(mx));
            for (int64_t ch = 0; ch < c; ++ch) o[ch] = read(ry, rx, ch);
            continue;
          }
          // TF's weights: a NaN coordinate makes NaN (INT_MIN for integers); one beyond 2^24,
          // where x0 + 1 == x0, weights 0 (reading fill_value).
          const float y0 = std::floor(my), x0 = std::floor(mx), y1 = y0 + 1, x1 = x0 + 1;
          const int64_t iy0 = ToIndex(y0), ix0 = ToIndex(x0), iy1 = ToIndex(y1), ix1 = ToIndex(x1);
          for (int64_t ch = 0; ch < c; ++ch) {
            const float top = (x1 - mx) * static_cast<float>(read(iy0, ix0, ch)) +
                              (mx - x0) * static_cast<float>(read(iy0, ix1, ch));
            const float bottom = (x1 - mx) * static_cast<float>(read(iy1, ix0, ch)) +
                                 (mx - x0) * static_cast<float>(read(iy1, ix1, ch));
            const float v = (y1 - my) * top + (my - y0) * bottom;
            if constexpr (std::is_same_v<T, float>) o[ch] = v;
            else o[ch] = ToInt(v, int32);
          }
        }
      }
    });
    Store<T>(dtype_, dst.data(), dst.size(), args.out(0));
    return Status::Ok();
  }

  bool bilinear_ = false, per_image_ = false, v3_ = false;
  Fill fill_ = Fill::kConstant;
  Dims in_, out_;
  int dtype_ = 0;
};

NPU_REGISTER_KERNEL("ImageProjectiveTransformV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ProjectiveTransformKernel::Make(d, false, k);
});
NPU_REGISTER_KERNEL("ImageProjectiveTransformV3", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ProjectiveTransformKernel::Make(d, true, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
