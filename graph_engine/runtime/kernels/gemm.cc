#include "kernels/gemm.h"

#include <Eigen/Core>

#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

using Stride = Eigen::OuterStride<>;
template <int Order>
using ConstMat = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Stride>;
using OutMat = Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Stride>;

// The block rows [r0, r1) x columns [c0, c1) of C. A transposed operand is read as the
// column-major matrix its row-major storage is.
template <int AOrder, int BOrder>
void GemmBlock(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t m, int64_t n, int64_t k,
               const float* a, const float* b, float* c) {
  const bool a_rows = AOrder == Eigen::RowMajor, b_rows = BOrder == Eigen::RowMajor;
  ConstMat<AOrder> am(a + (a_rows ? r0 * k : r0), r1 - r0, k, Stride(a_rows ? k : m));
  ConstMat<BOrder> bm(b + (b_rows ? c0 : c0 * k), k, c1 - c0, Stride(b_rows ? n : k));
  OutMat cm(c + r0 * n + c0, r1 - r0, c1 - c0, Stride(n));
  cm.noalias() += am * bm;
}

}  // namespace

void Gemm(int64_t m, int64_t n, int64_t k, const float* a, bool trans_a, const float* b,
          bool trans_b, float* c, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (!accumulate) std::fill(c, c + m * n, 0.0f);
  if (k == 0) return;
  using F = void (*)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*,
                     const float*, float*);
  static const F kVariants[2][2] = {
      {&GemmBlock<Eigen::RowMajor, Eigen::RowMajor>, &GemmBlock<Eigen::RowMajor, Eigen::ColMajor>},
      {&GemmBlock<Eigen::ColMajor, Eigen::RowMajor>, &GemmBlock<Eigen::ColMajor, Eigen::ColMajor>}};
  const F block = kVariants[trans_a][trans_b];
  // Row blocks share B; a product with few rows (a batch of one) splits its columns instead.
  if (m >= 4 * NumThreads() || m >= n) {
    ParallelFor(m, 2 * n * k, [&](int64_t r0, int64_t r1) { block(r0, r1, 0, n, m, n, k, a, b, c); });
  } else {
    ParallelFor(n, 2 * m * k, [&](int64_t c0, int64_t c1) { block(0, m, c0, c1, m, n, k, a, b, c); });
  }
}

}  // namespace kernels
}  // namespace npu
