// FusedBatchNorm{,V2,V3} and FusedBatchNormGrad{,V2,V3} (graph_engine/ops/nn_extra.py): x and
// y in float32/float16/bfloat16 (T), the per-channel values in float32 (U); moments and sums
// per channel in double, math in float32 as TF's CPU kernel, x rounded once on store.
// x is viewed as [outer, channels, inner] (channels last: inner 1; channels first: outer N).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/channel_view.h"
#include "kernels/float_io.h"
#include "kernels/window.h"   // CheckShape

namespace npu {
namespace kernels {
namespace {

class BatchNormKernel : public Kernel {
 public:
  BatchNormKernel(bool grad, bool training, double epsilon, double factor, bool reserve_3,
                  ChannelView v, int dtype)
      : grad_(grad), training_(training), epsilon_(epsilon), factor_(factor),
        reserve_3_(reserve_3), v_(v), dtype_(dtype) {}

  Status Compute(const KernelArgs& args) const override {
    if (grad_) return Grad(args);
    const int64_t n = v_.outer * v_.channels * v_.inner, rows = v_.PerChannel();
    FloatIn x(dtype_, args.in(0), n);
    FloatOut y(dtype_, args.out(0), n);
    const float *scale = args.in<float>(1), *offset = args.in<float>(2);
    const float *old_mean = args.in<float>(3), *old_var = args.in<float>(4);
    const float* xs = x.data();
    if (rows == 0) {   // as TF: an empty x's moments are NaN (TF leaves 3 and 4 unwritten)
      for (int o = 1; o <= 4; ++o)
        std::fill(args.out<float>(o), args.out<float>(o) + v_.channels, std::numeric_limits<float>::quiet_NaN());
      if (reserve_3_) args.out<float>(5)[0] = 0.0f;
      return Status::Ok();
    }
    std::vector<float> mean(v_.channels), var(v_.channels), k(v_.channels);
    if (training_) {   // two passes: the variance of the centred values (no cancellation)
      const std::vector<double> sums = ChannelSums([&](int64_t i, int64_t) { return double(xs[i]); });
      for (int64_t c = 0; c < v_.channels; ++c) mean[c] = static_cast<float>(sums[c] / rows);
      const std::vector<double> squares = ChannelSums([&](int64_t i, int64_t c) {
        const double d = double(xs[i]) - mean[c];
        return d * d;
      });
      for (int64_t c = 0; c < v_.channels; ++c) var[c] = static_cast<float>(squares[c] / rows);
    } else {
      mean.assign(old_mean, old_mean + v_.channels);
      var.assign(old_var, old_var + v_.channels);
    }
    for (int64_t c = 0; c < v_.channels; ++c) k[c] = 1.0f / std::sqrt(var[c] + static_cast<float>(epsilon_)) * scale[c];
    ForAll([&](int64_t i, int64_t c) { y.data()[i] = (xs[i] - mean[c]) * k[c] + offset[c]; });
    // Outputs 1, 2: the running mean and variance (training: blended by exponential_avg_factor,
    // the variance as the sample variance, rows / (rows - 1) times the batch's, as TF);
    // 3, 4: the mean and variance used (the gradient's reserve spaces).
    const float adjust = float(rows) / float(std::max<int64_t>(rows - 1, 1));
    const float f = static_cast<float>(factor_);
    for (int64_t c = 0; c < v_.channels; ++c) {
      args.out<float>(1)[c] = !training_ || f == 1.0f ? mean[c] : (1 - f) * old_mean[c] + f * mean[c];
      args.out<float>(2)[c] = !training_ ? var[c]
                              : f == 1.0f ? var[c] * adjust
                                          : (1 - f) * old_var[c] + (f * adjust) * var[c];
      args.out<float>(3)[c] = mean[c];
      args.out<float>(4)[c] = var[c];
    }
    if (reserve_3_) args.out<float>(5)[0] = 0.0f;   // TF's CPU kernel: a zero scalar
    y.Finish();
    return Status::Ok();
  }

 private:
  // Per-channel sums of value(element index, channel) in double, one pass in memory order
  // (serial: the order, so the result, is fixed).
  template <class Fn>
  std::vector<double> ChannelSums(Fn&& value) const {
    std::vector<double> sums(v_.channels, 0.0);
    for (int64_t o = 0; o < v_.outer; ++o)
      for (int64_t c = 0; c < v_.channels; ++c) {
        const int64_t base = v_.At(o, c, 0);
        double s = 0;
        for (int64_t i = 0; i < v_.inner; ++i) s += value(base + i, c);
        sums[c] += s;
      }
    return sums;
  }

  // fn(element index, channel) for every element, in parallel over the outer dimension.
  template <class Fn>
  void ForAll(Fn&& fn) const {
    ParallelFor(v_.outer, 4 * v_.channels * v_.inner, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t c = 0; c < v_.channels; ++c) {
          const int64_t base = v_.At(o, c, 0);
          for (int64_t i = 0; i < v_.inner; ++i) fn(base + i, c);
        }
    });
  }

  // (dy, x, scale, mean, variance[, reserve_space_3]) -> (dx, dscale, doffset, placeholders).
  // Training: mean and variance are the batch's (reserve spaces 1 and 2), and x's gradient
  // goes through them too; inference: they are the constants the forward used.
  Status Grad(const KernelArgs& args) const {
    const int64_t n = v_.outer * v_.channels * v_.inner, rows = v_.PerChannel();
    FloatIn dy(dtype_, args.in(0), n), x(dtype_, args.in(1), n);
    FloatOut dx(dtype_, args.out(0), n);
    const float *scale = args.in<float>(2), *mean = args.in<float>(3), *var = args.in<float>(4);
    const float *g = dy.data(), *xs = x.data();
    const std::vector<double> sum_dy = ChannelSums([&](int64_t i, int64_t) { return double(g[i]); });
    const std::vector<double> sum_dy_xc = ChannelSums([&](int64_t i, int64_t c) {
      return double(g[i]) * (double(xs[i]) - mean[c]);
    });
    std::vector<float> k(v_.channels), dy_mean(v_.channels), slope(v_.channels);
    for (int64_t c = 0; c < v_.channels; ++c) {
      const float inv = 1.0f / std::sqrt(var[c] + static_cast<float>(epsilon_));
      // as TF: an empty batch's gradients are zeros, whatever the variance
      args.out<float>(1)[c] = rows == 0 ? 0.0f : static_cast<float>(sum_dy_xc[c] * inv);
      args.out<float>(2)[c] = static_cast<float>(sum_dy[c]);
      k[c] = scale[c] * inv;
      dy_mean[c] = training_ ? static_cast<float>(sum_dy[c] / rows) : 0.0f;
      slope[c] = training_ ? static_cast<float>(sum_dy_xc[c] / rows) * inv * inv : 0.0f;
    }
    ForAll([&](int64_t i, int64_t c) {
      dx.data()[i] = training_ ? k[c] * (g[i] - dy_mean[c] - (xs[i] - mean[c]) * slope[c]) : k[c] * g[i];
    });
    dx.Finish();
    return Status::Ok();
  }

  bool grad_, training_;
  double epsilon_, factor_;
  bool reserve_3_;
  ChannelView v_;
  int dtype_;
};

Status MakeBatchNorm(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
  const bool v3 = def.kernel.back() == '3';
  NPU_RETURN_IF_ERROR(CheckArity(def, 5 + (grad && v3 ? 1 : 0), grad ? 5 : 5 + (v3 ? 1 : 0)));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  const int x_at = grad ? 1 : 0;
  const int dtype = def.inputs[x_at].dtype;
  if (!IsFloatStorage(dtype) || def.outputs[0].dtype != dtype || (grad && def.inputs[0].dtype != dtype))
    return Error("x and y must share one of float32, float16, bfloat16, got ", DTypeName(dtype));
  for (size_t i = x_at + 1; i < def.inputs.size(); ++i)
    if (def.inputs[i].dtype != kFloat) return Error("input ", i, " must be float32");
  for (size_t i = 1; i < def.outputs.size(); ++i)
    if (def.outputs[i].dtype != kFloat) return Error("output ", i, " must be float32");
  std::string format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &format));
  const Dims& x = def.inputs[x_at].dims;
  if (format.size() != x.size() || (format != "NHWC" && format != "NCHW" && format != "NDHWC" && format != "NCDHW"))
    return InvalidArgument("x ", ShapeString(x), " does not match data_format ", format);
  const ChannelView v = ViewAround(x, format[1] == 'C' ? 1 : static_cast<int64_t>(x.size()) - 1);
  bool training;
  NPU_RETURN_IF_ERROR(def.attrs.Bool("is_training", true, &training));
  if (grad && !training && format[1] == 'C')   // as TF's CPU kernel
    return InvalidArgument("The implementation of FusedBatchNormGrad with is_training=False only "
                           "support NHWC tensor format for now.");
  NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, x));
  if (grad) NPU_RETURN_IF_ERROR(CheckShape("y_backprop", def.inputs[0].dims, x));
  double epsilon, factor;
  NPU_RETURN_IF_ERROR(def.attrs.Float("epsilon", 1e-4, &epsilon));
  NPU_RETURN_IF_ERROR(def.attrs.Float("exponential_avg_factor", 1.0, &factor));
  // The per-channel inputs: the forward's scale, offset, mean, variance (mean and variance may
  // be empty when training with factor 1: unused); the gradient's scale, mean, variance.
  for (int i = x_at + 1; i < x_at + (grad ? 4 : 5); ++i) {
    const bool unused = !grad && i >= 3 && training && factor == 1.0 && NumElements(def.inputs[i].dims) == 0;
    if (!unused && def.inputs[i].dims != Dims{v.channels})
      return InvalidArgument("input ", i, " must have shape [", v.channels, "], got ", ShapeString(def.inputs[i].dims));
  }
  *out = std::make_unique<BatchNormKernel>(grad, training, float(epsilon), float(factor), !grad && v3, v, dtype);
  return Status::Ok();
}

Status MakeBatchNormForward(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakeBatchNorm(def, false, out);
}
Status MakeBatchNormGrad(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakeBatchNorm(def, true, out);
}
NPU_REGISTER_KERNEL("FusedBatchNorm", MakeBatchNormForward);
NPU_REGISTER_KERNEL("FusedBatchNormV2", MakeBatchNormForward);
NPU_REGISTER_KERNEL("FusedBatchNormV3", MakeBatchNormForward);
NPU_REGISTER_KERNEL("FusedBatchNormGrad", MakeBatchNormGrad);
NPU_REGISTER_KERNEL("FusedBatchNormGradV2", MakeBatchNormGrad);
NPU_REGISTER_KERNEL("FusedBatchNormGradV3", MakeBatchNormGrad);

}  // namespace
}  // namespace kernels
}  // namespace npu
