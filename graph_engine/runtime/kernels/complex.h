// complex64 kernels that other kernel files dispatch to for their complex dtype (complex.cc).
#ifndef NPU_KERNELS_COMPLEX_H_
#define NPU_KERNELS_COMPLEX_H_

#include <memory>

#include "kernels/kernel.h"

namespace npu {
namespace kernels {

// BatchMatMulV2 of complex64 matrices (batch dimensions broadcast; adj_x/adj_y: conjugate
// transposes), the matmul of RFFT2D's gradient.
Status MakeComplexBatchMatMul(const KernelDef& def, std::unique_ptr<Kernel>* out);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_COMPLEX_H_
