// Color ops, per RGB pixel (the last axis holds 3 channels), in float32 as TF's CPU kernels:
// RGBToHSV and HSVToRGB (colorspace_op.h), AdjustHue and AdjustSaturation with their own
// conversions (adjust_hue_op.cc, adjust_saturation_op.cc), and AdjustContrastv2 (per image and
// channel mean over height and width). The scalar parameter of the Adjust ops is a data input.
#include <algorithm>
#include <cmath>
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

// TF's channel max and min: Eigen's scalar reduction over the 3 channels, acc = op(t, acc) with
// std::max / std::min, so a NaN channel replaces the running value and a later number replaces
// a NaN ([nan, .5, .2] has max .5, [.5, .2, nan] max nan).
float ChannelMax(const float* p) {
  float acc = p[0];
  for (int c = 1; c < 3; ++c) acc = p[c] < acc ? acc : p[c];
  return acc;
}

float ChannelMin(const float* p) {
  float acc = p[0];
  for (int c = 1; c < 3; ++c) acc = acc < p[c] ? acc : p[c];
  return acc;
}

void RgbToHsv(const float* p, float* q) {
  const float r = p[0], g = p[1], b = p[2];
  const float v = ChannelMax(p);
  const float range = v - ChannelMin(p);
  const float s = v > 0 ? range / v : 0.0f;
  const float norm = (1.0f / range) * (1.0f / 6.0f);
  float h = r == v ? norm * (g - b) : g == v ? norm * (b - r) + 2.0f / 6.0f : norm * (r - g) + 4.0f / 6.0f;
  if (!(range > 0)) h = 0;
  if (h < 0) h += 1;
  q[0] = h;
  q[1] = s;
  q[2] = v;
}

void HsvToRgb(const float* p, float* q) {
  const float h = p[0], s = p[1], v = p[2];
  const float dh = h * 6.0f;
  const float d[3] = {std::fabs(dh - 3.0f) - 1.0f, -std::fabs(dh - 2.0f) + 2.0f, -std::fabs(dh - 4.0f) + 2.0f};
  for (int c = 0; c < 3; ++c) q[c] = (-s + 1.0f + s * std::min(std::max(d[c], 0.0f), 1.0f)) * v;
}

// AdjustHue: hue in [0, 6) and the channels' min and max (TF's rgb_to_hv_range / hv_range_to_rgb).
void AdjustHue(const float* p, float delta, float* q) {
  const float r = p[0], g = p[1], b = p[2];
  float vmax, mid, vmin;
  int cat;
  if (r < g) {
    if (b < r) { vmax = g; mid = r; vmin = b; cat = 1; }
    else if (b > g) { vmax = b; mid = g; vmin = r; cat = 3; }
    else { vmax = g; mid = b; vmin = r; cat = 2; }
  } else {
    if (b < g) { vmax = r; mid = g; vmin = b; cat = 0; }
    else if (b > r) { vmax = b; mid = r; vmin = g; cat = 4; }
    else { vmax = r; mid = b; vmin = g; cat = 5; }
  }
  float h = 0;
  if (vmax != vmin) {
    const float ratio = (mid - vmin) / (vmax - vmin);
    h = cat + ((cat & 1) == 0 ? ratio : 1 - ratio);
  }
  h += delta * 6;
  // TF's loops h += 6 while h < 0, h -= 6 while h >= 6: exact steps below 2^25 (one exact fmod
  // gives their result at once), rounded ones below 2^27, none above (TF never returns there: a
  // huge delta; fmod then, NaN for an infinity).
  if (!(std::fabs(h) >= 33554432.0f && std::fabs(h) < 134217728.0f)) h = std::fmod(h, 6.0f);
  while (h < 0) h += 6;
  while (h >= 6) h -= 6;
  cat = h == h ? static_cast<int>(h) : 6;      // NaN: TF's cast gives INT_MIN, the default sector
  float ratio = h - cat;
  if (cat & 1) ratio = 1 - ratio;
  mid = vmin + ratio * (vmax - vmin);
  switch (cat) {
    case 0: q[0] = vmax; q[1] = mid; q[2] = vmin; break;
    case 1: q[0] = mid; q[1] = vmax; q[2] = vmin; break;
    case 2: q[0] = vmin; q[1] = vmax; q[2] = mid; break;
    case 3: q[0] = vmin; q[1] = mid; q[2] = vmax; break;
    case 4: q[0] = mid; q[1] = vmin; q[2] = vmax; break;
    default: q[0] = vmax; q[1] = vmin; q[2] = mid;
  }
}

// AdjustSaturation's own HSV round trip (TF's adjust_saturation_op.cc), saturation scaled and
// clamped to [0, 1].
void AdjustSaturation(const float* p, float scale, float* q) {
  const float r = p[0], g = p[1], b = p[2];
  const float v = std::max(r, std::max(g, b));
  const float range = v - std::min(r, std::min(g, b));
  float s = v > 0 ? range / v : 0;
  const float norm = 1.0f / (6.0f * range);
  float h = r == v ? norm * (g - b) : g == v ? norm * (b - r) + 2.0 / 6.0 : norm * (r - g) + 4.0 / 6.0;
  if (range <= 0.0) h = 0;
  if (h < 0.0) h = h + 1;
  s = std::min(1.0f, std::max(0.0f, s * scale));
  const float c = s * v, m = v - c, dh = h * 6;
  const int cat = static_cast<int>(dh);
  float fmodu = dh;
  while (fmodu <= 0) fmodu += 2.0f;
  while (fmodu >= 2.0f) fmodu -= 2.0f;
  const float x = c * (1 - std::abs(fmodu - 1));
  float rr = 0, gg = 0, bb = 0;
  switch (cat) {
    case 0: rr = c; gg = x; break;
    case 1: rr = x; gg = c; break;
    case 2: gg = c; bb = x; break;
    case 3: gg = x; bb = c; break;
    case 4: rr = x; bb = c; break;
    case 5: rr = c; bb = x; break;
    default: break;
  }
  q[0] = rr + m;
  q[1] = gg + m;
  q[2] = bb + m;
}

enum class ColorOp { kRgbToHsv, kHsvToRgb, kHue, kSaturation };

class ColorKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, ColorOp op, std::unique_ptr<Kernel>* out) {
    const bool param = op == ColorOp::kHue || op == ColorOp::kSaturation;
    NPU_RETURN_IF_ERROR(CheckArity(def, param ? 2 : 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const Dims& d = def.inputs[0].dims;
    if (d.empty() || d.back() != 3)
      return InvalidArgument("input must have 3 channels but instead has ", d.empty() ? 0 : d.back(), " channels.");
    if (param && (NumElements(def.inputs[1].dims) != 1 || def.inputs[1].dtype != kFloat))
      return InvalidArgument(op == ColorOp::kHue ? "delta" : "scale", " must be a float32 scalar, got ",
                             ShapeString(def.inputs[1].dims));
    if (ComputeTypeOf(def.inputs[0].dtype) != ComputeType::kFloat || def.outputs[0].dtype != def.inputs[0].dtype)
      return Error("dtype ", DTypeName(def.inputs[0].dtype), " not supported");
    auto k = std::make_unique<ColorKernel>();
    k->op_ = op;
    k->pixels_ = NumElements(d) / 3;
    k->dtype_ = def.inputs[0].dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<float> x(3 * pixels_), y(3 * pixels_);
    Load<float>(dtype_, args.in(0), x.size(), x.data());
    const float param = op_ == ColorOp::kHue || op_ == ColorOp::kSaturation ? *args.in<float>(1) : 0.0f;
    ParallelFor(pixels_, 30, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* p = &x[3 * i];
        float* q = &y[3 * i];
        switch (op_) {
          case ColorOp::kRgbToHsv: RgbToHsv(p, q); break;
          case ColorOp::kHsvToRgb: HsvToRgb(p, q); break;
          case ColorOp::kHue: AdjustHue(p, param, q); break;
          case ColorOp::kSaturation: AdjustSaturation(p, param, q); break;
        }
      }
    });
    Store<float>(dtype_, y.data(), y.size(), args.out(0));
    return Status::Ok();
  }

 private:
  ColorOp op_ = ColorOp::kRgbToHsv;
  int64_t pixels_ = 0;
  int dtype_ = 0;
};

NPU_REGISTER_KERNEL("RGBToHSV", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ColorKernel::Make(d, ColorOp::kRgbToHsv, k);
});
NPU_REGISTER_KERNEL("HSVToRGB", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ColorKernel::Make(d, ColorOp::kHsvToRgb, k);
});
NPU_REGISTER_KERNEL("AdjustHue", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ColorKernel::Make(d, ColorOp::kHue, k);
});
NPU_REGISTER_KERNEL("AdjustSaturation", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ColorKernel::Make(d, ColorOp::kSaturation, k);
});

// (x - mean) * factor + mean, the mean per image and channel over height and width.
class AdjustContrastKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const Dims& d = def.inputs[0].dims;
    if (d.size() < 3) return InvalidArgument("input must be at least 3-D, got ", ShapeString(d));
    if (NumElements(def.inputs[1].dims) != 1 || def.inputs[1].dtype != kFloat)
      return InvalidArgument("contrast_factor must be a float32 scalar, got ", ShapeString(def.inputs[1].dims));
    if (ComputeTypeOf(def.inputs[0].dtype) != ComputeType::kFloat)
      return Error("dtype ", DTypeName(def.inputs[0].dtype), " not supported");
    auto k = std::make_unique<AdjustContrastKernel>();
    k->channels_ = d.back();
    k->area_ = d[d.size() - 3] * d[d.size() - 2];
    k->images_ = NumElements(d) / std::max<int64_t>(1, k->area_ * k->channels_);
    k->dtype_ = def.inputs[0].dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t c = channels_, area = area_;
    std::vector<float> x(images_ * area * c);
    Load<float>(dtype_, args.in(0), x.size(), x.data());
    const float factor = *args.in<float>(1);
    ParallelFor(images_, area * c * 4, [&](int64_t begin, int64_t end) {
      std::vector<double> sum(c);
      for (int64_t i = begin; i < end; ++i) {
        float* img = &x[i * area * c];
        std::fill(sum.begin(), sum.end(), 0.0);
        for (int64_t p = 0; p < area; ++p)
          for (int64_t ch = 0; ch < c; ++ch) sum[ch] += img[p * c + ch];
        for (int64_t ch = 0; ch < c; ++ch) {
          const float mean = static_cast<float>(sum[ch] / area);
          for (int64_t p = 0; p < area; ++p) img[p * c + ch] = (img[p * c + ch] - mean) * factor + mean;
        }
      }
    });
    Store<float>(dtype_, x.data(), x.size(), args.out(0));
    return Status::Ok();
  }

 private:
  int64_t channels_ = 0, area_ = 0, images_ = 0;
  int dtype_ = 0;
};

NPU_REGISTER_KERNEL("AdjustContrastv2", AdjustContrastKernel::Make);

}  // namespace
}  // namespace kernels
}  // namespace npu
