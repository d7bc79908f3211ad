#include "kernels/gemm.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/conv_direct.h"
#include "kernels/gemm_block.h"
#include "kernels/gemm_dot_impl.h"
#include "kernels/gemm_packed_impl.h"
#include "kernels/thread_pool.h"
#include "npurt/npurt.h"

namespace npu {
namespace kernels {
namespace {

using gemm_detail::BlockFn;
using gemm_detail::DotFn;

// The block products for the best instruction set this CPU runs (chosen once), unless the
// environment pins the build's AVX2 baseline: NPU_KERNEL_ISA=avx2 lets an AVX-512 machine test
// the path AVX2-only machines take.
struct Blocks {
  BlockFn fn[2][2];
  DotFn dot = &Dot<Vec8, 4, 2>::Block;   // 8 accumulators, 6 registers for the rows read
  // 12 accumulators, 2 registers for B's row, 1 for the broadcast
  gemm_detail::PackedKernel packed = Packed<Vec8, 6, 2>::Kernel();
  bool avx512 = false;
  Blocks() {
    const char* env = std::getenv("NPU_KERNEL_ISA");
    const std::string wanted = env == nullptr || *env == '\0' ? "auto" : env;
    if (wanted != "auto" && wanted != "avx2")
      std::fprintf(stderr, "npu runtime: NPU_KERNEL_ISA='%s' is not one of auto, avx2; using auto\n",
                   wanted.c_str());
    const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    avx512 = wanted != "avx2" && cpu && gemm_detail::BlockTableAvx512(fn, &dot, &packed);
    if (!avx512) gemm_detail::BlockTable(fn);
  }
};

const Blocks& ChosenBlocks() {
  static const Blocks blocks;
  return blocks;
}

// A parallel range of C rows packs all of B, one of C columns all of A; ranges stay at least
// 16 rows/columns wide (Eigen's register tiles) and large enough to be worth a thread.
constexpr int64_t kMinRange = 16;
constexpr int64_t kMinRangeFlops = 1 << 20;

int64_t Ranges(int64_t extent, int64_t flops) {
  // One range per thread: every range packs the whole other operand, and on the small shapes
  // (an MLP's 64x512x784) the second range's repacking cost more than the balance it bought
  // (gemm_bench: 36% -> 62-70% of peak; two per thread balanced a core held by another process).
  return std::max<int64_t>(1, std::min({extent / kMinRange, flops / kMinRangeFlops,
                                        static_cast<int64_t>(PlanThreads())}));
}

// C = A * B for plain row-major A and B as the direct convolution's strips (a 1x1 convolution
// of m pixels, conv_direct.h): A read in place, B by panels of a column group; work items of up
// to kDirectRows rows and a share of the column groups, enough of them for every thread. Up to
// kDirectMaxN columns and kDirectMaxK products per element: gemm_bench measured 4096x64x576
// 357 -> 435 GFLOP/s, 64x512x784 412 -> 457, 256x256x64 379 -> 411, 256^3 and 512^3 the same;
// 1024^3 (474 -> 343) and 1024x256x1152 (454 -> 407) stay on Eigen, whose blocking keeps A in
// cache across columns.
constexpr int64_t kDirectRows = 64, kDirectMaxN = 512, kDirectMaxK = 1024;

// 0, 1, 2, ...: the strips' pixel and row indices.
const int64_t* Identity() {
  static const std::array<int64_t, kDirectMaxK> index = [] {
    std::array<int64_t, kDirectMaxK> index;
    for (int64_t i = 0; i < kDirectMaxK; ++i) index[i] = i;
    return index;
  }();
  return index.data();
}

// Runs fn(r0, r1, c0, c1) over C's rows in blocks of up to kDirectRows and a share of its column
// groups each, enough work items for every thread.
template <class Fn>
void ForDirectBlocks(int64_t m, int64_t n, int64_t k, const Fn& fn) {
  const int64_t chunks = (m + kDirectRows - 1) / kDirectRows, group = n % 32 == 0 ? 32 : 16;
  const int64_t parts = std::min(n / group, (PlanThreads() + chunks - 1) / chunks);
  ParallelFor(chunks * parts, ProductCost(2 * std::min(m, kDirectRows) * n / parts * k),
              [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t q = i / parts, part = i % parts;
      const int64_t r0 = q * kDirectRows;
      fn(r0, std::min(m, r0 + kDirectRows), n / group * part / parts * group,
         n / group * (part + 1) / parts * group);
    }
  });
}

void DirectGemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  // Rows of a work item as the strips' "pixels": row i of its first row's block is A's i-th.
  ForDirectBlocks(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const DirectBlock a_rows{a + r0 * k, k, 0, k};
    DirectConv(&a_rows, 1, 1, Identity(), r1 - r0, b + c0, n, c1 - c0, c + r0 * n + c0);
  });
}

// C = A^T * B (or += when `accumulate`) for row-major A [K,M]: a sum of K outer products, as the
// convolution's filter gradient sums them (C's rows its filter rows, K its pixels): no packing,
// and no narrow edge panel for 64 columns. Against Eigen's GEMM on one thread (gemm_bench's
// model, best of 3): 256x64x256 96 -> 86 us, 576x64x256 213 -> 188, an LSTM's weight gradients
// 64x256x16 7.2 -> 6.9 and 32x256x16 equal, and those now split over the threads (Eigen's does
// not split under 1 MFLOP); with many rows and columns Eigen's larger register tile wins
// (784x512x64 524 -> 575 us), so not those.
bool UseDirectTransA(int64_t m, int64_t n, int64_t k) {
  return n % 16 == 0 && n <= kDirectMaxN && k <= kDirectMaxK && (m <= kDirectRows || n <= 128);
}

void DirectGemmTransA(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
                      bool accumulate) {
  ForDirectBlocks(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (!accumulate)
      for (int64_t r = r0; r < r1; ++r) std::fill(c + r * n + c0, c + r * n + c1, 0.0f);
    DirectFilterGrad(a + r0, m, Identity(), k, Identity(), r1 - r0, b + c0, n, c1 - c0,
                     c + r0 * n + c0);
  });
}

// Whether C = A * B^T runs as dot products (gemm_dot_impl.h) rather than Eigen's GEMM, which
// packs B into column panels on every call: where few rows of A share that packing. gemm_bench,
// A B^T, both threads, AVX-512: 16x64x256 1.8x faster, 64x784x512 1.2x, 128x1024x512 1.1x,
// 33x47x1000 2.7x; 256x256x128 0.76x, 1024x64x256 0.92x (so not those). Each output's sum ends
// in a reduction of W lanes, so fewer than 128 products per output lose (16x64x64 0.86x). The
// AVX2 kernel's tiles are half as wide and win on fewer rows (16x64x256 1.3x, 64x784x512 0.92x).
constexpr int64_t kDotMinK = 128;
bool UseDot(int64_t m, int64_t k) {
  return k >= kDotMinK && m <= (ChosenBlocks().avx512 ? std::max<int64_t>(64, k / 4) : 32);
}

// C = A * B^T (or += when `accumulate`) as dot products along K: work items of up to kDotRows
// rows of A (their rows stay in L2 while each tile of B's rows is in L1) and a share of B's rows,
// enough of them for every thread.
constexpr int64_t kDotRows = 64;

void DotGemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
             bool accumulate) {
  const DotFn dot = ChosenBlocks().dot;
  const int64_t chunks = (m + kDotRows - 1) / kDotRows;
  const int64_t parts =
      std::max<int64_t>(1, std::min(n / 16, (PlanThreads() + chunks - 1) / chunks));
  ParallelFor(chunks * parts, ProductCost(2 * std::min(m, kDotRows) * n / parts * k),
              [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t q = i / parts, part = i % parts;
      const int64_t r0 = q * kDotRows, r1 = std::min(m, r0 + kDotRows);
      dot(r0, r1, n * part / parts, n * (part + 1) / parts, n, k, a, b, c, accumulate);
    }
  });
}

}  // namespace

const char* GemmIsa() { return ChosenBlocks().avx512 ? "avx512" : "avx2"; }

void Gemm(int64_t m, int64_t n, int64_t k, const float* a, bool trans_a, const float* b,
          bool trans_b, float* c, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, 0.0f);
    return;
  }
  if (!trans_a && !trans_b && !accumulate && n % 16 == 0 && n <= kDirectMaxN && k <= kDirectMaxK) {
    DirectGemm(m, n, k, a, b, c);
    return;
  }
  if (trans_a && !trans_b && UseDirectTransA(m, n, k)) {
    DirectGemmTransA(m, n, k, a, b, c, accumulate);
    return;
  }
  if (!trans_a && trans_b && UseDot(m, k)) {
    DotGemm(m, n, k, a, b, c, accumulate);
    return;
  }
  const BlockFn block = ChosenBlocks().fn[trans_a][trans_b];
  // Split the dimension whose ranges repack the smaller operand (rows: B, columns: A), unless
  // the other dimension gives more ranges (a batch of one has a single row).
  const int64_t flops = 2 * m * n * k, row_ranges = Ranges(m, flops), col_ranges = Ranges(n, flops);
  const int64_t enough = PlanThreads();
  const bool by_rows = m >= n ? row_ranges >= std::min(col_ranges, enough)
                              : col_ranges < std::min(row_ranges, enough);
  const int64_t extent = by_rows ? m : n, ranges = by_rows ? row_ranges : col_ranges;
  // Ranges are multiples of 16 rows/columns; the last one takes the remainder.
  const int64_t step = (extent / ranges + 15) / 16 * 16;
  const int64_t count = (extent + step - 1) / step;
  ParallelFor(count, ProductCost(2 * step * (by_rows ? n : m) * k), [&](int64_t i0, int64_t i1) {
    const int64_t lo = i0 * step, hi = std::min(extent, i1 * step);
    // Each range clears its own part of C: in parallel, and while it is about to be in cache.
    if (by_rows) {
      if (!accumulate) std::fill(c + lo * n, c + hi * n, 0.0f);
      block(lo, hi, 0, n, m, n, k, a, b, c);
    } else {
      if (!accumulate)
        for (int64_t r = 0; r < m; ++r) std::fill(c + r * n + lo, c + r * n + hi, 0.0f);
      block(0, m, lo, hi, m, n, k, a, b, c);
    }
  });
}

int64_t PackedBFloats(int64_t k, int64_t n) { return ChosenBlocks().packed.floats(k, n); }

void PackB(int64_t k, int64_t n, const float* b, bool trans_b, float* packed) {
  ChosenBlocks().packed.pack(b, trans_b, k, n, packed);
}

bool PrefersPackedB(int64_t m, int64_t n, int64_t k) {
  // Measured against Gemm on B as stored (kernel alone, 2 threads, AVX-512): faster from K = 64
  // with 32 rows or more (256x256x64 291 -> 353 GFLOP/s, 784x512x64 266 -> 376, 128^3 297 ->
  // 355) and from K = 256 with any (8x512x784 253 -> 313); even with fewer (16x256x64: 172 ->
  // 158). Rows of A 4 KiB apart (K a multiple of 1024) put a tile's broadcasts in one of L1's
  // sets, where they evict each other every step: Eigen's GEMM, which packs A, keeps those.
  return m > 0 && n > 0 && k % 1024 != 0 && (k >= 256 || (k >= 64 && m >= 32));
}

void GemmPackedB(int64_t m, int64_t n, int64_t k, const float* a, const float* packed_b,
                 float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, 0.0f);
    return;
  }
  // One range per thread: rows (each range reads all the panels), or whole panels of columns
  // (each reads all of A) for fewer than 32 rows a thread and two panels or more. Rows measured
  // faster wherever there are that many (256x256x64 263 -> 331 GFLOP/s, 4096x64x576 266 -> 319,
  // 512^3 350 -> 366); columns below (32x512x512 287 -> 338, 8x512x784 one range -> 314). A few
  // ranges per thread, to balance a thread that starts late, measured slower (8 for 256x256x64:
  // 256 -> 207 GFLOP/s): each range stores and reloads its own tiles of C once per block of K.
  const gemm_detail::PackedKernel& kernel = ChosenBlocks().packed;
  const int64_t panels = (n + kernel.panel_width - 1) / kernel.panel_width;
  const int64_t flops = 2 * m * n * k, threads = std::max<int64_t>(
      1, std::min<int64_t>(PlanThreads(), flops / kMinRangeFlops));
  const bool by_rows = m >= 32 * threads || panels < 2 * threads;
  const int64_t ranges = std::max<int64_t>(1, std::min(threads, by_rows ? m / kMinRange : panels));
  ParallelFor(ranges, ProductCost(flops / ranges), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (by_rows)
        kernel.block(m * i / ranges, m * (i + 1) / ranges, 0, n, n, k, a, packed_b, c);
      else
        kernel.block(0, m, panels * i / ranges * kernel.panel_width,
                     std::min(n, panels * (i + 1) / ranges * kernel.panel_width), n, k, a,
                     packed_b, c);
    }
  });
}

}  // namespace kernels
}  // namespace npu

// For npu_device.runtime.kernel_isa() (ctypes).
extern "C" NPURT_API const char* npuKernelIsa() { return npu::kernels::GemmIsa(); }
