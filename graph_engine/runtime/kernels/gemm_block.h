// The single-threaded block product behind Gemm, included by one translation unit per
// instruction set (gemm.cc: the build's baseline AVX2+FMA; gemm_avx512.cc: AVX-512). A unit
// that compiles Eigen for another instruction set renames the Eigen namespace first, so its
// template instances never merge with the baseline ones at link time (same mangled names,
// different code: the linker would keep either copy).
#ifndef NPU_KERNELS_GEMM_BLOCK_H_
#define NPU_KERNELS_GEMM_BLOCK_H_

#include <Eigen/Core>
#include <cstdint>

namespace npu {
namespace kernels {
namespace gemm_detail {

// C[r0:r1, c0:c1] += op(A)[r0:r1, :] * op(B)[:, c0:c1] over row-major storage; a transposed
// operand is read as the column-major matrix its row-major storage is.
using BlockFn = void (*)(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t m, int64_t n,
                         int64_t k, const float* a, const float* b, float* c);

// C[r0:r1, c0:c1] (= or += when `accumulate`) A[r0:r1, :] * B[c0:c1, :]^T over row-major A [m,k],
// B [n,k] and C [m,n]: the dot-product kernel of gemm_dot_impl.h.
using DotFn = void (*)(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t n, int64_t k,
                       const float* a, const float* b, float* c, bool accumulate);

// The packed kernel of gemm_packed_impl.h for one instruction set: B packed once into panels of
// `panel_width` columns (`pack` writes `floats(k, n)` floats from op(B) [k,n]), then `block`
// computes C[r0:r1, c0:c1] = A[r0:r1, :] * op(B)[:, c0:c1] from them for row-major A [m,k] and
// C [m,n]; c0 a multiple of panel_width.
struct PackedKernel {
  int64_t panel_width;
  int64_t (*floats)(int64_t k, int64_t n);
  void (*pack)(const float* b, bool trans_b, int64_t k, int64_t n, float* out);
  void (*block)(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t n, int64_t k,
                const float* a, const float* packed, float* c);
};

// Internal linkage: each instruction set's unit keeps its own instances.
namespace {

template <int AOrder, int BOrder>
void Block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t m, int64_t n, int64_t k,
           const float* a, const float* b, float* c) {
  using Stride = Eigen::OuterStride<>;
  using A = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, AOrder>;
  using B = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, BOrder>;
  using C = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const bool a_rows = AOrder == Eigen::RowMajor, b_rows = BOrder == Eigen::RowMajor;
  Eigen::Map<const A, 0, Stride> am(a + (a_rows ? r0 * k : r0), r1 - r0, k, Stride(a_rows ? k : m));
  Eigen::Map<const B, 0, Stride> bm(b + (b_rows ? c0 : c0 * k), k, c1 - c0, Stride(b_rows ? n : k));
  Eigen::Map<C, 0, Stride> cm(c + r0 * n + c0, r1 - r0, c1 - c0, Stride(n));
  cm.noalias() += am * bm;
}

// [trans_a][trans_b] -> the block product for those storage orders.
inline void BlockTable(BlockFn table[2][2]) {
  table[0][0] = &Block<Eigen::RowMajor, Eigen::RowMajor>;
  table[0][1] = &Block<Eigen::RowMajor, Eigen::ColMajor>;
  table[1][0] = &Block<Eigen::ColMajor, Eigen::RowMajor>;
  table[1][1] = &Block<Eigen::ColMajor, Eigen::ColMajor>;
}

}  // namespace

// Defined in gemm_avx512.cc: fills `table`, `dot` and `packed` and returns true when that unit
// was built for AVX-512 (the caller still checks that the CPU has it).
bool BlockTableAvx512(BlockFn table[2][2], DotFn* dot, PackedKernel* packed);

}  // namespace gemm_detail
}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_GEMM_BLOCK_H_
