// Direct convolution rows: each output pixel's contraction row is read in place from the
// convolution's zero-bordered input copy (per input block, `kh` runs of contiguous floats), and
// a strip of pixels accumulates a group of output channels in registers. Against im2col + GEMM
// there is no im2col copy and no GEMM packing of it, and no group of output channels is left to
// a GEMM's narrow edge tiles (64 channels: a 48-wide and a 16-wide panel): 3x3 convolutions of
// 32-128 input channels over rows of 8-56 pixels ran 1.3-1.8x faster, an RGB input's 27-long
// contraction 1.9x. Rows of 4 pixels ran 2x slower (a strip that short keeps too few
// accumulators busy): the convolutions call these from 8-pixel rows on.
#ifndef NPU_KERNELS_CONV_DIRECT_H_
#define NPU_KERNELS_CONV_DIRECT_H_

#include <cstdint>

namespace npu {
namespace kernels {

// One input block of the contraction rows of an output row's pixels: pixel p's part is `kh`
// runs of `run` contiguous floats, at src + p * pixel_step + r * row_step for r < kh.
struct DirectBlock {
  const float* src;
  int64_t pixel_step, row_step, run;
};

// acc[p * np + c] = sum over the contraction row k of pixel p (the blocks' runs in order) of
// row_p[k] * w[k * np + c], for the `pixels` pixels of one output row and the np channels (a
// multiple of 16) of the dense filter w.
void DirectConvRow(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, int64_t pixels,
                   const float* w, int64_t np, float* acc);

// The filter gradient's share of one output row: dw[k * np + c] += sum over its `pixels`
// pixels p of x_p[k] * dy[p * np + c], where element k of pixel p's contraction row is
// src[p * pixel_step + offsets[k]] (k < kk) and np is a multiple of 16.
void DirectFilterGradRow(const float* src, int64_t pixel_step, const int64_t* offsets, int64_t kk,
                         int64_t pixels, const float* dy, int64_t np, float* dw);

// The zero-bordered copy the rows read: images x [n, h, w, c] into out [n, hp, wp, c], image
// pixel (ih, iw) at (pad_top + ih, pad_left + iw), zero elsewhere (hp >= pad_top + h, wp >=
// pad_left + w). Runs on the thread pool.
void ZeroBordered(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pad_top,
                  int64_t pad_left, int64_t hp, int64_t wp, float* out);

namespace conv_direct_detail {
struct Fns {
  decltype(&DirectConvRow) row;
  decltype(&DirectFilterGradRow) filter_grad;
};
// Defined in conv_direct_avx512.cc: fills `fns` and returns true when that unit was built for
// AVX-512 (the caller still checks the CPU).
bool FnsAvx512(Fns* fns);
}  // namespace conv_direct_detail

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_CONV_DIRECT_H_
