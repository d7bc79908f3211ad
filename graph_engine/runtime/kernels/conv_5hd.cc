// Conv2D / NpuFusedConv2D on NC1HWC0 activations with FRACTAL_Z filters (docs/layouts.md).
//
// The contraction axis is ordered (c1, kh, kw, c0), FRACTAL_Z's block order: each im2col row
// gathers C0-lane runs straight from the 5HD input. Padding lanes of the input (unspecified)
// are zeroed in the im2col rows; FRACTAL_Z padding is zero (only TransData writes FRACTAL_Z,
// docs/layouts.md), so padding never reaches a real output. The epilogue (bias, residual,
// activation) runs on each C0-lane run as it is stored into the 5HD output.
#include <cstring>
#include <memory>

#include "kernels/epilogue.h"
#include "kernels/float_io.h"
#include "kernels/format.h"
#include "kernels/gemm.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kColsBlockFloats = 1 << 17;   // im2col floats per block: fits in cache
constexpr int64_t kPerBlockPixels = 64;         // below: per-block GEMMs, no filter transpose

class Conv5hdKernel : public Kernel {
 public:
  Conv5hdKernel(Window2D g, Nc1hwc0 x, Nc1hwc0 y, int dtype, Epilogue ep)
      : g_(g), x_(x), y_(y), dtype_(dtype), ep_(ep) {}

  Status Compute(const KernelArgs& args) const override {
    const int64_t c0 = x_.c0, k = K(), np = y_.c1 * y_.c0, blocks_k = k / c0;
    FloatIn x(dtype_, args.in(0), x_.size());
    FloatIn fz(dtype_, args.in(1), k * np);
    const int64_t pixels = g_.n * g_.oh * g_.ow;
    // Few output pixels: one small GEMM per FRACTAL_Z block, reading the [np, c0] block as
    // a transposed operand. Otherwise the filter is transposed once into a dense [k, np]
    // matrix for one large GEMM per row block (the transpose costs k * np moves, nothing
    // next to pixels * k * np multiply-adds).
    const bool per_block = pixels < kPerBlockPixels;
    std::unique_ptr<float[]> w;                  // scratch: every element is written before use
    if (!per_block) {
      w.reset(new float[k * np]);
      ParallelFor(blocks_k, np * c0, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)      // contiguous writes; the block stays in cache
          for (int64_t l = 0; l < c0; ++l) {
            const float* src = fz.data() + b * np * c0 + l;
            float* dst = w.get() + (b * c0 + l) * np;
            for (int64_t n = 0; n < np; ++n) dst[n] = src[n * c0];
          }
      });
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

    // Row blocks: im2col rows and GEMM results both stay within a cache-sized budget.
    if (pixels == 0) { y.Finish(); return Status::Ok(); }
    const int64_t rows = std::min(pixels, std::max<int64_t>(16, kColsBlockFloats / std::max<int64_t>(1, std::max(k, np))));
    const int64_t blocks = CeilDiv(pixels, rows);
    auto run_blocks = [&](int64_t q0, int64_t q1) {
      std::unique_ptr<float[]> cols(new float[rows * k]), acc(new float[rows * np]);
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t p0 = q * rows, p1 = std::min(pixels, p0 + rows), m = p1 - p0;
        if (per_block) {
          // cols holds the row block block-major: [blocks_k][m][c0].
          for (int64_t p = p0; p < p1; ++p) Im2ColRow(x.data(), p, cols.get() + (p - p0) * c0, m * c0);
          for (int64_t b = 0; b < blocks_k; ++b)
            Gemm(m, np, c0, cols.get() + b * m * c0, false, fz.data() + b * np * c0, true, acc.get(), b > 0);
        } else {
          for (int64_t p = p0; p < p1; ++p) Im2ColRow(x.data(), p, cols.get() + (p - p0) * k, c0);
          Gemm(m, np, k, cols.get(), false, w.get(), false, acc.get());
        }
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n = p / (g_.oh * g_.ow), pix = p % (g_.oh * g_.ow);
          for (int64_t b = 0; b < y_.c1; ++b) {
            const int64_t at = (n * y_.c1 + b) * y_.plane() + pix * c0;
            float* out = y.data() + at;
            std::memcpy(out, acc.get() + (p - p0) * np + b * c0, c0 * sizeof(float));
            ep_.ApplyRun(out, bias.data() + b * c0, residual ? residual->data() + at : nullptr, c0);
          }
        }
      }
    };
    // Too few row blocks to go round: run them in turn and let each GEMM use the threads
    // (a GEMM inside a parallel range runs on one thread).
    if (blocks >= NumThreads()) ParallelFor(blocks, 2 * rows * k * np, run_blocks);
    else run_blocks(0, blocks);
    y.Finish();
    return Status::Ok();
  }

 private:
  int64_t K() const { return x_.c1 * g_.kh * g_.kw * x_.c0; }

  // Row of output pixel p: for (c1, kh, kw) the C0 lanes of the input pixel under the tap,
  // zero outside the image and in padding lanes; consecutive taps are `step` floats apart.
  void Im2ColRow(const float* x, int64_t p, float* row, int64_t step) const {
    const int64_t c0 = x_.c0, n = p / (g_.oh * g_.ow), oh = p / g_.ow % g_.oh, ow = p % g_.ow;
    for (int64_t b = 0; b < x_.c1; ++b) {
      const int64_t real = x_.valid(b);
      const float* plane = x + (n * x_.c1 + b) * x_.plane();
      for (int64_t kh = 0; kh < g_.kh; ++kh) {
        const int64_t ih = oh * g_.sh - g_.pad_top + kh * g_.dh;
        for (int64_t kw = 0; kw < g_.kw; ++kw, row += step) {
          const int64_t iw = ow * g_.sw - g_.pad_left + kw * g_.dw;
          if (ih < 0 || ih >= g_.h || iw < 0 || iw >= g_.w) { std::fill(row, row + c0, 0.0f); continue; }
          std::memcpy(row, plane + (ih * g_.w + iw) * c0, real * sizeof(float));
          std::fill(row + real, row + c0, 0.0f);
        }
      }
    }
  }

  Window2D g_;
  Nc1hwc0 x_, y_;
  int dtype_;
  Epilogue ep_;
};

Status MakeConv5hd(const KernelDef& def, std::unique_ptr<Kernel>* out, bool fused) {
  Epilogue ep;
  if (fused) NPU_RETURN_IF_ERROR(ParseEpilogue(def.attrs, &ep));
  NPU_RETURN_IF_ERROR(CheckArity(def, 2 + ep.extra_inputs(), 1));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const TensorDesc &in = def.inputs[0], &filter = def.inputs[1], &o = def.outputs[0];
  if (in.format != kNC1HWC0 || filter.format != kFractalZ || o.format != kNC1HWC0)
    return Error("with padded formats needs an NC1HWC0 input, a FRACTAL_Z filter and an NC1HWC0 output; got ",
                 FormatName(in.format), ", ", FormatName(filter.format), ", ", FormatName(o.format));
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
  *out = std::make_unique<Conv5hdKernel>(g, x, y, o.dtype, ep);
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
