// Conv2D / NpuFusedConv2D on NC1HWC0 activations with FILTER_KN (float32) or FRACTAL_Z filters
// (docs/layouts.md).
//
// The contraction axis is ordered (c1, kh, kw, c0), FRACTAL_Z's block order, so im2col rows
// gather C0-lane runs straight from the 5HD input. Two forms of it:
//  * compact (the usual case): only real input channels enter the contraction, so a 3-channel
//    input contracts over 3 lanes per tap, not 16. The input is first copied, per C1 block, into
//    a zero-bordered image of its real lanes, so that an im2col window row is one contiguous run
//    of it (an RGB row: 9 floats) with no bounds to check; the filter is the dense
//    [K, Cout padded] matrix FILTER_KN stores (the GEMM's plain right operand: as the
//    transposed one, the GEMM repacked it with a transpose per call, a third of ResNet50's
//    inference time), read in place. A FRACTAL_Z filter (float16/bfloat16) is gathered into
//    that matrix in float32 and kept while the filter's version (KernelArgs::versions) holds:
//    once per variable update, not per call. No padding lane of the input is ever read;
//  * per block (FRACTAL_Z, a few output pixels, where that gather would cost as much as the
//    GEMM): one small GEMM per FRACTAL_Z block reading it in place as a transposed [N, C0]
//    operand, with the input's padding lanes zeroed in the im2col rows (they are unspecified;
//    FRACTAL_Z padding is zero, so nothing from them reaches a real output).
//  * direct (the compact form's usual case; see kDirectMaxK): the contraction rows are read in
//    place from the zero-bordered copy, strips of output pixels accumulated in registers
//    (kernels/conv_direct.h), no im2col and no GEMM.
// The GEMM result of a row block is stored with the epilogue (bias, residual, activation)
// straight into the 5HD output, one image's run of pixels per C1 block.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/conv_direct.h"
#include "kernels/epilogue.h"
#include "kernels/float_io.h"
#include "kernels/format.h"
#include "kernels/gemm.h"
#include "kernels/scratch.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kC0 = kFloatC0;
constexpr int64_t kColsBlockFloats = 1 << 18;   // im2col + result floats per block: fit in L2
// Below this many output pixels: a GEMM per FRACTAL_Z block, no filter gather. From 16 pixels
// on, gathering the filter once and running one GEMM was 1.2x (16 pixels) to 5x (64) faster
// (ResNet50's last two stages at 64x64, batch 4).
constexpr int64_t kPerBlockPixels = 8;
// The direct form for undilated columns from this many output pixels on, up to this
// contraction length (kernels/conv.cc has the same bounds): ResNet50's 4x4 and 2x2 stages at
// batch 4 (64 and 16 pixels) ran 1.3-1.5x slower direct, its 8x8 stage (256) 1.2x faster.
constexpr int64_t kDirectMinPixels = 128, kDirectMaxK = 4608;

class Conv5hdKernel : public Kernel {
 public:
  Conv5hdKernel(Window2D g, Nc1hwc0 x, Nc1hwc0 y, int dtype, bool filter_kn, Epilogue ep)
      : g_(g), x_(x), y_(y), dtype_(dtype), filter_kn_(filter_kn), ep_(ep), act_(ep),
        geo_(DirectGeometry::Forward(g)) {
    act_.has_bias = act_.has_residual = false;
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t taps = g_.kh * g_.kw, np = y_.c1 * kC0, blocks_k = x_.c1 * taps;
    const int64_t pixels = g_.n * g_.oh * g_.ow;
    const bool per_block = !filter_kn_ && pixels < kPerBlockPixels;
    const int64_t k = per_block ? blocks_k * kC0 : x_.c * taps;   // contraction length
    FloatIn x(dtype_, args.in(0), x_.size());
    // The compact filter [k, np]: FILTER_KN's storage, or gathered from FRACTAL_Z and kept
    // while the filter's version holds (weights: from one variable update to the next). Per
    // block: the FRACTAL_Z filter as is.
    std::unique_ptr<FloatIn> fz;
    std::shared_ptr<const float[]> kept;
    const float* w = nullptr;
    if (filter_kn_) {
      w = args.in<float>(1);
    } else if (per_block) {
      fz = std::make_unique<FloatIn>(dtype_, args.in(1), blocks_k * np * kC0);
    } else {
      kept = CompactFilter(args.in(1), args.version(1), blocks_k, np, k, taps);
      w = kept.get();
    }
    std::vector<float> bias(np, 0.0f);
    int next = 2;
    if (ep_.has_bias) {
      FloatIn b(dtype_, args.in(next++), y_.c);
      std::copy(b.data(), b.data() + y_.c, bias.begin());
    }
    std::unique_ptr<FloatIn> residual;
    if (ep_.has_residual) residual = std::make_unique<FloatIn>(dtype_, args.in(next), y_.size());
    FloatOut y(dtype_, args.out(0), y_.size());
    if (pixels == 0) { y.Finish(); return Status::Ok(); }

    const float* padded = per_block ? nullptr : PaddedInput(x.data());
    if (!per_block && g_.dw == 1 && pixels >= kDirectMinPixels && k <= kDirectMaxK) {
      std::vector<DirectBlock> blocks(x_.c1);      // PaddedInput's copy of each block
      for (int64_t b = 0; b < x_.c1; ++b) {
        const int64_t real = x_.valid(b);
        blocks[b] = {padded + PaddedAt(b, 0), real, g_.dh * geo_.wp * real, g_.kw * real};
      }
      const float* res = residual ? residual->data() : nullptr;
      DirectConvAll(blocks.data(), x_.c1, g_.kh, geo_, w, np, nullptr,
                    [&](int64_t p0, int64_t p1, const float* rows) {
                      Store(rows, p0, p1, bias.data(), res, y.data());
                    });
      y.Finish();
      return Status::Ok();
    }
    // Row blocks: im2col rows and GEMM results both stay within a cache-sized budget, in
    // whole rounds over the threads (each block's GEMM packs the filter once).
    const int64_t max_rows = std::max<int64_t>(16, kColsBlockFloats / (k + np));
    int64_t blocks = CeilDiv(pixels, max_rows);
    if (blocks >= PlanThreads()) blocks = CeilDiv(blocks, PlanThreads()) * PlanThreads();
    const int64_t rows = CeilDiv(pixels, blocks);
    blocks = CeilDiv(pixels, rows);
    auto run_blocks = [&](int64_t q0, int64_t q1) {
      float* cols = Scratch(kScratchCols, rows * k);
      float* acc = Scratch(kScratchAcc, rows * np);
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t p0 = q * rows, p1 = std::min(pixels, p0 + rows), m = p1 - p0;
        // Per block, cols holds the row block block-major: [blocks_k][m][C0]; else [m][k].
        Pixel o = PixelOf(p0);
        for (int64_t p = p0; p < p1; ++p, Next(&o)) {
          if (per_block) Im2ColRow(x.data(), o, cols + (p - p0) * kC0, m * kC0);
          else CompactRow(padded, o, cols + (p - p0) * k);
        }
        if (per_block) {
          for (int64_t b = 0; b < blocks_k; ++b)
            Gemm(m, np, kC0, cols + b * m * kC0, false, fz->data() + b * np * kC0, true, acc,
                 b > 0);
        } else {
          Gemm(m, np, k, cols, false, w, false, acc);
        }
        Store(acc, p0, p1, bias.data(), residual ? residual->data() : nullptr, y.data());
      }
    };
    // Too few row blocks to go round: run them in turn and let each GEMM use the threads
    // (a GEMM inside a parallel range runs on one thread).
    if (blocks >= PlanThreads()) ParallelFor(blocks, 2 * rows * k * np, run_blocks);
    else run_blocks(0, blocks);
    y.Finish();
    return Status::Ok();
  }

 private:
  struct Pixel { int64_t n, oh, ow; };          // an output pixel, stepped without divisions
  Pixel PixelOf(int64_t p) const { return {p / (g_.oh * g_.ow), p / g_.ow % g_.oh, p % g_.ow}; }
  void Next(Pixel* o) const {
    if (++o->ow < g_.ow) return;
    o->ow = 0;
    if (++o->oh < g_.oh) return;
    o->oh = 0;
    ++o->n;
  }

  // Where image n of block b starts in PaddedInput's copy (floats).
  int64_t PaddedAt(int64_t b, int64_t n) const {
    return geo_.hp * geo_.wp * (g_.n * b * kC0 + n * x_.valid(b));
  }

  // The input's real lanes per C1 block as zero-bordered images, blocks one after another,
  // each [n, hp, wp, valid(block)] (a scratch buffer of the calling thread, read by every
  // thread of the call).
  const float* PaddedInput(const float* x) const {
    float* out = Scratch(kScratchPadded, g_.n * geo_.hp * geo_.wp * x_.c);
    ParallelFor(x_.c1 * g_.n, geo_.hp * geo_.wp * kC0, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t b = q / g_.n, n = q % g_.n, real = x_.valid(b);
        const float* plane = x + (n * x_.c1 + b) * x_.plane();
        float* img = out + PaddedAt(b, n);
        for (int64_t ih = 0; ih < geo_.hp; ++ih) {
          float* row = img + ih * geo_.wp * real;
          const int64_t sh = ih - g_.pad_top;
          if (sh < 0 || sh >= g_.h) { std::fill(row, row + geo_.wp * real, 0.0f); continue; }
          std::fill(row, row + g_.pad_left * real, 0.0f);
          float* dst = row + g_.pad_left * real;
          const float* src = plane + sh * g_.w * kC0;
          if (real == kC0) std::memcpy(dst, src, g_.w * kC0 * sizeof(float));
          else
            for (int64_t iw = 0; iw < g_.w; ++iw) CopyFloats(dst + iw * real, src + iw * kC0, real);
          std::fill(row + (g_.pad_left + g_.w) * real, row + geo_.wp * real, 0.0f);
        }
      }
    });
    return out;
  }

  // Compact im2col row of output pixel o from the padded copy: per (c1, kh) the window row's
  // real lanes, one run when the columns are adjacent.
  void CompactRow(const float* padded, const Pixel& o, float* row) const {
    for (int64_t b = 0; b < x_.c1; ++b) {
      const int64_t real = x_.valid(b);
      const float* img = padded + PaddedAt(b, o.n);
      for (int64_t kh = 0; kh < g_.kh; ++kh, row += g_.kw * real) {
        const float* src = img + ((o.oh * g_.sh + kh * g_.dh) * geo_.wp + o.ow * g_.sw) * real;
        if (g_.dw == 1) { CopyFloats(row, src, g_.kw * real); continue; }
        for (int64_t kw = 0; kw < g_.kw; ++kw) CopyFloats(row + kw * real, src + kw * g_.dw * real, real);
      }
    }
  }

  // Per-block im2col row of output pixel o: for each (c1, kh, kw) tap the input pixel's C0
  // lanes (padding lanes zeroed), zero outside the image, consecutive taps `step` floats apart.
  void Im2ColRow(const float* x, const Pixel& o, float* row, int64_t step) const {
    for (int64_t b = 0; b < x_.c1; ++b) {
      const int64_t real = x_.valid(b);
      const float* plane = x + (o.n * x_.c1 + b) * x_.plane();
      for (int64_t kh = 0; kh < g_.kh; ++kh) {
        const int64_t ih = o.oh * g_.sh - g_.pad_top + kh * g_.dh;
        for (int64_t kw = 0; kw < g_.kw; ++kw, row += step) {
          const int64_t iw = o.ow * g_.sw - g_.pad_left + kw * g_.dw;
          if (ih < 0 || ih >= g_.h || iw < 0 || iw >= g_.w) { std::fill(row, row + kC0, 0.0f); continue; }
          std::memcpy(row, plane + (ih * g_.w + iw) * kC0, kC0 * sizeof(float));
          std::fill(row + real, row + kC0, 0.0f);
        }
      }
    }
  }

  // Stores GEMM rows [p0, p1) (acc: [p1 - p0, np]) into the 5HD output with the epilogue:
  // per image and C1 block the pixels' C0 runs are contiguous in the output.
  void Store(const float* acc, int64_t p0, int64_t p1, const float* bias, const float* residual,
             float* y) const {
    const int64_t np = y_.c1 * kC0, ohw = g_.oh * g_.ow;
    const bool relu = ep_.act == Epilogue::Act::kRelu;
    for (int64_t p = p0; p < p1;) {
      const int64_t n = p / ohw, pix = p % ohw, run = std::min(p1 - p, ohw - pix);
      for (int64_t b = 0; b < y_.c1; ++b) {
        const int64_t at = (n * y_.c1 + b) * y_.plane() + pix * kC0;
        const float* src = acc + (p - p0) * np + b * kC0;
        const float* res = residual ? residual + at : nullptr;
        float* out = y + at;
        const Lanes bv[2] = {LoadLanes(bias + b * kC0), LoadLanes(bias + b * kC0 + kLanes)};
        for (int64_t r = 0; r < run; ++r, src += np, out += kC0)
          for (int64_t h = 0; h < 2; ++h) {
            Lanes v = LoadLanes(src + h * kLanes) + bv[h];
            if (res) v += LoadLanes(res + r * kC0 + h * kLanes);
            if (relu) v = ((v > 0.0f) | (v != v)) ? v : Lanes{};   // NaN kept, as TF
            StoreLanes(out + h * kLanes, v);
          }
        // Other activations run over the whole contiguous run (vectorized math).
        if (ep_.act != Epilogue::Act::kNone && ep_.act != Epilogue::Act::kRelu)
          act_.ApplyRun(y + at, nullptr, nullptr, run * kC0);
      }
      p += run;
    }
  }

  // The compact filter (FILTER_KN's layout, float32) of FRACTAL_Z `filter` (version 0: unknown,
  // gathered anew).
  std::shared_ptr<const float[]> CompactFilter(const void* filter, uint64_t version,
                                               int64_t blocks_k, int64_t np, int64_t k,
                                               int64_t taps) const {
    if (version != 0) {
      std::lock_guard<std::mutex> lock(filter_mu_);
      if (filter_version_ == version) return filter_;   // version != 0: filter_ is set
    }
    const FloatIn stored(dtype_, filter, blocks_k * np * kC0);
    const float* fz = stored.data();
    // Not zero-filled: all of it is written (a first call touches these pages once, not twice).
    std::shared_ptr<float[]> w(new float[np * k]);
    ParallelFor(blocks_k, np * kC0, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {      // FRACTAL_Z block (c1, kh, kw): [np, C0]
        const int64_t c1 = b / taps, tap = b % taps, real = x_.valid(c1);
        const float* src = fz + b * np * kC0;
        // Into FILTER_KN's rows (kernels/format.h): the block's real lanes are consecutive rows.
        float* dst = w.get() + FilterKnRow(tap, c1 * kC0, taps, x_.c, kC0) * np;
        for (int64_t lane = 0; lane < real; ++lane, dst += np)
          for (int64_t n = 0; n < np; ++n) dst[n] = src[n * kC0 + lane];
      }
    });
    if (version != 0) {
      std::lock_guard<std::mutex> lock(filter_mu_);
      filter_version_ = version;
      filter_ = w;
    }
    return w;
  }

  Window2D g_;
  Nc1hwc0 x_, y_;
  int dtype_;
  bool filter_kn_;                              // else FRACTAL_Z
  Epilogue ep_, act_;                           // act_: ep_'s activation alone
  DirectGeometry geo_;                          // of the zero-bordered input copy (hp, wp)
  mutable std::mutex filter_mu_;                // guards the two below (runs may overlap)
  mutable uint64_t filter_version_ = 0;
  mutable std::shared_ptr<const float[]> filter_;
};

Status MakeConv5hd(const KernelDef& def, std::unique_ptr<Kernel>* out, bool fused) {
  Epilogue ep;
  if (fused) NPU_RETURN_IF_ERROR(ParseEpilogue(def.attrs, &ep));
  NPU_RETURN_IF_ERROR(CheckArity(def, 2 + ep.extra_inputs(), 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const TensorDesc &in = def.inputs[0], &filter = def.inputs[1], &o = def.outputs[0];
  if (in.format != kNC1HWC0 || (filter.format != kFractalZ && filter.format != kFilterKN) ||
      o.format != kNC1HWC0)
    return Error("with padded formats needs an NC1HWC0 input, a FRACTAL_Z or FILTER_KN filter and an NC1HWC0 ",
                 "output; got ", FormatName(in.format), ", ", FormatName(filter.format), ", ", FormatName(o.format));
  if (filter.format == kFilterKN && filter.dtype != kFloat)
    return Error("reads FILTER_KN filters in float32 only (in place); a ", DTypeName(filter.dtype),
                 " filter is stored FRACTAL_Z");
  std::string data_format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &data_format));
  if (data_format != "NHWC" || in.dims.size() != 4 || filter.dims.size() != 4)
    return Error("NC1HWC0 values are logically NHWC 4-D; got data_format ", data_format, ", input ",
                 ShapeString(in.dims), ", filter ", ShapeString(filter.dims));
  Window2D g;
  NPU_RETURN_IF_ERROR(MakeWindow2D(def.attrs, in.dims, filter.dims[0], filter.dims[1], true, &g));
  if (filter.dims[2] != g.c)
    return Error("filter ", ShapeString(filter.dims), " has ", filter.dims[2], " input channels; the input has ", g.c);
  NPU_RETURN_IF_ERROR(CheckShape("output", o.dims, g.OutputShape(filter.dims[3])));
  if (fused) {
    NPU_RETURN_IF_ERROR(CheckEpilogueInputs(def, ep, 2, filter.dims[3]));
    if (ep.has_bias && def.inputs[2].format != kND) return Error("bias must be stored ND");
    if (ep.has_residual && def.inputs.back().format != kNC1HWC0) return Error("residual must be stored NC1HWC0");
  }
  Nc1hwc0 x, y;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(in, &x));
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(o, &y));
  if (x.c0 != kC0 || y.c0 != kC0) return Error("float NC1HWC0 values have C0 = ", kC0, ", got ", x.c0);
  *out = std::make_unique<Conv5hdKernel>(g, x, y, o.dtype, filter.format == kFilterKN, ep);
  return Status::Ok();
}

NPU_REGISTER_FORMAT_KERNEL("Conv2D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv5hd(d, k, false);
});
NPU_REGISTER_FORMAT_KERNEL("NpuFusedConv2D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv5hd(d, k, true);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
