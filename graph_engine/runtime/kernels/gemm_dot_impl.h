// C = A * B^T as dot products (gemm_block.h's DotFn), on vectors of 8 or 16 floats, included by
// one unit per instruction set (gemm.cc: the AVX2 baseline; gemm_avx512.cc: AVX-512).
//
// Why dot products: rows of A and of B^T's storage (B's rows) are both contiguous along K, so a
// register tile of MR x NR outputs can read them in place as vectors along K, with no packing of
// B into column panels (what Eigen does on every call: 1.6 MB for an MLP's 64x784x512 input
// gradient, whose product is only 51 MFLOP). Each of the tile's MR * NR = W accumulators holds W
// partial sums; one reduction tree at the end turns the W accumulators into one vector of their W
// sums.
#ifndef NPU_KERNELS_GEMM_DOT_IMPL_H_
#define NPU_KERNELS_GEMM_DOT_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/vec.h"

namespace npu {
namespace kernels {
namespace {

template <class Vec, int MR, int NR>
struct Dot {
  static constexpr int W = sizeof(Vec) / sizeof(float);
  static_assert(MR * NR == W, "one reduction tree per tile: MR * NR accumulators of W lanes");

  // Combine<H>(x, y): both vectors' partial sums halved into one vector. Taken in blocks of H
  // lanes, x's even blocks each plus the block after it fill the even blocks of the result, y's
  // the odd ones (H = W/2: x's low + high half, then y's).
  static constexpr int Lo(int h, int i) {
    return (i / h) % 2 == 0 ? i : W + i - h;
  }
  static constexpr int Hi(int h, int i) { return Lo(h, i) + h; }
  template <int H, std::size_t... I>
  static Vec Combine(Vec x, Vec y, std::index_sequence<I...>) {
    return __builtin_shufflevector(x, y, Lo(H, I)...) + __builtin_shufflevector(x, y, Hi(H, I)...);
  }

  // acc[0, N) pairwise at halving widths: lane i of the result is the sum of the lanes of
  // acc[BitReverse(i)] (log2(W) bits).
  template <int N>
  static Vec Reduce(const Vec* acc) {
    if constexpr (N == 1) {
      return acc[0];
    } else {
      Vec half[N / 2];
#pragma GCC unroll 16
      for (int t = 0; t < N / 2; ++t)
        half[t] = Combine<N / 2>(acc[2 * t], acc[2 * t + 1], std::make_index_sequence<W>());
      return Reduce<N / 2>(half);
    }
  }
  static constexpr int BitReverse(int i) {
    int r = 0;
    for (int b = 1; b < W; b <<= 1, i >>= 1) r = 2 * r + (i & 1);
    return r;
  }

  template <std::size_t... I>
  static Vec Reorder(Vec v, std::index_sequence<I...>) {
    return __builtin_shufflevector(v, v, BitReverse(I)...);
  }

  static Vec Load(const float* p) {
    Vec v;
    std::memcpy(&v, p, sizeof(Vec));
    return v;
  }

  // Outputs c[i * ldc + j] for i < MR, j < NR: rows a[i] and b[j] (k floats each) dotted; rows
  // past the matrix repeat its last (the caller clamps them), and only rows < mr, cols < nr are
  // written. The k % W trailing floats are copied into zero-filled vectors first, so that no
  // call is made while the accumulators live (they would be spilled around it).
  static void Tile(const float* const* a, const float* const* b, int64_t k, int mr, int nr,
                   float* c, int64_t ldc, bool accumulate) {
    const int64_t body = k - k % W;
    Vec at[MR], bt[NR];
    if (body < k) {
      const std::size_t bytes = (k - body) * sizeof(float);
      for (int i = 0; i < MR; ++i) { at[i] = Vec{}; std::memcpy(&at[i], a[i] + body, bytes); }
      for (int j = 0; j < NR; ++j) { bt[j] = Vec{}; std::memcpy(&bt[j], b[j] + body, bytes); }
    }
    Vec acc[MR * NR];
#pragma GCC unroll 16
    for (int t = 0; t < MR * NR; ++t) acc[t] = Vec{};
    for (int64_t p = 0; p < body; p += W) {
      Vec av[MR], bv[NR];
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) av[i] = Load(a[i] + p);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) bv[j] = Load(b[j] + p);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i * NR + j] += av[i] * bv[j];
    }
    if (body < k) {
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i * NR + j] += at[i] * bt[j];
    }
    // Lanes in output order (a constant permutation), then stored row by row.
    const Vec sums = Reorder(Reduce<W>(acc), std::make_index_sequence<W>());
    float s[W];
    std::memcpy(s, &sums, sizeof(Vec));
    if (mr == MR && nr == NR && !accumulate) {
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) std::memcpy(c + i * ldc, s + i * NR, NR * sizeof(float));
      return;
    }
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nr; ++j) {
        float& out = c[i * ldc + j];
        out = accumulate ? out + s[i * NR + j] : s[i * NR + j];
      }
  }

  // C[r0:r1, c0:c1] (= or +=) A[r0:r1, :] * B[c0:c1, :]^T, all row-major (A [m, k], B [n, k],
  // C [m, n]). Column tiles outside, row tiles inside: B's NR rows stay in L1 while the rows of A
  // stream past them from L2.
  static void Block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t n, int64_t k,
                    const float* a, const float* b, float* c, bool accumulate) {
    // The next column tile's rows of B (contiguous: NR rows of k floats) are prefetched, a share
    // per row tile, while this tile's are in L1: left to the hardware, the first row tile of
    // each column tile waited on them (64x784x512 on one thread: 282-320 -> 254-261 us, 8 rows
    // of A 64-68 -> 36-42 us).
    const int64_t row_tiles = (r1 - r0 + MR - 1) / MR;
    const int64_t lines = (NR * k * static_cast<int64_t>(sizeof(float)) + 63) / 64;
    const int64_t share = (lines + row_tiles - 1) / row_tiles;
    for (int64_t j0 = c0; j0 < c1; j0 += NR) {
      const float* bt[NR];
      for (int j = 0; j < NR; ++j) bt[j] = b + std::min(j0 + j, c1 - 1) * k;
      const int nr = static_cast<int>(std::min<int64_t>(NR, c1 - j0));
      const int64_t next_rows = std::clamp<int64_t>(c1 - j0 - NR, 0, NR);
      const char* next = reinterpret_cast<const char*>(b + std::min(j0 + NR, c1) * k);
      const int64_t next_lines = next_rows * k * static_cast<int64_t>(sizeof(float)) / 64;
      int64_t fetched = 0;
      for (int64_t i0 = r0; i0 < r1; i0 += MR) {
        for (int64_t end = std::min(next_lines, fetched + share); fetched < end; ++fetched)
          __builtin_prefetch(next + fetched * 64, 0, 3);
        const float* at[MR];
        for (int i = 0; i < MR; ++i) at[i] = a + std::min(i0 + i, r1 - 1) * k;
        Tile(at, bt, k, static_cast<int>(std::min<int64_t>(MR, r1 - i0)), nr, c + i0 * n + j0, n,
             accumulate);
      }
    }
  }
};

}  // namespace
}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_GEMM_DOT_IMPL_H_
