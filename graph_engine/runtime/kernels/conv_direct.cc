#include "kernels/conv_direct.h"

#include <algorithm>
#include <cstring>

#include "kernels/conv_direct_impl.h"
#include "kernels/gemm.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

// AVX2: 16 vector registers, 12 of them accumulators.
using DirectAvx2 = DirectRow<Vec8, 6, 3>;

// The instruction set the GEMM runs (one choice for the library: NPU_KERNEL_ISA, the CPU).
const conv_direct_detail::Fns& Chosen() {
  static const conv_direct_detail::Fns fns = [] {
    conv_direct_detail::Fns avx512;
    if (conv_direct_detail::FnsAvx512(&avx512) && std::strcmp(GemmIsa(), "avx512") == 0)
      return avx512;
    return conv_direct_detail::Fns{&DirectAvx2::Row, &DirectAvx2::FilterGrad};
  }();
  return fns;
}

}  // namespace

void DirectConvRow(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, int64_t pixels,
                   const float* w, int64_t np, float* acc) {
  Chosen().row(blocks, n_blocks, kh, pixels, w, np, acc);
}

void DirectFilterGradRow(const float* src, int64_t pixel_step, const int64_t* offsets, int64_t kk,
                         int64_t pixels, const float* dy, int64_t np, float* dw) {
  Chosen().filter_grad(src, pixel_step, offsets, kk, pixels, dy, np, dw);
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
