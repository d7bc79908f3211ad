// Fake quantization (graph_engine/ops/nn_extra.py), float32, with TF's float32 arithmetic so
// that values land on the same quantization steps:
// * FakeQuantWithMinMax{Args,Vars,VarsPerChannel} and their gradients: the range [min, max]
//   nudged so that 0 is a step (TF's Nudge), values clamped to it and rounded to its steps;
//   the gradient passes inside the nudged range, below it goes to min, above it to max;
// * QuantizeAndDequantizeV2/V3/V4 and V4Grad: the range (given, or the input's own per
//   channel) widened on one side so that 0 is exact, then scale, round, unscale.
// The input is viewed as [outer, channels, inner], one range per channel.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/channel_view.h"
#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

Status CheckFloat32(const KernelDef& def) {
  for (const TensorDesc& t : def.inputs)
    if (t.dtype != kFloat) return Error("does not support ", DTypeName(t.dtype), "; supported: float32");
  for (const TensorDesc& t : def.outputs)
    if (t.dtype != kFloat) return Error("does not support ", DTypeName(t.dtype), "; supported: float32");
  return CheckNdLayouts(def);
}

Status CheckRangeShape(const KernelDef& def, int index, int64_t channels, bool scalar) {
  const Dims want = scalar ? Dims{} : Dims{channels};
  if (def.inputs[index].dims != want)
    return InvalidArgument("the range input ", index, " must have shape ", ShapeString(want),
                           ", got ", ShapeString(def.inputs[index].dims));
  return Status::Ok();
}

// ---- FakeQuantWithMinMax* --------------------------------------------------------------------

struct Nudged {
  float min, max, scale, inv_scale;
};

// TF's Nudge, in its float32 operation order. Its zero point is a uint16_t: a NaN one (min
// -inf: -inf / inf) converts as x86's truncation does, to 0.
Nudged Nudge(float min, float max, int qmin, int qmax) {
  const float qmin_f = static_cast<float>(qmin), qmax_f = static_cast<float>(qmax);
  Nudged n;
  n.scale = (max - min) / (qmax_f - qmin_f);
  n.inv_scale = (qmax_f - qmin_f) / (max - min);
  const float zero_from_min = qmin_f - min / n.scale;
  const float zero = zero_from_min < qmin_f ? qmin_f
                     : zero_from_min > qmax_f ? qmax_f
                     : std::isnan(zero_from_min) ? 0.0f
                                                 : std::round(zero_from_min);
  n.min = (qmin_f - zero) * n.scale;
  n.max = (qmax_f - zero) * n.scale;
  return n;
}

// Forward: (x[, min, max]) -> y. Gradient: (g, x[, min, max]) -> dx[, dmin, dmax].
// Args: the range is the attrs min/max; Vars: inputs (a scalar each, or [channels]). As TF's
// functors: y = floor((clamp(x) - nudged_min) * inv_scale - zero_step + 0.5) * scale, the scalar
// Vars kernel dividing by scale instead; the gradients are g times a 0/1 mask (NaN stays NaN);
// a Vars range of [0, 0] gives y = 0 and passes the whole gradient to the input.
class FakeQuantKernel : public Kernel {
 public:
  FakeQuantKernel(bool grad, bool vars, bool divide, float min, float max, int qmin, int qmax,
                  ChannelView v)
      : grad_(grad), vars_(vars), divide_(divide), min_(min), max_(max), qmin_(qmin), qmax_(qmax),
        v_(v) {}

  Status Compute(const KernelArgs& args) const override {
    const int x_at = grad_ ? 1 : 0;
    const float* x = args.in<float>(x_at);
    const float* g = grad_ ? args.in<float>(0) : nullptr;
    float* out = args.out<float>(0);
    ParallelFor(v_.channels, 4 * v_.outer * v_.inner, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const float lo = vars_ ? args.in<float>(x_at + 1)[c] : min_;
        const float hi = vars_ ? args.in<float>(x_at + 2)[c] : max_;
        const bool zero_range = vars_ && lo == 0.0f && hi == 0.0f;
        const Nudged n = Nudge(lo, hi, qmin_, qmax_);
        if (!grad_) {
          const float zero_step = std::floor(-n.min * n.inv_scale + 0.5f);
          v_.ForChannel(c, [&](int64_t i) {
            const float shifted = std::max(std::min(x[i], n.max), n.min) - n.min;
            const float steps = divide_ ? shifted / n.scale : shifted * n.inv_scale;
            out[i] = zero_range ? 0.0f : std::floor(steps - zero_step + 0.5f) * n.scale;
          });
          continue;
        }
        double below = 0, above = 0;
        v_.ForChannel(c, [&](int64_t i) {
          if (zero_range) {
            out[i] = g[i];
            return;
          }
          out[i] = g[i] * (x[i] >= n.min && x[i] <= n.max ? 1.0f : 0.0f);
          below += double(g[i]) * (x[i] < n.min ? 1.0 : 0.0);
          above += double(g[i]) * (x[i] > n.max ? 1.0 : 0.0);
        });
        if (vars_) {
          args.out<float>(1)[c] = static_cast<float>(below);
          args.out<float>(2)[c] = static_cast<float>(above);
        }
      }
    });
    return Status::Ok();
  }

 private:
  bool grad_, vars_, divide_;
  float min_, max_;
  int qmin_, qmax_;
  ChannelView v_;
};

Status MakeFakeQuant(const KernelDef& def, bool grad, bool vars, bool per_channel,
                     std::unique_ptr<Kernel>* out) {
  const int n_in = (grad ? 2 : 1) + (vars ? 2 : 0), n_out = grad && vars ? 3 : 1;
  NPU_RETURN_IF_ERROR(CheckArity(def, n_in, n_out));
  NPU_RETURN_IF_ERROR(CheckFloat32(def));
  int64_t num_bits;
  bool narrow;
  double min = -6, max = 6;
  NPU_RETURN_IF_ERROR(def.attrs.Int("num_bits", 8, &num_bits));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("narrow_range", false, &narrow));
  if (num_bits < 2 || num_bits > 16)
    return InvalidArgument("num_bits must be between 2 and 16, inclusive, got ", num_bits);
  if (!vars) {
    NPU_RETURN_IF_ERROR(def.attrs.Float("min", -6.0, &min));
    NPU_RETURN_IF_ERROR(def.attrs.Float("max", 6.0, &max));
    if (!(float(min) < float(max)))
      return InvalidArgument("min has to be smaller than max, was: ", min, " >= ", max);
  }
  const Dims& x = def.inputs[grad ? 1 : 0].dims;
  if (grad && def.inputs[0].dims != x)
    return InvalidArgument("gradients and inputs must have one shape, got ", ShapeString(def.inputs[0].dims),
                           " and ", ShapeString(x));
  if (per_channel && x.empty()) return InvalidArgument("inputs must be at least 1-D, got []");
  ChannelView v = ViewAround(x, per_channel ? static_cast<int64_t>(x.size()) - 1 : -1);
  if (vars)
    for (int k = 0; k < 2; ++k)
      NPU_RETURN_IF_ERROR(CheckRangeShape(def, (grad ? 2 : 1) + k, v.channels, !per_channel));
  *out = std::make_unique<FakeQuantKernel>(grad, vars, vars && !per_channel, float(min), float(max),
                                           narrow ? 1 : 0, (1 << num_bits) - 1, v);
  return Status::Ok();
}

template <bool kGrad, bool kVars, bool kPerChannel>
Status MakeFakeQuantOf(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakeFakeQuant(def, kGrad, kVars, kPerChannel, out);
}

NPU_REGISTER_KERNEL("FakeQuantWithMinMaxArgs", (MakeFakeQuantOf<false, false, false>));
NPU_REGISTER_KERNEL("FakeQuantWithMinMaxArgsGradient", (MakeFakeQuantOf<true, false, false>));
NPU_REGISTER_KERNEL("FakeQuantWithMinMaxVars", (MakeFakeQuantOf<false, true, false>));
NPU_REGISTER_KERNEL("FakeQuantWithMinMaxVarsGradient", (MakeFakeQuantOf<true, true, false>));
NPU_REGISTER_KERNEL("FakeQuantWithMinMaxVarsPerChannel", (MakeFakeQuantOf<false, true, true>));
NPU_REGISTER_KERNEL("FakeQuantWithMinMaxVarsPerChannelGradient", (MakeFakeQuantOf<true, true, true>));

// ---- QuantizeAndDequantize* ------------------------------------------------------------------

// Forward: (x, input_min, input_max) -> y. V4Grad: (g, x, input_min, input_max) -> (dx, zeros
// shaped like input_min, zeros shaped like input_max).
class QuantizeDequantizeKernel : public Kernel {
 public:
  QuantizeDequantizeKernel(bool grad, bool range_given, bool per_tensor, bool half_up, int64_t qmin,
                           int64_t qmax, ChannelView v)
      : grad_(grad), range_given_(range_given), per_tensor_(per_tensor), half_up_(half_up),
        qmin_(qmin), qmax_(qmax), v_(v) {}

  // A given range is checked even for an empty input, as TF does.
  bool ChecksValues() const override { return range_given_ && per_tensor_; }

  Status Compute(const KernelArgs& args) const override {
    const int x_at = grad_ ? 1 : 0;
    const float* x = args.in<float>(x_at);
    const float* in_min = args.in<float>(x_at + 1);
    const float* in_max = args.in<float>(x_at + 2);
    float* out = args.out<float>(0);
    // As TF: a given range is checked (NaN fails) when it is one scalar pair only.
    if (range_given_ && per_tensor_ && !(in_min[0] <= in_max[0]))
      return InvalidArgument("Invalid range: input_min ", in_min[0], " > input_max ", in_max[0]);
    ParallelFor(v_.channels, 4 * v_.outer * v_.inner, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        if (grad_) {
          v_.ForChannel(c, [&](int64_t i) {   // TF's g * 0/1 mask: a NaN gradient stays NaN
            out[i] = args.in<float>(0)[i] * (x[i] >= in_min[c] && x[i] <= in_max[c] ? 1.0f : 0.0f);
          });
          args.out<float>(1)[c] = args.out<float>(2)[c] = 0.0f;
          continue;
        }
        float lo = in_min[c], hi = in_max[c];
        if (!range_given_) InputRange(x, c, &lo, &hi);
        // TF's ComputeQuantizationRange: the side that limits the scale keeps its end.
        const float qmin = static_cast<float>(qmin_), qmax = static_cast<float>(qmax_);
        const float big = std::numeric_limits<float>::max();
        const float from_min = qmin * lo > 0 ? qmin / lo : big;
        const float from_max = qmax * hi > 0 ? qmax / hi : big;
        float scale, inv;
        if (from_min < from_max) {
          scale = from_min;
          inv = lo / qmin;
          hi = qmax * inv;
        } else {
          scale = from_max;
          inv = hi / qmax;
          lo = qmin * inv;
        }
        v_.ForChannel(c, [&](int64_t i) {
          const float v = (range_given_ ? std::max(std::min(x[i], hi), lo) : x[i]) * scale;
          out[i] = (half_up_ ? std::floor(v + 0.5f) : std::nearbyint(v)) * inv;
        });
      }
    });
    return Status::Ok();
  }

 private:
  // The input's own range as TF's Eigen reductions find it, whose NaN handling depends on the
  // path. Their scalar loop lets a NaN replace the running extreme and the next number replace
  // a NaN: the extremes of the elements after the last NaN (NaN if it is last). Per channel,
  // that loop runs over the channel in memory order; per tensor, 8-wide packets that skip NaN
  // take the leading multiple of 8 elements, the scalar loop the rest, and a NaN from it wins.
  void InputRange(const float* x, int64_t c, float* lo, float* hi) const {
    const float highest = std::numeric_limits<float>::max();
    float slo = highest, shi = -highest, plo = highest, phi = -highest;
    auto scalar = [&](int64_t i) {
      slo = slo < x[i] ? slo : x[i];
      shi = x[i] < shi ? shi : x[i];
    };
    if (!per_tensor_) {
      v_.ForChannel(c, scalar);
      *lo = slo;
      *hi = shi;
      return;
    }
    const int64_t n = v_.PerChannel(), head = n / 8 * 8;
    for (int64_t i = 0; i < head; ++i) {
      if (x[i] < plo) plo = x[i];
      if (x[i] > phi) phi = x[i];
    }
    for (int64_t i = head; i < n; ++i) scalar(i);
    *lo = std::isnan(slo) ? slo : std::min(slo, plo);
    *hi = std::isnan(shi) ? shi : std::max(shi, phi);
  }

  bool grad_, range_given_, per_tensor_, half_up_;
  int64_t qmin_, qmax_;
  ChannelView v_;
};

Status MakeQuantizeDequantize(const KernelDef& def, bool grad, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, grad ? 4 : 3, grad ? 3 : 1));
  NPU_RETURN_IF_ERROR(CheckFloat32(def));
  const int x_at = grad ? 1 : 0;
  const Dims& x = def.inputs[x_at].dims;
  int64_t axis;
  NPU_RETURN_IF_ERROR(def.attrs.Int("axis", -1, &axis));
  if (axis < -1) return InvalidArgument("Axis must be at least -1. Found ", axis);
  if (axis >= static_cast<int64_t>(x.size()))
    return InvalidArgument("Axis requested is larger than input dimensions. Axis: ", axis,
                           ", Input Dimensions: ", x.size());
  const ChannelView v = ViewAround(x, axis);
  for (int k = 1; k <= 2; ++k) NPU_RETURN_IF_ERROR(CheckRangeShape(def, x_at + k, v.channels, axis < 0));
  if (grad) {
    if (def.inputs[0].dims != x)
      return InvalidArgument("gradients and input must have one shape, got ", ShapeString(def.inputs[0].dims),
                             " and ", ShapeString(x));
    *out = std::make_unique<QuantizeDequantizeKernel>(true, false, axis < 0, false, 0, 0, v);
    return Status::Ok();
  }
  int64_t num_bits = 8;
  bool is_signed, range_given, narrow;
  std::string round_mode;
  if (def.attrs.Has("num_bits") && def.attrs.values.at("num_bits").type == AttrValue::kIntList)
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("num_bits", &num_bits));   // V3: a folded input
  else
    NPU_RETURN_IF_ERROR(def.attrs.Int("num_bits", 8, &num_bits));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("signed_input", true, &is_signed));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("range_given", false, &range_given));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("narrow_range", false, &narrow));
  NPU_RETURN_IF_ERROR(def.attrs.String("round_mode", "HALF_TO_EVEN", &round_mode));
  // As TF's V2 and V4 kernels: a given range is scalars only (V3 takes one per channel).
  if (range_given && axis >= 0 && def.kernel != "QuantizeAndDequantizeV3")
    return InvalidArgument("input_min must be a scalar.");
  if (round_mode != "HALF_TO_EVEN" && round_mode != "HALF_UP")
    return InvalidArgument("Round mode string must be 'HALF_UP' or 'HALF_TO_EVEN', is '", round_mode, "'");
  if (num_bits <= 0 || num_bits >= (is_signed ? 62 : 63))
    return InvalidArgument("num_bits is out of range: ", num_bits, " with signed_input_ ", is_signed);
  const int64_t qmin = is_signed ? -(int64_t{1} << (num_bits - 1)) + (narrow ? 1 : 0) : 0;
  const int64_t qmax = is_signed ? (int64_t{1} << (num_bits - 1)) - 1 : (int64_t{1} << num_bits) - 1;
  *out = std::make_unique<QuantizeDequantizeKernel>(false, range_given, axis < 0,
                                                    round_mode == "HALF_UP", qmin, qmax, v);
  return Status::Ok();
}

Status MakeQdq(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakeQuantizeDequantize(def, false, out);
}
NPU_REGISTER_KERNEL("QuantizeAndDequantizeV2", MakeQdq);
NPU_REGISTER_KERNEL("QuantizeAndDequantizeV3", MakeQdq);
NPU_REGISTER_KERNEL("QuantizeAndDequantizeV4", MakeQdq);
NPU_REGISTER_KERNEL("QuantizeAndDequantizeV4Grad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeQuantizeDequantize(d, true, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
