// C = A * op(B) for a B packed once into panels (gemm_block.h's PackedKernel), on vectors of 8
// or 16 floats, included by one unit per instruction set (gemm.cc: the AVX2 baseline;
// gemm_avx512.cc: AVX-512). For a B that holds over many products: a model's constant weight.
//
// The register tile is MR rows of C by NR = NV * W columns: per step along K it loads NV vectors
// of a panel and broadcasts MR values of A, MR * NV fused multiply-adds on as many accumulators
// (28 of the 32 registers with AVX-512). B is stored in blocks of at most KC rows, each as
// panels of NR columns (dense, zero past the last column): a panel stays in L1 while the row
// tiles of up to MC rows of A (in L2) stream past it, whatever B's layout was (rows of B read in
// place 1-2 KiB apart fall into a few of L1's sets). A is read where it is: each of its values
// is used NR times per load, and each row is contiguous along K. Packing B per product instead
// cost as much as it saved (64x512x784: B is 1.6 MB for 51 MFLOP): products of a B that changes
// every run stay with Gemm.
#ifndef NPU_KERNELS_GEMM_PACKED_IMPL_H_
#define NPU_KERNELS_GEMM_PACKED_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/gemm_block.h"
#include "kernels/vec.h"

namespace npu {
namespace kernels {
namespace {

template <class Vec, int MR, int NV>
struct Packed {
  static constexpr int W = sizeof(Vec) / sizeof(float);
  static constexpr int NR = NV * W;
  // A panel of KC rows of NR floats: 32 KiB with AVX-512 (16 with AVX2), most of L1.
  static constexpr int64_t KC = 256;
  // Rows of A a panel serves before the next panel: MC * KC floats of A (512 KiB) stay in L2.
  static constexpr int64_t MC = 512;

  // Rows [p0, p0 + kc) of op(B) [k,n] as panels of NR columns, one after another (kc * NR floats
  // each; the last zero-filled past n). op(B) is B or, when trans_b, B's storage [n,k] transposed.
  static void PackB(const float* b, bool trans_b, int64_t n, int64_t k, int64_t p0, int64_t kc,
                    float* out) {
    for (int64_t j0 = 0; j0 < n; j0 += NR, out += kc * NR) {
      const int64_t nc = std::min<int64_t>(NR, n - j0);
      if (nc < NR) std::fill(out, out + kc * NR, 0.0f);
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = 0; j < nc; ++j)
          out[p * NR + j] = trans_b ? b[(j0 + j) * k + p0 + p] : b[(p0 + p) * n + j0 + j];
    }
  }

  // C[0:R, 0:NR] (= or += when `add`) A[0:R, 0:kc] * panel (A's rows lda floats apart), or
  // only its first `nc` columns.
  template <int R>
  static void Tile(const float* a, int64_t lda, int64_t kc, const float* panel, float* c,
                   int64_t ldc, int64_t nc, bool add) {
    Vec acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = Vec{};
    const float* s[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) s[i] = a + i * lda;
    for (int64_t p = 0; p < kc; ++p, panel += NR) {
      Vec bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], panel + v * W, sizeof(Vec));
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const Vec x = Broadcast<Vec>(s[i][p]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += x * bv[v];
      }
    }
    if (nc == NR) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          float* out = c + i * ldc + v * W;
          Vec sum = acc[i][v];
          if (add) {
            Vec old;
            std::memcpy(&old, out, sizeof(Vec));
            sum += old;
          }
          std::memcpy(out, &sum, sizeof(Vec));
        }
      return;
    }
    float tile[R][NR];                                // the last columns: only nc of them
    std::memcpy(tile, acc, sizeof(tile));
    for (int i = 0; i < R; ++i)
      for (int64_t j = 0; j < nc; ++j) c[i * ldc + j] = add ? c[i * ldc + j] + tile[i][j] : tile[i][j];
  }

  // Rows [i, rows) in tiles of R, then of 8, 4, 2 and 1 (a batch of 8 or 64 rows takes no
  // tile of fewer than 8).
  template <int R>
  static void Rows(int64_t i, int64_t rows, const float* a, int64_t lda, int64_t kc,
                   const float* panel, float* c, int64_t ldc, int64_t nc, bool add) {
    for (; i + R <= rows; i += R) Tile<R>(a + i * lda, lda, kc, panel, c + i * ldc, ldc, nc, add);
    if constexpr (R > 1) Rows<(R > 8 ? 8 : R / 2)>(i, rows, a, lda, kc, panel, c, ldc, nc, add);
  }

  // All of op(B) [k,n] as PackB's panels, KC rows at a time: the panels of rows [p0, p0 + kc)
  // start at p0 * Panels(n) * NR.
  static int64_t Panels(int64_t n) { return (n + NR - 1) / NR; }
  static int64_t PackedFloats(int64_t k, int64_t n) { return k * Panels(n) * NR; }
  // The contraction in equal blocks of at most KC rows: K = 784 as 4 x 196, not 3 x 256 + 16
  // (a 16-step block spends as long on its tiles' stores and loads of C as on their products).
  static int64_t KBlocks(int64_t k) { return (k + KC - 1) / KC; }
  static int64_t KStart(int64_t k, int64_t block) { return k * block / KBlocks(k); }

  static void PackAll(const float* b, bool trans_b, int64_t k, int64_t n, float* out) {
    for (int64_t q = 0; q < KBlocks(k); ++q) {
      const int64_t p0 = KStart(k, q);
      PackB(b, trans_b, n, k, p0, KStart(k, q + 1) - p0, out + p0 * Panels(n) * NR);
    }
  }

  // C[r0:r1, c0:c1] = A[r0:r1, :] * op(B)[:, c0:c1] over row-major A [m,k] and C [m,n], B as
  // PackAll's panels; c0 is a multiple of NR. Blocks of K after the first add to C. Each block
  // of MC rows goes through all of K before the next, so its part of C stays in L2 (4096x64x576
  // 318-344 -> 352-378 GFLOP/s against K outermost; 2048x128x576 361 -> 408).
  static void Block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t n, int64_t k,
                    const float* a, const float* packed, float* c) {
    const int64_t panels = (c1 - c0 + NR - 1) / NR;
    for (int64_t i0 = r0; i0 < r1; i0 += MC)
      for (int64_t q = 0; q < KBlocks(k); ++q) {
        const int64_t p0 = KStart(k, q), kc = KStart(k, q + 1) - p0;
        const float* block = packed + p0 * Panels(n) * NR + c0 / NR * kc * NR;
        for (int64_t j = 0; j < panels; ++j)
          Rows<MR>(0, std::min(MC, r1 - i0), a + i0 * k + p0, k, kc, block + j * kc * NR,
                   c + i0 * n + c0 + j * NR, n, std::min<int64_t>(NR, c1 - c0 - j * NR), p0 > 0);
      }
  }

  static gemm_detail::PackedKernel Kernel() { return {NR, &PackedFloats, &PackAll, &Block}; }
};

}  // namespace
}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_GEMM_PACKED_IMPL_H_
