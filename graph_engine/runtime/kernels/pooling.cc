// MaxPool/AvgPool, their gradients and MaxPoolGradGrad, in float32 over either data layout.
//
// Work is split by (image, channel block): each unit reads and writes only its own channels,
// so the gradients' scatter needs no synchronisation.
#include <limits>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {
namespace {

enum class PoolKind { kMax, kAvg, kMaxGrad, kAvgGrad, kMaxGradGrad };

// The channel loops of the NHWC layout, over contiguous channels. Restrict parameters let them
// vectorize: written inline on an array the window lambda captured, they stayed scalar (the
// compiler could not rule out that the input aliases it), 3x slower than TF's max pooling.
void MaxInto(float* __restrict acc, const float* __restrict x, int64_t n) {
  for (int64_t c = 0; c < n; ++c) acc[c] = std::max(acc[c], x[c]);
}

void AddInto(float* __restrict acc, const float* __restrict x, int64_t n) {
  for (int64_t c = 0; c < n; ++c) acc[c] += x[c];
}

// Window element k against the best so far: a strictly greater value wins (scan order).
void ArgMaxStep(float* __restrict best, int32_t* __restrict which, const float* __restrict x,
                int32_t k, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const bool greater = x[c] > best[c];
    best[c] = greater ? x[c] : best[c];
    which[c] = greater ? k : which[c];
  }
}

// dx of window element k when windows tile the input: the gradient where it was the maximum.
void GradAt(float* __restrict dx, const int32_t* __restrict which, const float* __restrict dy,
            int32_t k, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dx[c] = which[c] == k ? dy[c] : 0.0f;
}

class PoolKernel : public Kernel {
 public:
  PoolKernel(PoolKind kind, Window2D g, int dtype) : kind_(kind), g_(g), dtype_(dtype) {
    g_.Strides(g_.h, g_.w, g_.c, in_);
    g_.Strides(g_.oh, g_.ow, g_.c, out_);
    block_ = g_.nchw ? 1 : 64;   // NHWC: a block of contiguous channels per window element
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t in_size = g_.n * g_.h * g_.w * g_.c, out_size = g_.n * g_.oh * g_.ow * g_.c;
    // Forward: x -> y. MaxPoolGrad: (x, y, dy) -> dx. AvgPoolGrad: dy -> dx.
    // MaxPoolGradGrad: (x, y, ddx) -> ddy (ddx shaped like x, ddy like y).
    const bool forward = kind_ != PoolKind::kMaxGrad && kind_ != PoolKind::kAvgGrad;
    const bool three_inputs = kind_ == PoolKind::kMaxGrad || kind_ == PoolKind::kMaxGradGrad;
    FloatIn x(dtype_, args.in(0), kind_ == PoolKind::kAvgGrad ? out_size : in_size);
    FloatIn dy(dtype_, args.in(three_inputs ? 2 : 0),
               kind_ == PoolKind::kMaxGrad ? out_size : kind_ == PoolKind::kMaxGradGrad ? in_size : 0);
    FloatIn y(dtype_, args.in(1), kind_ == PoolKind::kMaxGradGrad ? out_size : 0);
    FloatOut out(dtype_, args.out(0), forward ? out_size : in_size);
    if (g_.nchw) Run<false>(x.data(), y.data(), dy.data(), out.data());
    else Run<true>(x.data(), y.data(), dy.data(), out.data());
    out.Finish();
    return Status::Ok();
  }

 private:
  // kNhwc: channels are contiguous (stride 1, known to the compiler: the channel loops
  // vectorize); else the strides are read from in_/out_.
  template <bool kNhwc>
  void Run(const float* x, const float* y, const float* dy, float* out) const {
    const int64_t blocks = (g_.c + block_ - 1) / block_;
    ParallelFor(g_.n * blocks, g_.oh * g_.ow * g_.kh * g_.kw * block_, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t n = u / blocks, c0 = u % blocks * block_, c1 = std::min(g_.c, c0 + block_);
        switch (kind_) {
          case PoolKind::kMax: Max<kNhwc>(x, out, n, c0, c1); break;
          case PoolKind::kAvg: Avg<kNhwc>(x, out, n, c0, c1); break;
          case PoolKind::kMaxGrad: MaxGrad<kNhwc>(x, dy, out, n, c0, c1); break;
          case PoolKind::kAvgGrad: AvgGrad<kNhwc>(x, out, n, c0, c1); break;
          case PoolKind::kMaxGradGrad: MaxGradGrad<kNhwc>(x, y, dy, out, n, c0, c1); break;
        }
      }
    });
  }
  template <bool kNhwc>
  int64_t InStride() const { return kNhwc ? 1 : in_[3]; }
  template <bool kNhwc>
  int64_t OutStride() const { return kNhwc ? 1 : out_[3]; }

  // Calls fn(element offset of the window pixel without channel) for the in-range pixels of
  // output pixel (oh, ow), in TF's scan order (rows, then columns).
  template <class Fn>
  void ForWindow(int64_t n, int64_t oh, int64_t ow, Fn&& fn) const {
    const int64_t h0 = oh * g_.sh - g_.pad_top, w0 = ow * g_.sw - g_.pad_left;
    for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h0 + g_.kh, g_.h); ++ih)
      for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w0 + g_.kw, g_.w); ++iw)
        fn(n * in_[0] + ih * in_[1] + iw * in_[2]);
  }
  int64_t OutAt(int64_t n, int64_t oh, int64_t ow) const {
    return n * out_[0] + oh * out_[1] + ow * out_[2];
  }
  int64_t WindowCount(int64_t oh, int64_t ow) const {
    const int64_t h0 = oh * g_.sh - g_.pad_top, w0 = ow * g_.sw - g_.pad_left;
    return (std::min(h0 + g_.kh, g_.h) - std::max<int64_t>(h0, 0)) *
           (std::min(w0 + g_.kw, g_.w) - std::max<int64_t>(w0, 0));
  }

  template <bool kNhwc>
  void Max(const float* x, float* y, int64_t n, int64_t c0, int64_t c1) const {
    float acc[64];
    for (int64_t oh = 0; oh < g_.oh; ++oh)
      for (int64_t ow = 0; ow < g_.ow; ++ow) {
        std::fill(acc, acc + (c1 - c0), LowestOf(dtype_));   // TF's start: NaN never wins
        ForWindow(n, oh, ow, [&](int64_t at) {
          if constexpr (kNhwc) {
            MaxInto(acc, x + at + c0, c1 - c0);
          } else {
            for (int64_t c = c0; c < c1; ++c) acc[c - c0] = std::max(acc[c - c0], x[at + c * InStride<kNhwc>()]);
          }
        });
        for (int64_t c = c0; c < c1; ++c) y[OutAt(n, oh, ow) + c * OutStride<kNhwc>()] = acc[c - c0];
      }
  }

  // Averages over the in-range pixels only (SAME padding does not count), as TF does.
  template <bool kNhwc>
  void Avg(const float* x, float* y, int64_t n, int64_t c0, int64_t c1) const {
    float acc[64];
    for (int64_t oh = 0; oh < g_.oh; ++oh)
      for (int64_t ow = 0; ow < g_.ow; ++ow) {
        std::fill(acc, acc + (c1 - c0), 0.0f);
        ForWindow(n, oh, ow, [&](int64_t at) {
          if constexpr (kNhwc) {
            AddInto(acc, x + at + c0, c1 - c0);
          } else {
            for (int64_t c = c0; c < c1; ++c) acc[c - c0] += x[at + c * InStride<kNhwc>()];
          }
        });
        const float count = static_cast<float>(WindowCount(oh, ow));
        for (int64_t c = c0; c < c1; ++c) y[OutAt(n, oh, ow) + c * OutStride<kNhwc>()] = acc[c - c0] / count;
      }
  }

  template <bool kNhwc>
  void ZeroInput(float* dx, int64_t n, int64_t c0, int64_t c1) const {
    for (int64_t ih = 0; ih < g_.h; ++ih)
      for (int64_t iw = 0; iw < g_.w; ++iw)
        for (int64_t c = c0; c < c1; ++c) dx[n * in_[0] + ih * in_[1] + iw * in_[2] + c * InStride<kNhwc>()] = 0;
  }

  // Windows that tile the input exactly (MaxPooling2D's default 2x2, stride 2, on even sizes):
  // every input element is in one window, so dx is written once, without zeroing it first.
  bool Tiles() const {
    return g_.sh == g_.kh && g_.sw == g_.kw && g_.pad_top == 0 && g_.pad_left == 0 &&
           g_.oh * g_.kh == g_.h && g_.ow * g_.kw == g_.w;
  }

  // The gradient goes to the first maximum of each window (a strictly greater value wins,
  // in scan order). The search keeps, per channel, the best value and its window position:
  // selects over local arrays, which vectorize.
  template <bool kNhwc>
  void MaxGrad(const float* x, const float* dy, float* dx, int64_t n, int64_t c0, int64_t c1) const {
    const bool tiles = kNhwc && Tiles();
    if (!tiles) ZeroInput<kNhwc>(dx, n, c0, c1);
    const int64_t ics = InStride<kNhwc>(), ocs = OutStride<kNhwc>(), nc = c1 - c0;
    std::vector<int64_t> window(g_.kh * g_.kw);
    float best[64];
    int32_t which[64];
    for (int64_t oh = 0; oh < g_.oh; ++oh)
      for (int64_t ow = 0; ow < g_.ow; ++ow) {
        int32_t count = 0;
        ForWindow(n, oh, ow, [&](int64_t at) { window[count++] = at + c0 * ics; });
        if (count == 0) continue;
        for (int64_t c = 0; c < nc; ++c) {
          best[c] = x[window[0] + c * ics];
          which[c] = 0;
        }
        for (int32_t k = 1; k < count; ++k) {
          const float* pixel = x + window[k];
          if constexpr (kNhwc) {
            ArgMaxStep(best, which, pixel, k, nc);
          } else {
            for (int64_t c = 0; c < nc; ++c) {
              const float v = pixel[c * ics];
              const bool greater = v > best[c];
              best[c] = greater ? v : best[c];
              which[c] = greater ? k : which[c];
            }
          }
        }
        const float* grad = dy + OutAt(n, oh, ow) + c0 * ocs;
        if (tiles) {
          for (int32_t k = 0; k < count; ++k) GradAt(dx + window[k], which, grad, k, nc);
          continue;
        }
        for (int64_t c = 0; c < nc; ++c) dx[window[which[c]] + c * ics] += grad[c * ocs];
      }
  }

  // Each output position takes ddx at its window's first maximum (MaxGrad's choice).
  // As TF's CPU kernel: each output takes ddx at the first window element equal to the pooled
  // value y (0 when none is: a NaN window, or a y that is not this input's pooling).
  template <bool kNhwc>
  void MaxGradGrad(const float* x, const float* y, const float* ddx, float* ddy, int64_t n,
                   int64_t c0, int64_t c1) const {
    bool found[64];
    for (int64_t oh = 0; oh < g_.oh; ++oh)
      for (int64_t ow = 0; ow < g_.ow; ++ow) {
        const int64_t o = OutAt(n, oh, ow);
        std::fill(found, found + (c1 - c0), false);
        for (int64_t c = c0; c < c1; ++c) ddy[o + c * OutStride<kNhwc>()] = 0.0f;
        ForWindow(n, oh, ow, [&](int64_t at) {
          for (int64_t c = c0; c < c1; ++c) {
            const int64_t i = at + c * InStride<kNhwc>();
            if (!found[c - c0] && x[i] == y[o + c * OutStride<kNhwc>()]) {
              ddy[o + c * OutStride<kNhwc>()] = ddx[i];
              found[c - c0] = true;
            }
          }
        });
      }
  }

  template <bool kNhwc>
  void AvgGrad(const float* dy, float* dx, int64_t n, int64_t c0, int64_t c1) const {
    ZeroInput<kNhwc>(dx, n, c0, c1);
    for (int64_t oh = 0; oh < g_.oh; ++oh)
      for (int64_t ow = 0; ow < g_.ow; ++ow) {
        const float inv = 1.0f / static_cast<float>(WindowCount(oh, ow));
        ForWindow(n, oh, ow, [&](int64_t at) {
          for (int64_t c = c0; c < c1; ++c) dx[at + c * InStride<kNhwc>()] += dy[OutAt(n, oh, ow) + c * OutStride<kNhwc>()] * inv;
        });
      }
  }

  PoolKind kind_;
  Window2D g_;
  int dtype_;
  int64_t in_[4], out_[4], block_;
};

Status MakePool(const KernelDef& def, PoolKind kind, std::unique_ptr<Kernel>* out) {
  const int n_in = kind == PoolKind::kMaxGrad || kind == PoolKind::kMaxGradGrad ? 3 : 1;
  NPU_RETURN_IF_ERROR(CheckArity(def, n_in, 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  int64_t kh, kw;
  NPU_RETURN_IF_ERROR(PoolWindowSize(def.attrs, &kh, &kw));
  Dims input = kind == PoolKind::kAvgGrad ? Dims() : def.inputs[0].dims;
  if (kind == PoolKind::kAvgGrad) NPU_RETURN_IF_ERROR(def.attrs.IntList("orig_input_shape", &input));
  Window2D g;
  NPU_RETURN_IF_ERROR(MakeWindow2D(def.attrs, input, kh, kw, false, &g));
  const Dims pooled = g.OutputShape(g.c);
  switch (kind) {
    case PoolKind::kMax:
    case PoolKind::kAvg:
      NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, pooled));
      break;
    case PoolKind::kMaxGrad:
      NPU_RETURN_IF_ERROR(CheckShape("orig_output", def.inputs[1].dims, pooled));
      NPU_RETURN_IF_ERROR(CheckShape("grad", def.inputs[2].dims, pooled));
      NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, input));
      break;
    case PoolKind::kMaxGradGrad:
      NPU_RETURN_IF_ERROR(CheckShape("orig_output", def.inputs[1].dims, pooled));
      NPU_RETURN_IF_ERROR(CheckShape("grad", def.inputs[2].dims, input));
      NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, pooled));
      break;
    case PoolKind::kAvgGrad:
      NPU_RETURN_IF_ERROR(CheckShape("grad", def.inputs[0].dims, pooled));
      NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, input));
      break;
  }
  *out = std::make_unique<PoolKernel>(kind, g, def.outputs[0].dtype);
  return Status::Ok();
}

template <PoolKind kKind>
Status MakePoolOf(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakePool(def, kKind, out);
}

NPU_REGISTER_KERNEL("MaxPool", MakePoolOf<PoolKind::kMax>);
NPU_REGISTER_KERNEL("MaxPoolV2", MakePoolOf<PoolKind::kMax>);
NPU_REGISTER_KERNEL("AvgPool", MakePoolOf<PoolKind::kAvg>);
NPU_REGISTER_KERNEL("MaxPoolGrad", MakePoolOf<PoolKind::kMaxGrad>);
NPU_REGISTER_KERNEL("MaxPoolGradV2", MakePoolOf<PoolKind::kMaxGrad>);
NPU_REGISTER_KERNEL("AvgPoolGrad", MakePoolOf<PoolKind::kAvgGrad>);
NPU_REGISTER_KERNEL("MaxPoolGradGrad", MakePoolOf<PoolKind::kMaxGradGrad>);

}  // namespace
}  // namespace kernels
}  // namespace npu
