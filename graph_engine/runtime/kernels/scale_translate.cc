// ScaleAndTranslate(Grad), NHWC (tf.image.resize with antialias, lanczos3/5, gaussian,
// mitchellcubic): TF's separable resampling (the reference is graph_engine/ops/image.py).
// Per axis, "spans": each output position samples the input at (x + 0.5) / scale -
// translation / scale with one of TF's sampling kernels (widened by 1 / scale when downscaling
// with antialias); its normalized weights cover input pixels start ... start + span size - 1.
// The forward gathers rows, then columns; the gradient does the same with the transposed spans.
// Spans depend on the scale and translation inputs, so each run computes them (O(output size)).
// Sums run over every weight of a span in order, zero weights included (0 * inf is NaN in TF).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

// TF's CPU kernels are built without FMA: contracting a * b + c would move sampling positions,
// span edges and sums off TF's.
#pragma GCC optimize("fp-contract=off")

namespace npu {
namespace kernels {
namespace {

enum class Sampling { kLanczos, kGaussian, kBox, kTriangle, kKeysCubic, kMitchellCubic };

// TF's sampling kernels (sampling_kernels.h), of |x|, in float.
struct SamplingKernel {
  Sampling type = Sampling::kLanczos;
  float radius = 3;

  static bool FromName(std::string name, SamplingKernel* k) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    const struct { const char* name; Sampling type; float radius; } kKernels[] = {
        {"lanczos1", Sampling::kLanczos, 1}, {"lanczos3", Sampling::kLanczos, 3},
        {"lanczos5", Sampling::kLanczos, 5}, {"gaussian", Sampling::kGaussian, 1.5f},
        {"box", Sampling::kBox, 1}, {"triangle", Sampling::kTriangle, 1},
        {"keyscubic", Sampling::kKeysCubic, 2}, {"mitchellcubic", Sampling::kMitchellCubic, 2},
    };
    for (const auto& e : kKernels)
      if (name == e.name) {
        *k = {e.type, e.radius};
        return true;
      }
    return false;
  }

  float operator()(float x) const {
    x = std::abs(x);
    switch (type) {
      case Sampling::kLanczos: {
        constexpr float kPi = 3.14159265359f;
        if (x > radius) return 0;
        if (x <= 1e-3f) return 1;                 // the limit of sin(x) / x
        return radius * std::sin(kPi * x) * std::sin(kPi * x / radius) / (kPi * kPi * x * x);
      }
      case Sampling::kGaussian: {                 // sigma = radius / 3; the exponent in double
        const float sigma = radius / 3.0f;
        if (x >= radius) return 0;
        return static_cast<float>(std::exp(-x * x / (2.0 * sigma * sigma)));
      }
      case Sampling::kBox:
        return x < 0.5f ? 1.0f : x == 0.5f ? 0.5f : 0.0f;
      case Sampling::kTriangle:
        return x < 1.0f ? 1.0f - x : 0.0f;
      case Sampling::kKeysCubic:
        if (x >= 2.0f) return 0;
        if (x >= 1.0f) return ((-0.5f * x + 2.5f) * x - 4.0f) * x + 2.0f;
        return ((1.5f * x - 2.5f) * x) * x + 1.0f;
      case Sampling::kMitchellCubic:
        if (x >= 2.0f) return 0;
        if (x >= 1.0f) return (((-7.0f / 18.0f) * x + 2.0f) * x - 10.0f / 3.0f) * x + 16.0f / 9.0f;
        return (((7.0f / 6.0f) * x - 2.0f) * x) * x + 8.0f / 9.0f;
    }
    return 0;
  }
};

// Output position o reads input positions starts[o] ... starts[o] + size - 1 (those below the
// input's end) with weights[o * size + j].
struct Spans {
  int64_t size = 0;
  std::vector<int64_t> starts;
  std::vector<float> weights;
};

// TF's ComputeSpansCore.
Status ComputeSpans(const SamplingKernel& kernel, int64_t out_size, int64_t in_size, float scale,
                    float translate, bool antialias, Spans* spans) {
  const float inv_scale = static_cast<float>(1.0 / scale);
  const float inv_translate = -inv_scale * translate;
  const float kernel_scale = antialias ? std::max(inv_scale, 1.0f) : 1.0f;
  const float reach = kernel.radius * kernel_scale;
  // TF takes 2 * int(ceil(reach)) + 1 in int: past INT_MAX (a scale below ~1e-9) that is 1
  const float half = std::ceil(reach);
  spans->size = std::min<int64_t>(half < 2147483648.0f ? 2 * static_cast<int64_t>(half) + 1 : 1, in_size);
  spans->starts.assign(out_size, 0);
  spans->weights.assign(out_size * spans->size, 0.0f);
  const float one_over_kernel_scale = 1.0f / kernel_scale;
  std::vector<float> w;
  for (int64_t x = 0; x < out_size; ++x) {
    const float sample = (static_cast<float>(x) + 0.5f) * inv_scale + inv_translate;
    // Outside the image: no weights. NaN (a NaN or infinite translation) ends up the same in
    // TF (its span edges convert NaN to an index clamped to 0, and its weights are NaN).
    if (!(sample >= 0 && sample <= static_cast<float>(in_size))) continue;
    const int64_t first = static_cast<int64_t>(std::ceil(sample - reach - 0.5f));
    const int64_t last = static_cast<int64_t>(std::floor(sample + reach - 0.5f));
    const int64_t start = std::clamp<int64_t>(first, 0, in_size - 1);
    const int64_t end = std::clamp<int64_t>(last, 0, in_size - 1) + 1;
    if (end - start > spans->size) return Error("Span is too large: ", end - start, " vs ", spans->size, ".");
    float total = 0;
    w.clear();
    for (int64_t source = start; source < end; ++source) {
      const float pos = static_cast<float>(source) + 0.5f - sample;
      w.push_back(kernel(std::abs(pos * one_over_kernel_scale)));
      total += w.back();
    }
    if (std::abs(total) >= 1000.0f * std::numeric_limits<float>::min()) {
      const float one_over_total = 1.0f / total;
      for (size_t j = 0; j < w.size(); ++j) spans->weights[x * spans->size + j] = w[j] * one_over_total;
    }
    spans->starts[x] = start;
  }
  return Status::Ok();
}

// TF's ComputeGradSpansCore: for each forward input position, the forward outputs that weigh
// it (nonzero weights), from the first of them on.
Spans GradSpans(const Spans& fwd, int64_t fwd_out, int64_t fwd_in) {
  std::vector<int64_t> first(fwd_in, -1), last(fwd_in, -1);
  for (int64_t o = 0; o < fwd_out; ++o)
    for (int64_t j = 0; j < fwd.size; ++j) {
      const int64_t i = fwd.starts[o] + j;
      if (fwd.weights[o * fwd.size + j] != 0.0f && i < fwd_in) {
        if (first[i] < 0) first[i] = o;
        last[i] = o;
      }
    }
  Spans g;
  for (int64_t i = 0; i < fwd_in; ++i)
    if (first[i] >= 0) g.size = std::max(g.size, last[i] - first[i] + 1);
  g.starts.assign(fwd_in, 0);
  g.weights.assign(fwd_in * g.size, 0.0f);
  for (int64_t i = 0; i < fwd_in; ++i)
    if (first[i] >= 0) g.starts[i] = first[i];
  for (int64_t o = 0; o < fwd_out; ++o)
    for (int64_t j = 0; j < fwd.size; ++j) {
      const int64_t i = fwd.starts[o] + j;
      const float w = fwd.weights[o * fwd.size + j];
      if (w != 0.0f && i < fwd_in) g.weights[i * g.size + o - g.starts[i]] += w;
    }
  return g;
}

// Resamples axis 1 of `in` [outer, n, inner] into `out` [outer, spans.starts.size(), inner]:
// out[a, o, :] = sum over j of weights[o, j] * in[a, starts[o] + j, :], in order.
void Gather(const Spans& spans, const float* in, int64_t outer, int64_t n, int64_t inner, float* out) {
  const int64_t m = static_cast<int64_t>(spans.starts.size());
  ParallelFor(outer * m, inner * (spans.size + 1), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t a = row / m, o = row % m, start = spans.starts[o];
      float* dst = out + row * inner;
      std::fill(dst, dst + inner, 0.0f);
      const int64_t real = std::min(start + spans.size, n) - start;
      for (int64_t j = 0; j < real; ++j) {
        const float w = spans.weights[o * spans.size + j];
        const float* src = in + (a * n + start + j) * inner;
        for (int64_t k = 0; k < inner; ++k) dst[k] += w * src[k];
      }
    }
  });
}

class ScaleAndTranslateKernel : public Kernel {
 public:
  // Forward: images, scale, translation (size folded into the output shape). Gradient: grads,
  // original_image (its shape only), scale, translation.
  static Status Make(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, grad ? 4 : 3, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<ScaleAndTranslateKernel>();
    k->grad_ = grad;
    std::string name;
    NPU_RETURN_IF_ERROR(def.attrs.String("kernel_type", "lanczos3", &name));
    if (!SamplingKernel::FromName(name, &k->kernel_)) return Error("Unrecognized kernel type: ", name);
    NPU_RETURN_IF_ERROR(def.attrs.Bool("antialias", true, &k->antialias_));
    const TensorDesc& x = def.inputs[0];
    k->dtype_ = x.dtype;
    const int params = grad ? 2 : 1;
    for (int i = params; i < params + 2; ++i)
      if (def.inputs[i].dtype != kFloat || def.inputs[i].dims != Dims{2})
        return Error(i == params ? "scale" : "translation", " must be float32 [2], got ",
                     DTypeName(def.inputs[i].dtype), ShapeString(def.inputs[i].dims));
    const Dims& o = def.outputs[0].dims;
    if (x.dims.size() != 4 || o.size() != 4 || def.outputs[0].dtype != kFloat)
      return Error("input and output must be 4-D (output float32), got ", ShapeString(x.dims), " and ",
                   ShapeString(o));
    if (grad && (def.inputs[1].dims.size() != 4 || x.dtype != kFloat))
      return Error("grads must be float32 and original_image 4-D");
    if (!grad && x.dtype != kFloat && x.dtype != kHalf && x.dtype != kBFloat16 && x.dtype != kInt32 &&
        x.dtype != kInt64)
      return Error("images dtype ", DTypeName(x.dtype), " not supported");
    k->batch_ = x.dims[0];
    k->channels_ = x.dims[3];
    k->in_h_ = x.dims[1];
    k->in_w_ = x.dims[2];
    k->out_h_ = o[1];
    k->out_w_ = o[2];
    if (o[0] != k->batch_ || o[3] != k->channels_)
      return Error("output ", ShapeString(o), " does not match input ", ShapeString(x.dims));
    *out = std::move(k);
    return Status::Ok();
  }

  bool ChecksValues() const override { return true; }   // TF rejects scale <= 0 for empty results

  Status Compute(const KernelArgs& args) const override {
    const int params = grad_ ? 2 : 1;
    const float* scale = args.in<float>(params);
    const float* translation = args.in<float>(params + 1);
    if (!(scale[0] > 0 && scale[1] > 0)) return InvalidArgument("Scale must be greater than zero.");
    if (batch_ * channels_ * out_h_ * out_w_ == 0) return Status::Ok();
    // The spans map the forward's output (h, w) onto its input (H, W): the gradient's roles
    // are swapped, so its spans are the transposed ones.
    const int64_t fwd_out_h = grad_ ? in_h_ : out_h_, fwd_out_w = grad_ ? in_w_ : out_w_;
    const int64_t fwd_in_h = grad_ ? out_h_ : in_h_, fwd_in_w = grad_ ? out_w_ : in_w_;
    Spans rows, cols;
    NPU_RETURN_IF_ERROR(ComputeSpans(kernel_, fwd_out_w, fwd_in_w, scale[1], translation[1], antialias_,
                                     &cols));
    NPU_RETURN_IF_ERROR(ComputeSpans(kernel_, fwd_out_h, fwd_in_h, scale[0], translation[0], antialias_,
                                     &rows));
    if (grad_) {
      cols = GradSpans(cols, fwd_out_w, fwd_in_w);
      rows = GradSpans(rows, fwd_out_h, fwd_in_h);
    }
    std::vector<float> converted;
    const float* x = args.in<float>(0);
    if (dtype_ != kFloat) {
      converted.resize(batch_ * in_h_ * in_w_ * channels_);
      Load<float>(dtype_, args.in(0), static_cast<int64_t>(converted.size()), converted.data());
      x = converted.data();
    }
    std::vector<float> mid(batch_ * out_h_ * in_w_ * channels_);
    Gather(rows, x, batch_, in_h_, in_w_ * channels_, mid.data());
    Gather(cols, mid.data(), batch_ * out_h_, in_w_, channels_, args.out<float>(0));
    return Status::Ok();
  }

 private:
  SamplingKernel kernel_;
  bool antialias_ = true, grad_ = false;
  int dtype_ = kFloat;
  int64_t batch_ = 0, channels_ = 0, in_h_ = 0, in_w_ = 0, out_h_ = 0, out_w_ = 0;
};

NPU_REGISTER_KERNEL("ScaleAndTranslate", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ScaleAndTranslateKernel::Make(d, false, k);
});
NPU_REGISTER_KERNEL("ScaleAndTranslateGrad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return ScaleAndTranslateKernel::Make(d, true, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
