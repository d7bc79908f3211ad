// Direct convolution: each output pixel's contraction row is read in place from the
// convolution's zero-bordered input copy (per input block, `kh` runs of contiguous floats), and
// a strip of output pixels (any pixels: their windows' starts are listed) accumulates a group of
// output channels in registers. Against im2col + GEMM there is no im2col copy and no GEMM packing
// of it or of the filter, and no group of output channels is left to a GEMM's narrow edge tiles
// (64 channels: a 48-wide and a 16-wide panel): 3x3 convolutions of 32-128 input channels ran
// 1.3-1.8x faster, an RGB input's 27-long contraction 1.9x.
#ifndef NPU_KERNELS_CONV_DIRECT_H_
#define NPU_KERNELS_CONV_DIRECT_H_

#include <cstdint>
#include <functional>

#include "kernels/window.h"

namespace npu {
namespace kernels {

// One input block of the zero-bordered copy: padded pixel i's `lanes` floats start at
// src + i * lanes; a window reads `kh` runs of `run` contiguous floats, `row_step` floats apart,
// from its first pixel on.
struct DirectBlock {
  const float* src;
  int64_t lanes, row_step, run;
};

// Where output pixels' windows start in the zero-bordered copy [n, hp, wp]: output pixel
// p = (n * oh + y) * ow + x starts at padded pixel (n * hp + y * sh) * wp + x * sw.
struct DirectGeometry {
  int64_t n, oh, ow, sh, sw, hp, wp;
  // A forward convolution's: its zero-bordered input spans the rows and columns any window
  // reaches, counted from the first padding row/column.
  static DirectGeometry Forward(const Window2D& g);
  int64_t pixels() const { return n * oh * ow; }
  void Starts(int64_t p0, int64_t p1, int64_t* pix) const;
};

// For output pixels q < pixels whose windows start at padded pixel pix[q]:
// acc[q * ld + c] = sum over k of x_q[k] * w[k * ld + c] for c < channels (a multiple of 16),
// x_q the pixel's contraction row (the blocks' runs in order) and w the dense filter rows.
void DirectConv(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, const int64_t* pix,
                int64_t pixels, const float* w, int64_t ld, int64_t channels, float* acc);

// The whole convolution on the thread pool, in chunks of output pixels: every output pixel of
// `geo` into out [pixels, np] (nullptr: into per-thread scratch), and finish(p0, p1, rows) once
// output pixels [p0, p1) have all np channels in `rows` ([p1 - p0, np]). Each strip of a few
// pixels reads the whole filter: with few pixels in all (a small image's last stages), reading
// it again per strip cost more than a GEMM's packing it once (see the callers' bounds).
void DirectConvAll(const DirectBlock* blocks, int64_t n_blocks, int64_t kh,
                   const DirectGeometry& geo, const float* w, int64_t np, float* out,
                   const std::function<void(int64_t, int64_t, const float*)>& finish);

// The filter gradient's share of output pixels q < pixels: dw[k * ld + c] += sum over q of
// x_q[k] * dy[q * ld + c] for c < channels (a multiple of 16), where element k of pixel q's
// contraction row is src[pix[q] * lanes + offsets[k]] (k < kk).
void DirectFilterGrad(const float* src, int64_t lanes, const int64_t* pix, int64_t pixels,
                      const int64_t* offsets, int64_t kk, const float* dy, int64_t ld,
                      int64_t channels, float* dw);

// The zero-bordered copy the convolutions read: images x [n, h, w, c] into out [n, hp, wp, c],
// image pixel (ih, iw) at (pad_top + ih, pad_left + iw), zero elsewhere (hp >= pad_top + h,
// wp >= pad_left + w). Runs on the thread pool.
void ZeroBordered(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pad_top,
                  int64_t pad_left, int64_t hp, int64_t wp, float* out);

namespace conv_direct_detail {
struct Fns {
  decltype(&DirectConv) conv;
  decltype(&DirectFilterGrad) filter_grad;
};
// Defined in conv_direct_avx512.cc: fills `fns` and returns true when that unit was built for
// AVX-512 (the caller still checks the CPU).
bool FnsAvx512(Fns* fns);
}  // namespace conv_direct_detail

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_CONV_DIRECT_H_
