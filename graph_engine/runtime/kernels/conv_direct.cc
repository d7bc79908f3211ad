#include "kernels/conv_direct.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/conv_direct_impl.h"
#include "kernels/gemm.h"
#include "kernels/scratch.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

// AVX2: 16 vector registers, 12 of them accumulators.
using DirectAvx2 = Direct<Vec8, 6, 3>;

// The instruction set the GEMM runs (one choice for the library: NPU_KERNEL_ISA, the CPU).
const conv_direct_detail::Fns& Chosen() {
  static const conv_direct_detail::Fns fns = [] {
    conv_direct_detail::Fns avx512;
    if (conv_direct_detail::FnsAvx512(&avx512) && std::strcmp(GemmIsa(), "avx512") == 0)
      return avx512;
    return conv_direct_detail::Fns{&DirectAvx2::Conv, &DirectAvx2::FilterGrad};
  }();
  return fns;
}

// Output pixels per work item: their rows of results stay in cache until finished.
constexpr int64_t kChunkPixels = 64;

}  // namespace

DirectGeometry DirectGeometry::Forward(const Window2D& g) {
  return {g.n, g.oh, g.ow, g.sh, g.sw,
          std::max(g.h + g.pad_top, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1),
          std::max(g.w + g.pad_left, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1)};
}

void DirectGeometry::Starts(int64_t p0, int64_t p1, int64_t* pix) const {
  int64_t image = p0 / (oh * ow), y = p0 / ow % oh, x = p0 % ow;   // stepped below
  for (int64_t p = p0; p < p1; ++p) {
    *pix++ = (image * hp + y * sh) * wp + x * sw;
    if (++x < ow) continue;
    x = 0;
    if (++y < oh) continue;
    y = 0;
    ++image;
  }
}

void DirectConv(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, const int64_t* pix,
                int64_t pixels, const float* w, int64_t ld, int64_t channels, float* acc) {
  Chosen().conv(blocks, n_blocks, kh, pix, pixels, w, ld, channels, acc);
}

void DirectConvAll(const DirectBlock* blocks, int64_t n_blocks, int64_t kh,
                   const DirectGeometry& geo, const float* w, int64_t np, float* out,
                   const std::function<void(int64_t, int64_t, const float*)>& finish) {
  int64_t k = 0;                                    // contraction length
  for (int64_t b = 0; b < n_blocks; ++b) k += kh * blocks[b].run;
  const int64_t pixels = geo.pixels(), chunks = (pixels + kChunkPixels - 1) / kChunkPixels;
  ParallelFor(chunks, kChunkPixels * 2 * k * np, [&](int64_t q0, int64_t q1) {
    int64_t pix[kChunkPixels];
    float* acc = out != nullptr ? nullptr : Scratch(kScratchAcc, kChunkPixels * np);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t p0 = q * kChunkPixels, p1 = std::min(pixels, p0 + kChunkPixels);
      float* rows = out != nullptr ? out + p0 * np : acc;
      geo.Starts(p0, p1, pix);
      DirectConv(blocks, n_blocks, kh, pix, p1 - p0, w, np, np, rows);
      finish(p0, p1, rows);
    }
  });
}

void DirectFilterGrad(const float* src, int64_t lanes, const int64_t* pix, int64_t pixels,
                      const int64_t* offsets, int64_t kk, const float* dy, int64_t ld,
                      int64_t channels, float* dw) {
  Chosen().filter_grad(src, lanes, pix, pixels, offsets, kk, dy, ld, channels, dw);
}

void ZeroBordered(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pad_top,
                  int64_t pad_left, int64_t hp, int64_t wp, float* out) {
  ParallelFor(n * hp, wp * c, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {           // padded row r = image * hp + its row
      float* row = out + r * wp * c;
      const int64_t ih = r % hp - pad_top;
      if (ih < 0 || ih >= h) { std::fill(row, row + wp * c, 0.0f); continue; }
      std::fill(row, row + pad_left * c, 0.0f);
      std::memcpy(row + pad_left * c, x + ((r / hp) * h + ih) * w * c, w * c * sizeof(float));
      std::fill(row + (pad_left + w) * c, row + wp * c, 0.0f);
    }
  });
}

}  // namespace kernels
}  // namespace npu
