// The GEMM block product compiled for AVX-512 (CMakeLists.txt gives this file the flags);
// gemm.cc calls it only on CPUs that have AVX-512, so the library still runs on AVX2 machines.
#if defined(__AVX512F__)
#define Eigen NpuEigenAvx512   // a namespace of its own: see gemm_block.h
#endif
#include "kernels/gemm_block.h"
#if defined(__AVX512F__)
#include "kernels/gemm_dot_impl.h"
#include "kernels/gemm_packed_impl.h"
#endif

namespace npu {
namespace kernels {
namespace gemm_detail {

bool BlockTableAvx512(BlockFn table[2][2], DotFn* dot, PackedKernel* packed) {
#if defined(__AVX512F__)
  BlockTable(table);
  *dot = &Dot<Vec16, 4, 4>::Block;   // 16 accumulators, 8 registers for the rows read
  *packed = Packed<Vec16, 14, 2>::Kernel();   // 28 accumulators, 2 for B's row, 1 broadcast
  return true;
#else
  (void)table;
  (void)dot;
  (void)packed;
  return false;
#endif
}

}  // namespace gemm_detail
}  // namespace kernels
}  // namespace npu
