// Conv2D and its gradients as im2col + GEMM in float32, on NHWC data (NCHW is relaid out
// around the computation). Filters are HWIO: [KH, KW, C, OC], i.e. a [KH*KW*C, OC] matrix.
// NpuFusedConv2D is the forward pass plus an epilogue (bias, residual, activation; see
// epilogue.h) applied to each GEMM block while it is in cache.
//
// With one group, undilated columns and whole vectors of channels, the forward (from 128 output
// pixels on), a stride-1 dx and the filter gradient run direct instead (conv_direct.h): no
// im2col copy, no GEMM packing.
//
// Grouped convolution (filter [KH, KW, C/G, OC], G groups; graph_engine/ops/conv.py): group g
// contracts its input channels [g*C/G, (g+1)*C/G) with its filter columns [g*OC/G, (g+1)*OC/G)
// into those output channels, one im2col + GEMM per group, its filter columns and gradient
// columns packed dense for the GEMM. Groups of one input channel are a depthwise convolution
// and run the depthwise kernels instead (depthwise.h): same filter memory, direct loops.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/conv_direct.h"
#include "kernels/depthwise.h"
#include "kernels/epilogue.h"
#include "kernels/format.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"
#include "kernels/scratch.h"

namespace npu {
namespace kernels {
namespace {

// About this many floats of im2col rows per block: large enough for an efficient GEMM,
// small enough to stay in cache.
constexpr int64_t kColsBlockFloats = 1 << 17;
// Forward convolutions run direct (conv_direct.h) from this many output pixels on, up to this
// contraction length (as kernels/conv_5hd.cc); a 1x1 convolution that reads its input in place
// stays a GEMM. The filter gradient's direct form adds pixels into dW chunk by chunk: up to
// this many floats of dW (it stays in cache meanwhile).
constexpr int64_t kDirectMinPixels = 128, kDirectMaxK = 4608, kDirectMaxGradFloats = 1 << 16;
// Output pixels per filter-gradient chunk.
constexpr int64_t kGradChunkPixels = 256;
// dx runs direct from this many pixels on: below, turning the filter around costs more than the
// GEMM's packing (ResNet50's 8x8 to 2x2 stages at batch 4 ran up to 3x slower).
constexpr int64_t kDirectDxMinPixels = 512;

// Output pixel p = (n * OH + oh) * OW + ow has the im2col row [KH, KW] of input pixels
// (oh * sh - pad_top + kh * dh, ow * sw - pad_left + kw * dw). For each output pixel in
// [p0, p1) and each window row kh, fn(taps: the window row's first tap index within the block's
// rows, in_row: the input row's first pixel index or -1 when the row is outside the image (all
// zero), iw0: the window row's first input column, inside: all of its KW columns are in the image).
template <class Fn>
void ForEachWindowRow(const Window2D& g, int64_t p0, int64_t p1, Fn&& fn) {
  int64_t n = p0 / (g.oh * g.ow), oh = p0 / g.ow % g.oh, ow = p0 % g.ow;   // stepped below
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t iw0 = ow * g.sw - g.pad_left;
    const bool inside = iw0 >= 0 && iw0 + (g.kw - 1) * g.dw < g.w;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
      fn(((p - p0) * g.kh + kh) * g.kw, ih >= 0 && ih < g.h ? (n * g.h + ih) * g.w : -1, iw0,
         inside);
    }
    if (++ow == g.ow) {
      ow = 0;
      if (++oh == g.oh) { oh = 0; ++n; }
    }
  }
}

// A window row's lanes are one contiguous run of the input when it takes every channel and
// its columns are adjacent.
bool RowIsRun(const Window2D& g, int64_t cn, bool inside) { return inside && cn == g.c && g.dw == 1; }

// im2col rows [KH, KW, cn] of pixels [p0, p1) from input channels [c0, c0 + cn).
void Im2Col(const Window2D& g, const float* x, int64_t p0, int64_t p1, int64_t c0, int64_t cn,
            float* cols) {
  ForEachWindowRow(g, p0, p1, [&](int64_t taps, int64_t in_row, int64_t iw0, bool inside) {
    float* dst = cols + taps * cn;
    if (in_row < 0) { std::fill(dst, dst + g.kw * cn, 0.0f); return; }
    const float* row = x + in_row * g.c + c0;
    if (RowIsRun(g, cn, inside)) {   // a few channels (RGB): one run, not KW tiny copies
      CopyFloats(dst, row + iw0 * g.c, g.kw * cn);
      return;
    }
    for (int64_t kw = 0; kw < g.kw; ++kw, dst += cn) {
      const int64_t iw = iw0 + kw * g.dw;
      if (iw < 0 || iw >= g.w) std::fill(dst, dst + cn, 0.0f);
      else CopyFloats(dst, row + iw * g.c, cn);
    }
  });
}

// Adds im2col rows [KH, KW, cn] back into input channels [c0, c0 + cn) of dx.
void Col2ImAdd(const Window2D& g, const float* cols, int64_t p0, int64_t p1, int64_t c0,
               int64_t cn, float* dx) {
  ForEachWindowRow(g, p0, p1, [&](int64_t taps, int64_t in_row, int64_t iw0, bool inside) {
    if (in_row < 0) return;
    const float* src = cols + taps * cn;
    float* row = dx + in_row * g.c + c0;
    if (RowIsRun(g, cn, inside)) {
      float* d = row + iw0 * g.c;
      for (int64_t i = 0; i < g.kw * cn; ++i) d[i] += src[i];
      return;
    }
    for (int64_t kw = 0; kw < g.kw; ++kw, src += cn) {
      const int64_t iw = iw0 + kw * g.dw;
      if (iw < 0 || iw >= g.w) continue;
      float* d = row + iw * g.c;
      for (int64_t i = 0; i < cn; ++i) d[i] += src[i];
    }
  });
}

// dst[r, 0:n] = src[r, 0:n] for `rows` rows with leading dimensions src_ld and dst_ld: a group's
// columns of a filter or gradient matrix, packed dense for Gemm or stored back.
void CopyColumns(const float* src, int64_t src_ld, int64_t rows, int64_t n, float* dst,
                 int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, n * sizeof(float));
}

class ConvKernel : public Kernel {
 public:
  ConvKernel(ConvPass pass, Window2D g, int64_t oc, int64_t groups, int dtype, Epilogue ep = {})
      : pass_(pass), g_(g), oc_(oc), groups_(groups), dtype_(dtype), ep_(ep) {}

  Status Compute(const KernelArgs& args) const override {
    switch (pass_) {
      case ConvPass::kForward: Forward(args); break;
      case ConvPass::kBackpropInput: BackpropInput(args); break;
      case ConvPass::kBackpropFilter: BackpropFilter(args); break;
    }
    return Status::Ok();
  }

 private:
  int64_t cg() const { return g_.c / groups_; }           // input channels of a group
  int64_t og() const { return oc_ / groups_; }            // output channels of a group
  int64_t kkc() const { return g_.kh * g_.kw * cg(); }    // a group's contraction length
  int64_t pixels() const { return g_.n * g_.oh * g_.ow; }
  int64_t RowsPerBlock() const {
    return std::max<int64_t>(32, kColsBlockFloats / std::max<int64_t>(1, kkc()));
  }

  // Each group's filter columns as a dense [kkc, og] matrix (none needed for one group).
  std::vector<std::vector<float>> GroupFilters(const float* f) const {
    std::vector<std::vector<float>> w(groups_ > 1 ? groups_ : 0);
    for (size_t gi = 0; gi < w.size(); ++gi) {
      w[gi].resize(kkc() * og());
      CopyColumns(f + gi * og(), oc_, kkc(), og(), w[gi].data(), og());
    }
    return w;
  }

  void Forward(const KernelArgs& args) const {
    NhwcIn x(g_, dtype_, args.in(0), g_.h, g_.w, g_.c);
    FloatIn f(dtype_, args.in(1), kkc() * oc_);
    NhwcOut y(g_, dtype_, args.out(0), g_.oh, g_.ow, oc_);
    std::unique_ptr<FloatIn> bias;
    std::unique_ptr<NhwcIn> residual;
    if (ep_.has_bias) bias = std::make_unique<FloatIn>(dtype_, args.in(2), oc_);
    if (ep_.has_residual)
      residual = std::make_unique<NhwcIn>(g_, dtype_, args.in(ep_.has_bias ? 3 : 2), g_.oh, g_.ow, oc_);
    // Output pixels [p0, p1) are final: add bias and residual, activate, while in cache.
    auto epilogue = [&](int64_t p0, int64_t p1) {
      ep_.ApplyRows(y.data() + p0 * oc_, bias ? bias->data() : nullptr,
                    residual ? residual->data() + p0 * oc_ : nullptr, p1 - p0, oc_);
    };
    const bool pointwise = groups_ == 1 && g_.kh == 1 && g_.kw == 1 && g_.sh == 1 && g_.sw == 1 &&
                           g_.pad_top == 0 && g_.pad_left == 0 && g_.oh == g_.h && g_.ow == g_.w;
    if (!pointwise && groups_ == 1 && g_.dw == 1 && pixels() >= kDirectMinPixels &&
        kkc() <= kDirectMaxK && oc_ % 16 == 0) {
      // Zero-bordered input: every window reads its kh runs of kw * c floats in place.
      const DirectGeometry geo = DirectGeometry::Forward(g_);
      float* padded = Scratch(kScratchPadded, g_.n * geo.hp * geo.wp * g_.c);
      ZeroBordered(x.data(), g_.n, g_.h, g_.w, g_.c, g_.pad_top, g_.pad_left, geo.hp, geo.wp,
                   padded);
      const DirectBlock input{padded, g_.c, g_.dh * geo.wp * g_.c, g_.kw * g_.c};
      DirectConvAll(&input, 1, g_.kh, geo, f.data(), oc_, y.data(),
                    [&](int64_t p0, int64_t p1, const float*) { epilogue(p0, p1); });
      y.Finish();
      return;
    }
    const int64_t rows = RowsPerBlock(), blocks = (pixels() + rows - 1) / rows;
    if (pointwise && (ep_.empty() || blocks < PlanThreads())) {
      // One GEMM parallel inside (a few large blocks would leave threads idle).
      Gemm(pixels(), oc_, g_.c, x.data(), false, f.data(), false, y.data());
      if (!ep_.empty()) ParallelFor(pixels(), 8 * oc_, epilogue);
    } else {
      const std::vector<std::vector<float>> wg = GroupFilters(f.data());
      ParallelFor(blocks, 2 * rows * kkc() * oc_, [&](int64_t b0, int64_t b1) {
        float* cols = Scratch(kScratchCols, pointwise ? 0 : rows * kkc());
        float* part = Scratch(kScratchGroup, groups_ > 1 ? rows * og() : 0);   // a group's outputs
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t p0 = b * rows, p1 = std::min(pixels(), p0 + rows);
          float* yb = y.data() + p0 * oc_;
          for (int64_t gi = 0; gi < groups_; ++gi) {
            const float* patches = x.data() + p0 * g_.c;   // a 1x1 convolution reads x as is
            if (!pointwise) {
              Im2Col(g_, x.data(), p0, p1, gi * cg(), cg(), cols);
              patches = cols;
            }
            if (groups_ == 1) {
              Gemm(p1 - p0, oc_, kkc(), patches, false, f.data(), false, yb);
            } else {
              Gemm(p1 - p0, og(), kkc(), patches, false, wg[gi].data(), false, part);
              CopyColumns(part, og(), p1 - p0, og(), yb + gi * og(), oc_);
            }
          }
          epilogue(p0, p1);
        }
      });
    }
    y.Finish();
  }

  // dx = col2im(dy x W^T) per group, image by image (images write disjoint parts of dx).
  void BackpropInput(const KernelArgs& args) const {
    FloatIn f(dtype_, args.in(0), kkc() * oc_);
    NhwcIn dy(g_, dtype_, args.in(1), g_.oh, g_.ow, oc_);
    NhwcOut dx(g_, dtype_, args.out(0), g_.h, g_.w, g_.c);
    if (DirectBackpropInput(f.data(), dy.data(), dx.data())) {
      dx.Finish();
      return;
    }
    const int64_t per_image = g_.oh * g_.ow;
    if (groups_ == 1 && pixels() <= RowsPerBlock()) {
      // Small images (the last stages of a CNN): one GEMM over every pixel, parallel inside,
      // packs the filter once instead of once per image.
      float* cols = Scratch(kScratchCols, pixels() * kkc());
      Gemm(pixels(), kkc(), oc_, dy.data(), false, f.data(), true, cols);
      std::fill(dx.data(), dx.data() + g_.n * g_.h * g_.w * g_.c, 0.0f);
      ParallelFor(g_.n, 2 * per_image * kkc(), [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n)
          Col2ImAdd(g_, cols + n * per_image * kkc(), n * per_image, (n + 1) * per_image,
                    0, g_.c, dx.data());
      });
      dx.Finish();
      return;
    }
    const std::vector<std::vector<float>> wg = GroupFilters(f.data());
    const int64_t rows = std::min(RowsPerBlock(), per_image);
    ParallelFor(g_.n, 2 * per_image * kkc() * oc_, [&](int64_t n0, int64_t n1) {
      float* cols = Scratch(kScratchCols, rows * kkc());
      float* dyg = Scratch(kScratchGroup, groups_ > 1 ? rows * og() : 0);   // a group's dy
      for (int64_t n = n0; n < n1; ++n) {
        float* dxn = dx.data() + n * g_.h * g_.w * g_.c;
        std::fill(dxn, dxn + g_.h * g_.w * g_.c, 0.0f);
        for (int64_t p0 = n * per_image; p0 < (n + 1) * per_image; p0 += rows) {
          const int64_t p1 = std::min((n + 1) * per_image, p0 + rows);
          for (int64_t gi = 0; gi < groups_; ++gi) {
            if (groups_ == 1) {
              Gemm(p1 - p0, kkc(), oc_, dy.data() + p0 * oc_, false, f.data(), true, cols);
            } else {
              CopyColumns(dy.data() + p0 * oc_ + gi * og(), oc_, p1 - p0, og(), dyg, og());
              Gemm(p1 - p0, kkc(), og(), dyg, false, wg[gi].data(), true, cols);
            }
            Col2ImAdd(g_, cols, p0, p1, gi * cg(), cg(), dx.data());
          }
        }
      }
    });
    dx.Finish();
  }

  // A stride-1 convolution's dx is the forward convolution of dy with the filter turned
  // around (taps reversed, in and out channels swapped) and the complementary padding: direct
  // when that applies (one group, undilated, whole vectors of input channels). Returns false
  // when it does not.
  bool DirectBackpropInput(const float* f, const float* dy, float* dx) const {
    const int64_t top = g_.kh - 1 - g_.pad_top, left = g_.kw - 1 - g_.pad_left;
    if (groups_ != 1 || g_.sh != 1 || g_.sw != 1 || g_.dh != 1 || g_.dw != 1 || top < 0 ||
        left < 0 || g_.c % 16 != 0 || g_.kh * g_.kw * oc_ > kDirectMaxK ||
        g_.n * g_.h * g_.w < kDirectDxMinPixels)
      return false;
    // turned[(kh', kw', o), c] = W[(KH-1-kh', KW-1-kw', c), o], in runs of 16 o per c
    const int64_t taps = g_.kh * g_.kw, runs = (oc_ + 15) / 16;
    float* turned = Scratch(kScratchGroup, taps * oc_ * g_.c);
    ParallelFor(taps * runs, 16 * g_.c, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = i / runs, o0 = i % runs * 16, o1 = std::min(oc_, o0 + 16);
        const float* tap = f + (taps - 1 - t) * g_.c * oc_;
        for (int64_t c = 0; c < g_.c; ++c)
          for (int64_t o = o0; o < o1; ++o) turned[(t * oc_ + o) * g_.c + c] = tap[c * oc_ + o];
      }
    });
    const DirectGeometry geo{g_.n, g_.h, g_.w, 1, 1, std::max(g_.oh + top, g_.h + g_.kh - 1),
                             std::max(g_.ow + left, g_.w + g_.kw - 1)};
    float* padded = Scratch(kScratchPadded, g_.n * geo.hp * geo.wp * oc_);
    ZeroBordered(dy, g_.n, g_.oh, g_.ow, oc_, top, left, geo.hp, geo.wp, padded);
    const DirectBlock input{padded, oc_, geo.wp * oc_, g_.kw * oc_};
    DirectConvAll(&input, 1, g_.kh, geo, turned, g_.c, dx, [](int64_t, int64_t, const float*) {});
    return true;
  }

  // dW summed over the output pixels from the zero-bordered input in place (DirectFilterGrad),
  // one partial sum per part of the pixels, added in order; when that applies (one group,
  // undilated columns, whole vectors of output channels, a dW that stays in cache while a chunk
  // of pixels adds to it). Returns false when it does not.
  bool DirectBackpropFilter(const float* x, const float* dy, float* dw) const {
    if (groups_ != 1 || g_.dw != 1 || oc_ % 16 != 0 || kkc() * oc_ > kDirectMaxGradFloats ||
        pixels() == 0)
      return false;
    const DirectGeometry geo = DirectGeometry::Forward(g_);
    float* padded = Scratch(kScratchPadded, g_.n * geo.hp * geo.wp * g_.c);
    ZeroBordered(x, g_.n, g_.h, g_.w, g_.c, g_.pad_top, g_.pad_left, geo.hp, geo.wp, padded);
    std::vector<int64_t> offsets(kkc());            // contraction element (kh, kw, c) in a row
    for (int64_t r = 0; r < g_.kh; ++r)
      for (int64_t j = 0; j < g_.kw * g_.c; ++j)
        offsets[r * g_.kw * g_.c + j] = r * g_.dh * geo.wp * g_.c + j;
    const int64_t parts = std::min<int64_t>(PlanThreads(), pixels());
    std::vector<std::vector<float>> partial(parts);
    ParallelFor(parts, 2 * pixels() * kkc() * oc_ / parts, [&](int64_t q0, int64_t q1) {
      int64_t pix[kGradChunkPixels];
      for (int64_t q = q0; q < q1; ++q) {
        partial[q].assign(kkc() * oc_, 0.0f);
        const int64_t end = pixels() * (q + 1) / parts;
        for (int64_t p0 = pixels() * q / parts; p0 < end; p0 += kGradChunkPixels) {
          const int64_t p1 = std::min(end, p0 + kGradChunkPixels);
          geo.Starts(p0, p1, pix);
          DirectFilterGrad(padded, g_.c, pix, p1 - p0, offsets.data(), kkc(), dy + p0 * oc_, oc_,
                           oc_, partial[q].data());
        }
      }
    });
    std::copy(partial[0].begin(), partial[0].end(), dw);
    for (int64_t q = 1; q < parts; ++q)
      for (int64_t i = 0; i < kkc() * oc_; ++i) dw[i] += partial[q][i];
    return true;
  }

  // dW = sum over pixel blocks of im2col(x)^T x dy, per group; one partial sum per part (groups
  // one after another, each [kkc, og]), added in order.
  void BackpropFilter(const KernelArgs& args) const {
    NhwcIn x(g_, dtype_, args.in(0), g_.h, g_.w, g_.c);
    NhwcIn dy(g_, dtype_, args.in(1), g_.oh, g_.ow, oc_);
    FloatOut dw(dtype_, args.out(0), kkc() * oc_);
    if (DirectBackpropFilter(x.data(), dy.data(), dw.data())) {
      dw.Finish();
      return;
    }
    const int64_t rows = RowsPerBlock(), blocks = (pixels() + rows - 1) / rows;
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(PlanThreads(), blocks));
    if (groups_ == 1 && parts == 1) {
      // One part (few pixels: a CNN's last stages): straight into dW, each GEMM parallel
      // inside (in a parallel range it would run on one thread).
      float* cols = Scratch(kScratchCols, rows * kkc());
      std::fill(dw.data(), dw.data() + kkc() * oc_, 0.0f);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t p0 = b * rows, p1 = std::min(pixels(), p0 + rows);
        Im2Col(g_, x.data(), p0, p1, 0, g_.c, cols);
        Gemm(kkc(), oc_, p1 - p0, cols, true, dy.data() + p0 * oc_, false, dw.data(), true);
      }
      dw.Finish();
      return;
    }
    std::vector<std::vector<float>> partial(parts);
    ParallelFor(parts, 2 * pixels() * kkc() * oc_ / parts, [&](int64_t q0, int64_t q1) {
      float* cols = Scratch(kScratchCols, rows * kkc());
      float* dyg = Scratch(kScratchGroup, groups_ > 1 ? rows * og() : 0);
      for (int64_t q = q0; q < q1; ++q) {
        partial[q].assign(kkc() * oc_, 0.0f);
        for (int64_t b = blocks * q / parts; b < blocks * (q + 1) / parts; ++b) {
          const int64_t p0 = b * rows, p1 = std::min(pixels(), p0 + rows);
          for (int64_t gi = 0; gi < groups_; ++gi) {
            Im2Col(g_, x.data(), p0, p1, gi * cg(), cg(), cols);
            const float* d = dy.data() + p0 * oc_;
            if (groups_ > 1) {
              CopyColumns(d + gi * og(), oc_, p1 - p0, og(), dyg, og());
              d = dyg;
            }
            Gemm(kkc(), og(), p1 - p0, cols, true, d, false,
                 partial[q].data() + gi * kkc() * og(), true);
          }
        }
      }
    });
    // Group gi's [kkc, og] sum is columns [gi * og, (gi + 1) * og) of dW [kkc, OC].
    float* out = dw.data();
    std::fill(out, out + kkc() * oc_, 0.0f);
    for (const auto& p : partial)
      for (int64_t gi = 0; gi < groups_; ++gi)
        for (int64_t k = 0; k < kkc(); ++k) {
          const float* src = p.data() + (gi * kkc() + k) * og();
          float* dst = out + k * oc_ + gi * og();
          for (int64_t o = 0; o < og(); ++o) dst[o] += src[o];
        }
    dw.Finish();
  }

  ConvPass pass_;
  Window2D g_;
  int64_t oc_, groups_;
  int dtype_;
  Epilogue ep_;
};

// Validates a Conv2D-family node given its input, filter and output-gradient shapes.
// `fused`: NpuFusedConv2D, the forward pass with the epilogue attributes and inputs.
Status MakeConv(const KernelDef& def, ConvPass pass, std::unique_ptr<Kernel>* out, bool fused = false) {
  Epilogue ep;
  if (fused) NPU_RETURN_IF_ERROR(ParseEpilogue(def.attrs, &ep));
  NPU_RETURN_IF_ERROR(CheckArity(def, 2 + ep.extra_inputs(), 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  Dims input, filter, output;
  if (pass == ConvPass::kForward) {
    input = def.inputs[0].dims;
    filter = def.inputs[1].dims;
    output = def.outputs[0].dims;
  } else if (pass == ConvPass::kBackpropInput) {
    NPU_RETURN_IF_ERROR(def.attrs.IntList("input_sizes", &input));
    NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, input));
    filter = def.inputs[0].dims;
    output = def.inputs[1].dims;
  } else {
    NPU_RETURN_IF_ERROR(def.attrs.IntList("filter_sizes", &filter));
    NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, filter));
    input = def.inputs[0].dims;
    output = def.inputs[1].dims;
  }
  if (filter.size() != 4) return Error("filter must have rank 4 [KH,KW,C,OC], got ", ShapeString(filter));
  Window2D g;
  NPU_RETURN_IF_ERROR(MakeWindow2D(def.attrs, input, filter[0], filter[1], true, &g));
  // The filter's input depth divides the input's channels into groups (one: plain Conv2D).
  if (filter[2] <= 0 || g.c % filter[2] != 0 || g.c == 0)
    return Error("filter ", ShapeString(filter), " has ", filter[2], " input channels, which do "
                 "not divide the input's ", g.c, " channels into groups");
  const int64_t groups = g.c / filter[2];
  if (filter[3] % groups != 0)
    return Error("filter ", ShapeString(filter), ": ", filter[3], " output channels do not divide "
                 "into ", groups, " groups");
  NPU_RETURN_IF_ERROR(CheckShape(pass == ConvPass::kForward ? "output" : "out_backprop", output,
                                 g.OutputShape(filter[3])));
  if (fused) NPU_RETURN_IF_ERROR(CheckEpilogueInputs(def, ep, 2, filter[3]));
  if (groups > 1 && filter[2] == 1)   // one input channel per group: depthwise, multiplier OC/C
    *out = NewDepthwiseKernel(pass, g, filter[3] / groups, def.outputs[0].dtype, ep);
  else
    *out = std::make_unique<ConvKernel>(pass, g, filter[3], groups, def.outputs[0].dtype, ep);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("Conv2D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv(d, ConvPass::kForward, k);
});
NPU_REGISTER_KERNEL("NpuFusedConv2D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv(d, ConvPass::kForward, k, true);
});
NPU_REGISTER_KERNEL("Conv2DBackpropInput", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv(d, ConvPass::kBackpropInput, k);
});
NPU_REGISTER_KERNEL("Conv2DBackpropFilter", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv(d, ConvPass::kBackpropFilter, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
