// The direct convolution of conv_direct.h on vectors of 8 or 16 floats, included by one unit
// per instruction set (conv_direct.cc: the AVX2 baseline; conv_direct_avx512.cc: AVX-512).
#ifndef NPU_KERNELS_CONV_DIRECT_IMPL_H_
#define NPU_KERNELS_CONV_DIRECT_IMPL_H_

#include <cstdint>
#include <cstring>

#include "kernels/conv_direct.h"
#include "kernels/scratch.h"
#include "kernels/vec.h"

namespace npu {
namespace kernels {
namespace {

// Vec: Vec8 or Vec16. MR16 / MR32: pixels per strip (filter rows per chunk of the gradient) for
// channel groups of 16 / 32, sized so that the accumulators (MR * group / W vectors) leave
// registers for the filter row (dy) and the broadcast pixel value. The loops over a strip are
// unrolled so that the accumulators stay in registers.
template <class Vec, int MR16, int MR32>
struct Direct {
  static constexpr int W = sizeof(Vec) / sizeof(float);
  static constexpr int kLine = (16 + W - 1) / W;      // vectors per 64-byte cache line
  static constexpr int64_t kPrefetchRows = 16;
  static constexpr int64_t kPanelMinRows = 128;   // fewer rows: L2 serves them as fast (below)

  // A register tile: R rows of NV vectors, rows ld floats apart in memory.
  template <int R, int NV>
  static void LoadTile(Vec (&a)[R][NV], const float* p, int64_t ld) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&a[r][v], p + r * ld + v * W, sizeof(Vec));
  }
  template <int R, int NV>
  static void StoreTile(const Vec (&a)[R][NV], float* p, int64_t ld) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(p + r * ld + v * W, &a[r][v], sizeof(Vec));
  }

  // Output pixels pix[0, MR), the NV * W channels of w (rows w_ld floats apart) and of acc (rows
  // ld apart) from their pointers on.
  template <int NV, int MR>
  static void Strip(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, const int64_t* pix,
                    const float* w, int64_t w_ld, float* acc, int64_t ld) {
    Vec a[MR][NV];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) a[m][v] = Vec{};
    const float* wr = w;                            // the filter rows follow the runs in order
    for (const DirectBlock* b = blocks; b < blocks + n_blocks; ++b) {
      for (int64_t r = 0; r < kh; ++r) {
        const float* s[MR];
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) s[m] = b->src + pix[m] * b->lanes + r * b->row_step;
        for (int64_t j = 0; j < b->run; ++j, wr += w_ld) {
          // Rows of w far apart (an unpacked filter's) are too far for the hardware
          // prefetchers: fetch each 64-byte line of a row kPrefetchRows ahead.
#pragma GCC unroll 4
          for (int v = 0; v < NV; v += kLine) __builtin_prefetch(wr + kPrefetchRows * w_ld + v * W);
          Vec wv[NV];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) std::memcpy(&wv[v], wr + v * W, sizeof(Vec));
#pragma GCC unroll 16
          for (int m = 0; m < MR; ++m) {
            const Vec x = Broadcast<Vec>(s[m][j]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) a[m][v] += x * wv[v];
          }
        }
      }
    }
    StoreTile(a, acc, ld);
  }

  // Pixels [q, pixels) in strips of MR, then of MR / 2, ... down to single pixels.
  template <int NV, int MR>
  static void Pixels(int64_t q, int64_t pixels, const DirectBlock* blocks, int64_t n_blocks,
                     int64_t kh, const int64_t* pix, const float* w, int64_t w_ld, float* acc,
                     int64_t ld) {
    for (; q + MR <= pixels; q += MR)
      Strip<NV, MR>(blocks, n_blocks, kh, pix + q, w, w_ld, acc + q * ld, ld);
    if constexpr (MR > 1)
      Pixels<NV, MR / 2>(q, pixels, blocks, n_blocks, kh, pix, w, w_ld, acc, ld);
  }

  // Every strip of a channel group reads the group's rows of w, ld floats apart: at a stride of
  // 1-2 KiB (256-512 channels) those rows fall into a few of L1's sets and evict each other, so
  // each strip read them from L2 again. With more than one strip, the group's rows are copied
  // into one dense panel first (a copy per strip's worth of products).
  template <int NV, int MR>
  static void Group(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, const int64_t* pix,
                    int64_t pixels, int64_t rows, const float* w, int64_t ld, float* acc) {
    constexpr int64_t kGroup = NV * W;
    if (pixels <= MR || ld == kGroup || rows < kPanelMinRows) {
      Pixels<NV, MR>(0, pixels, blocks, n_blocks, kh, pix, w, ld, acc, ld);
      return;
    }
    float* panel = Scratch(kScratchPanel, rows * kGroup);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(panel + r * kGroup, w + r * ld, kGroup * sizeof(float));
    Pixels<NV, MR>(0, pixels, blocks, n_blocks, kh, pix, panel, kGroup, acc, ld);
  }

  static void Conv(const DirectBlock* blocks, int64_t n_blocks, int64_t kh, const int64_t* pix,
                   int64_t pixels, const float* w, int64_t ld, int64_t channels, float* acc) {
    int64_t rows = 0;                                 // of w: the contraction's length
    for (int64_t b = 0; b < n_blocks; ++b) rows += kh * blocks[b].run;
    if (channels % 32 == 0) {
      for (int64_t c = 0; c < channels; c += 32)
        Group<32 / W, MR32>(blocks, n_blocks, kh, pix, pixels, rows, w + c, ld, acc + c);
    } else {
      for (int64_t c = 0; c < channels; c += 16)
        Group<16 / W, MR16>(blocks, n_blocks, kh, pix, pixels, rows, w + c, ld, acc + c);
    }
  }

  // dw rows [0, KC) (their elements at off[0, KC) of each pixel's row) of the NV * W channels
  // from dw's and dy's pointers on, summed over the pixels; KC plays MR's part.
  template <int NV, int KC>
  static void GradChunk(const float* src, int64_t lanes, const int64_t* pix, int64_t pixels,
                        const int64_t* off, const float* dy, int64_t ld, float* dw) {
    Vec a[KC][NV];
    LoadTile(a, dw, ld);
    for (int64_t q = 0; q < pixels; ++q, dy += ld) {
      const float* s = src + pix[q] * lanes;
      Vec d[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&d[v], dy + v * W, sizeof(Vec));
#pragma GCC unroll 16
      for (int k = 0; k < KC; ++k) {
        const Vec x = Broadcast<Vec>(s[off[k]]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) a[k][v] += x * d[v];
      }
    }
    StoreTile(a, dw, ld);
  }

  // Rows [k, kk) of dw in chunks of KC, then of KC / 2, ... down to single rows.
  template <int NV, int KC>
  static void GradRows(int64_t k, int64_t kk, const float* src, int64_t lanes, const int64_t* pix,
                       int64_t pixels, const int64_t* off, const float* dy, int64_t ld, float* dw) {
    for (; k + KC <= kk; k += KC)
      GradChunk<NV, KC>(src, lanes, pix, pixels, off + k, dy, ld, dw + k * ld);
    if constexpr (KC > 1) GradRows<NV, KC / 2>(k, kk, src, lanes, pix, pixels, off, dy, ld, dw);
  }

  static void FilterGrad(const float* src, int64_t lanes, const int64_t* pix, int64_t pixels,
                         const int64_t* off, int64_t kk, const float* dy, int64_t ld,
                         int64_t channels, float* dw) {
    if (channels % 32 == 0) {
      for (int64_t c = 0; c < channels; c += 32)
        GradRows<32 / W, MR32>(0, kk, src, lanes, pix, pixels, off, dy + c, ld, dw + c);
    } else {
      for (int64_t c = 0; c < channels; c += 16)
        GradRows<16 / W, MR16>(0, kk, src, lanes, pix, pixels, off, dy + c, ld, dw + c);
    }
  }
};

}  // namespace
}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_CONV_DIRECT_IMPL_H_
