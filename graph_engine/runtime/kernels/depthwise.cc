// DepthwiseConv2dNative and its gradients: every input channel c has its own M filters
// [KH, KW, C, M]; output channel c * M + m. Direct loops in float32 on NHWC data.
//
// The gradients scatter into input or filter positions, so their work is split by channel
// block: a block owns its channels of dx or dW and needs no synchronisation. With multiplier 1
// (Keras' default) they run as gathers and dot products over kLanes channels at a time instead.
// NpuFusedDepthwiseConv2D is the forward pass plus an epilogue (epilogue.h) applied to each
// output pixel's channels right after they are summed.
#include "kernels/depthwise.h"

#include "kernels/layout.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kChannelBlock = 8;
// Channels one vectorised pass accumulates (multiplier 1: Keras' DepthwiseConv2D).
constexpr int64_t kLanes = 16;

// acc[0, lanes) += a * b; a whole block as a fixed-length loop, which vectorises.
inline void MulAddLanes(float* acc, const float* a, const float* b, int64_t lanes) {
  if (lanes == kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[l] * b[l];
  } else {
    for (int64_t l = 0; l < lanes; ++l) acc[l] += a[l] * b[l];
  }
}

class DepthwiseKernel : public Kernel {
 public:
  DepthwiseKernel(ConvPass kind, Window2D g, int64_t m, int dtype, Epilogue ep = {})
      : kind_(kind), g_(g), m_(m), dtype_(dtype), ep_(ep) {}

  Status Compute(const KernelArgs& args) const override {
    switch (kind_) {
      case ConvPass::kForward: Forward(args); break;
      case ConvPass::kBackpropInput: BackpropInput(args); break;
      case ConvPass::kBackpropFilter: BackpropFilter(args); break;
    }
    return Status::Ok();
  }

 private:
  int64_t cm() const { return g_.c * m_; }

  // Calls fn(input pixel offset, filter tap) for the in-range taps of output pixel (n, oh, ow).
  template <class Fn>
  void ForTaps(int64_t n, int64_t oh, int64_t ow, Fn&& fn) const {
    for (int64_t kh = 0; kh < g_.kh; ++kh) {
      const int64_t ih = oh * g_.sh - g_.pad_top + kh * g_.dh;
      if (ih < 0 || ih >= g_.h) continue;
      for (int64_t kw = 0; kw < g_.kw; ++kw) {
        const int64_t iw = ow * g_.sw - g_.pad_left + kw * g_.dw;
        if (iw >= 0 && iw < g_.w) fn(((n * g_.h + ih) * g_.w + iw) * g_.c, kh * g_.kw + kw);
      }
    }
  }

  void Forward(const KernelArgs& args) const {
    NhwcIn x(g_, dtype_, args.in(0), g_.h, g_.w, g_.c);
    FloatIn f(dtype_, args.in(1), g_.kh * g_.kw * cm());
    NhwcOut y(g_, dtype_, args.out(0), g_.oh, g_.ow, cm());
    std::unique_ptr<FloatIn> bias;
    std::unique_ptr<NhwcIn> residual;
    if (ep_.has_bias) bias = std::make_unique<FloatIn>(dtype_, args.in(2), cm());
    if (ep_.has_residual)
      residual = std::make_unique<NhwcIn>(g_, dtype_, args.in(ep_.has_bias ? 3 : 2), g_.oh, g_.ow, cm());
    ParallelFor(g_.n * g_.oh, 2 * g_.ow * g_.kh * g_.kw * cm(), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / g_.oh, oh = r % g_.oh;
        for (int64_t ow = 0; ow < g_.ow; ++ow) {
          float* o = y.data() + (r * g_.ow + ow) * cm();
          std::fill(o, o + cm(), 0.0f);
          ForTaps(n, oh, ow, [&](int64_t pixel, int64_t tap) {
            const float* xp = x.data() + pixel;
            const float* fp = f.data() + tap * cm();
            if (m_ == 1) {       // one loop over the channels: it vectorises
              for (int64_t c = 0; c < g_.c; ++c) o[c] += xp[c] * fp[c];
              return;
            }
            for (int64_t c = 0; c < g_.c; ++c)
              for (int64_t k = 0; k < m_; ++k) o[c * m_ + k] += xp[c] * fp[c * m_ + k];
          });
          if (!ep_.empty())
            ep_.ApplyRun(o, bias ? bias->data() : nullptr,
                         residual ? residual->data() + (r * g_.ow + ow) * cm() : nullptr, cm());
        }
      }
    });
    y.Finish();
  }

  // Multiplier 1 as gathers: each dx pixel sums, over the taps that reach it, dy times the
  // filter for kLanes channels at once (the scatter form below does a channel at a time). Taps
  // run from the last, so each dx value adds its terms in the scatter form's (oh, ow) order.
  void BackpropInputSingle(const float* f, const float* dy, float* dx) const {
    const int64_t c = g_.c;
    ParallelFor(g_.n * g_.h, 2 * g_.w * g_.kh * g_.kw * c, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / g_.h, ih = r % g_.h;
        for (int64_t iw = 0; iw < g_.w; ++iw) {
          float* out = dx + (r * g_.w + iw) * c;
          for (int64_t c0 = 0; c0 < c; c0 += kLanes) {
            const int64_t lanes = std::min(kLanes, c - c0);
            float acc[kLanes] = {};
            for (int64_t kh = g_.kh - 1; kh >= 0; --kh) {
              const int64_t th = ih + g_.pad_top - kh * g_.dh;
              if (th < 0 || th % g_.sh != 0 || th / g_.sh >= g_.oh) continue;
              for (int64_t kw = g_.kw - 1; kw >= 0; --kw) {
                const int64_t tw = iw + g_.pad_left - kw * g_.dw;
                if (tw < 0 || tw % g_.sw != 0 || tw / g_.sw >= g_.ow) continue;
                const float* d = dy + ((n * g_.oh + th / g_.sh) * g_.ow + tw / g_.sw) * c + c0;
                const float* w = f + (kh * g_.kw + kw) * c + c0;
                MulAddLanes(acc, d, w, lanes);
              }
            }
            std::copy(acc, acc + lanes, out + c0);
          }
        }
      }
    });
  }

  // Multiplier 1: for each tap and kLanes channels, a dot product over the output pixels (the
  // same order as the general form: n, oh, ow).
  void BackpropFilterSingle(const float* x, const float* dy, float* dw) const {
    const int64_t c = g_.c, blocks = (c + kLanes - 1) / kLanes, taps = g_.kh * g_.kw;
    ParallelFor(taps * blocks, 2 * g_.n * g_.oh * g_.ow * kLanes, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t tap = u / blocks, c0 = u % blocks * kLanes, lanes = std::min(kLanes, c - c0);
        const int64_t kh = tap / g_.kw, kw = tap % g_.kw;
        float acc[kLanes] = {};
        for (int64_t n = 0; n < g_.n; ++n)
          for (int64_t oh = 0; oh < g_.oh; ++oh) {
            const int64_t ih = oh * g_.sh - g_.pad_top + kh * g_.dh;
            if (ih < 0 || ih >= g_.h) continue;
            for (int64_t ow = 0; ow < g_.ow; ++ow) {
              const int64_t iw = ow * g_.sw - g_.pad_left + kw * g_.dw;
              if (iw < 0 || iw >= g_.w) continue;
              const float* xp = x + ((n * g_.h + ih) * g_.w + iw) * c + c0;
              const float* d = dy + ((n * g_.oh + oh) * g_.ow + ow) * c + c0;
              MulAddLanes(acc, xp, d, lanes);
            }
          }
        std::copy(acc, acc + lanes, dw + tap * c + c0);
      }
    });
  }

  void BackpropInput(const KernelArgs& args) const {
    FloatIn f(dtype_, args.in(0), g_.kh * g_.kw * cm());
    NhwcIn dy(g_, dtype_, args.in(1), g_.oh, g_.ow, cm());
    NhwcOut dx(g_, dtype_, args.out(0), g_.h, g_.w, g_.c);
    if (m_ == 1) {
      BackpropInputSingle(f.data(), dy.data(), dx.data());
      dx.Finish();
      return;
    }
    const int64_t blocks = (g_.c + kChannelBlock - 1) / kChannelBlock;
    ParallelFor(g_.n * blocks, 2 * g_.oh * g_.ow * g_.kh * g_.kw * kChannelBlock * m_, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t n = u / blocks, c0 = u % blocks * kChannelBlock, c1 = std::min(g_.c, c0 + kChannelBlock);
        for (int64_t p = 0; p < g_.h * g_.w; ++p)
          std::fill(dx.data() + (n * g_.h * g_.w + p) * g_.c + c0, dx.data() + (n * g_.h * g_.w + p) * g_.c + c1, 0.0f);
        for (int64_t oh = 0; oh < g_.oh; ++oh)
          for (int64_t ow = 0; ow < g_.ow; ++ow) {
            const float* d = dy.data() + ((n * g_.oh + oh) * g_.ow + ow) * cm();
            ForTaps(n, oh, ow, [&](int64_t pixel, int64_t tap) {
              const float* fp = f.data() + tap * cm();
              for (int64_t c = c0; c < c1; ++c) {
                float s = 0;
                for (int64_t k = 0; k < m_; ++k) s += d[c * m_ + k] * fp[c * m_ + k];
                dx.data()[pixel + c] += s;
              }
            });
          }
      }
    });
    dx.Finish();
  }

  void BackpropFilter(const KernelArgs& args) const {
    NhwcIn x(g_, dtype_, args.in(0), g_.h, g_.w, g_.c);
    NhwcIn dy(g_, dtype_, args.in(1), g_.oh, g_.ow, cm());
    FloatOut dw(dtype_, args.out(0), g_.kh * g_.kw * cm());
    if (m_ == 1) {
      BackpropFilterSingle(x.data(), dy.data(), dw.data());
      dw.Finish();
      return;
    }
    const int64_t blocks = (g_.c + kChannelBlock - 1) / kChannelBlock;
    ParallelFor(blocks, 2 * g_.n * g_.oh * g_.ow * g_.kh * g_.kw * kChannelBlock * m_, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t c0 = b * kChannelBlock, c1 = std::min(g_.c, c0 + kChannelBlock);
        for (int64_t tap = 0; tap < g_.kh * g_.kw; ++tap)
          std::fill(dw.data() + tap * cm() + c0 * m_, dw.data() + tap * cm() + c1 * m_, 0.0f);
        for (int64_t n = 0; n < g_.n; ++n)
          for (int64_t oh = 0; oh < g_.oh; ++oh)
            for (int64_t ow = 0; ow < g_.ow; ++ow) {
              const float* d = dy.data() + ((n * g_.oh + oh) * g_.ow + ow) * cm();
              ForTaps(n, oh, ow, [&](int64_t pixel, int64_t tap) {
                float* w = dw.data() + tap * cm();
                for (int64_t c = c0; c < c1; ++c)
                  for (int64_t k = 0; k < m_; ++k) w[c * m_ + k] += x.data()[pixel + c] * d[c * m_ + k];
              });
            }
      }
    });
    dw.Finish();
  }

  ConvPass kind_;
  Window2D g_;
  int64_t m_;
  int dtype_;
  Epilogue ep_;
};

// `fused`: NpuFusedDepthwiseConv2D, the forward pass with the epilogue attributes and inputs.
Status MakeDepthwise(const KernelDef& def, ConvPass kind, std::unique_ptr<Kernel>* out, bool fused = false) {
  Epilogue ep;
  if (fused) NPU_RETURN_IF_ERROR(ParseEpilogue(def.attrs, &ep));
  NPU_RETURN_IF_ERROR(CheckArity(def, 2 + ep.extra_inputs(), 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  Dims input, filter, output;
  if (kind == ConvPass::kForward) {
    input = def.inputs[0].dims, filter = def.inputs[1].dims, output = def.outputs[0].dims;
  } else if (kind == ConvPass::kBackpropInput) {
    NPU_RETURN_IF_ERROR(def.attrs.IntList("input_sizes", &input));
    NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, input));
    filter = def.inputs[0].dims, output = def.inputs[1].dims;
  } else {
    NPU_RETURN_IF_ERROR(def.attrs.IntList("filter_sizes", &filter));
    NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, filter));
    input = def.inputs[0].dims, output = def.inputs[1].dims;
  }
  if (filter.size() != 4) return Error("filter must have rank 4 [KH,KW,C,M], got ", ShapeString(filter));
  Window2D g;
  NPU_RETURN_IF_ERROR(MakeWindow2D(def.attrs, input, filter[0], filter[1], true, &g));
  if (filter[2] != g.c)
    return Error("filter ", ShapeString(filter), " has ", filter[2], " channels; the input has ", g.c);
  NPU_RETURN_IF_ERROR(CheckShape(kind == ConvPass::kForward ? "output" : "out_backprop", output,
                                 g.OutputShape(g.c * filter[3])));
  if (fused) NPU_RETURN_IF_ERROR(CheckEpilogueInputs(def, ep, 2, g.c * filter[3]));
  *out = NewDepthwiseKernel(kind, g, filter[3], def.outputs[0].dtype, ep);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("DepthwiseConv2dNative", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeDepthwise(d, ConvPass::kForward, k);
});
NPU_REGISTER_KERNEL("NpuFusedDepthwiseConv2D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeDepthwise(d, ConvPass::kForward, k, true);
});
NPU_REGISTER_KERNEL("DepthwiseConv2dNativeBackpropInput", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeDepthwise(d, ConvPass::kBackpropInput, k);
});
NPU_REGISTER_KERNEL("DepthwiseConv2dNativeBackpropFilter", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeDepthwise(d, ConvPass::kBackpropFilter, k);
});

}  // namespace

std::unique_ptr<Kernel> NewDepthwiseKernel(ConvPass pass, const Window2D& g, int64_t multiplier,
                                           int dtype, const Epilogue& ep) {
  return std::make_unique<DepthwiseKernel>(pass, g, multiplier, dtype, ep);
}

}  // namespace kernels
}  // namespace npu
