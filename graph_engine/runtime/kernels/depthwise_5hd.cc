// DepthwiseConv2dNative / NpuFusedDepthwiseConv2D on NC1HWC0 activations, channel multiplier 1
// (MobileNet's). The filter stays ND [KH, KW, C, 1]: it is already channel-minor, so each tap
// is one C0-lane run once the last block is zero-padded (done per run, the filter is small).
// Each output run of C0 lanes accumulates KH*KW lane-wise products: the inner loop is a
// fixed-length C0 vector loop the compiler vectorizes.
#include "kernels/epilogue.h"
#include "kernels/float_io.h"
#include "kernels/format.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {
namespace {

class Depthwise5hdKernel : public Kernel {
 public:
  Depthwise5hdKernel(Window2D g, Nc1hwc0 x, Nc1hwc0 y, int dtype, Epilogue ep)
      : g_(g), x_(x), y_(y), dtype_(dtype), ep_(ep) {}

  Status Compute(const KernelArgs& args) const override {
    const int64_t c0 = x_.c0, taps = g_.kh * g_.kw, cp = x_.c1 * c0;
    FloatIn x(dtype_, args.in(0), x_.size());
    FloatIn f(dtype_, args.in(1), taps * x_.c);
    std::vector<float> w(taps * cp, 0.0f), bias(cp, 0.0f);   // [taps, C1*C0], padding zero
    for (int64_t t = 0; t < taps; ++t)
      std::copy(f.data() + t * x_.c, f.data() + (t + 1) * x_.c, w.begin() + t * cp);
    int next = 2;
    if (ep_.has_bias) {
      FloatIn b(dtype_, args.in(next++), x_.c);
      std::copy(b.data(), b.data() + x_.c, bias.begin());
    }
    std::unique_ptr<FloatIn> residual;
    if (ep_.has_residual) residual = std::make_unique<FloatIn>(dtype_, args.in(next), y_.size());
    FloatOut y(dtype_, args.out(0), y_.size());
    // One task per output row of one (n, c1) plane.
    ParallelFor(x_.n * x_.c1 * g_.oh, g_.ow * taps * c0 * 2, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t plane = r / g_.oh, oh = r % g_.oh, b = plane % x_.c1;
        const float* xin = x.data() + plane * x_.plane();
        float* out = y.data() + plane * y_.plane() + oh * g_.ow * c0;
        for (int64_t ow = 0; ow < g_.ow; ++ow, out += c0) {
          float acc[32] = {0};
          for (int64_t kh = 0; kh < g_.kh; ++kh) {
            const int64_t ih = oh * g_.sh - g_.pad_top + kh * g_.dh;
            if (ih < 0 || ih >= g_.h) continue;
            for (int64_t kw = 0; kw < g_.kw; ++kw) {
              const int64_t iw = ow * g_.sw - g_.pad_left + kw * g_.dw;
              if (iw < 0 || iw >= g_.w) continue;
              const float* xv = xin + (ih * g_.w + iw) * c0;
              const float* wv = w.data() + (kh * g_.kw + kw) * cp + b * c0;
              for (int64_t l = 0; l < c0; ++l) acc[l] += xv[l] * wv[l];
            }
          }
          std::copy(acc, acc + c0, out);
          const int64_t at = out - y.data();
          ep_.ApplyRun(out, bias.data() + b * c0, residual ? residual->data() + at : nullptr, c0);
        }
      }
    });
    y.Finish();
    return Status::Ok();
  }

 private:
  Window2D g_;
  Nc1hwc0 x_, y_;
  int dtype_;
  Epilogue ep_;
};

Status MakeDepthwise5hd(const KernelDef& def, std::unique_ptr<Kernel>* out, bool fused) {
  Epilogue ep;
  if (fused) NPU_RETURN_IF_ERROR(ParseEpilogue(def.attrs, &ep));
  NPU_RETURN_IF_ERROR(CheckArity(def, 2 + ep.extra_inputs(), 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const TensorDesc &in = def.inputs[0], &filter = def.inputs[1], &o = def.outputs[0];
  if (in.format != kNC1HWC0 || filter.format != kND || o.format != kNC1HWC0)
    return Error("with padded formats needs an NC1HWC0 input, an ND filter and an NC1HWC0 output; got ",
                 FormatName(in.format), ", ", FormatName(filter.format), ", ", FormatName(o.format));
  std::string data_format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &data_format));
  if (data_format != "NHWC" || in.dims.size() != 4 || filter.dims.size() != 4 || filter.dims[3] != 1)
    return Error("on NC1HWC0 needs data_format NHWC, a 4-D input and a [KH,KW,C,1] filter; got ", data_format,
                 ", input ", ShapeString(in.dims), ", filter ", ShapeString(filter.dims));
  Window2D g;
  NPU_RETURN_IF_ERROR(MakeWindow2D(def.attrs, in.dims, filter.dims[0], filter.dims[1], true, &g));
  if (filter.dims[2] != g.c)
    return Error("filter ", ShapeString(filter.dims), " has ", filter.dims[2], " channels; the input has ", g.c);
  NPU_RETURN_IF_ERROR(CheckShape("output", o.dims, g.OutputShape(g.c)));
  if (fused) {
    NPU_RETURN_IF_ERROR(CheckEpilogueInputs(def, ep, 2, g.c));
    if (ep.has_bias && def.inputs[2].format != kND) return Error("bias must be stored ND");
    if (ep.has_residual && def.inputs.back().format != kNC1HWC0) return Error("residual must be stored NC1HWC0");
  }
  Nc1hwc0 x, y;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(in, &x));
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(o, &y));
  *out = std::make_unique<Depthwise5hdKernel>(g, x, y, o.dtype, ep);
  return Status::Ok();
}

NPU_REGISTER_FORMAT_KERNEL("DepthwiseConv2dNative", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeDepthwise5hd(d, k, false);
});
NPU_REGISTER_FORMAT_KERNEL("NpuFusedDepthwiseConv2D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeDepthwise5hd(d, k, true);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
