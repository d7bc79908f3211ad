// The direct convolution compiled for AVX-512 (CMakeLists.txt gives this file the flags);
// conv_direct.cc calls it only where the GEMM runs AVX-512, so the library still runs on AVX2.
#include "kernels/conv_direct.h"

#if defined(__AVX512F__)
#include "kernels/conv_direct_impl.h"
#endif

namespace npu {
namespace kernels {
namespace conv_direct_detail {

bool FnsAvx512(Fns* fns) {
#if defined(__AVX512F__)
  using DirectAvx512 = Direct<Vec16, 12, 8>;   // 32 vector registers, up to 16 accumulators
  *fns = {&DirectAvx512::Conv, &DirectAvx512::FilterGrad};
  return true;
#else
  (void)fns;
  return false;
#endif
}

}  // namespace conv_direct_detail
}  // namespace kernels
}  // namespace npu
