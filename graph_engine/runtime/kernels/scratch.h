// Per-thread scratch buffers reused across kernel calls: the im2col and GEMM buffers of the
// convolutions and the fused elementwise kernel's tiles are about the same size every call,
// and fresh ones would be zero-filled (and their pages faulted in) each time.
#ifndef NPU_KERNELS_SCRATCH_H_
#define NPU_KERNELS_SCRATCH_H_

#include <cstdint>
#include <vector>

namespace npu {
namespace kernels {

// At least `floats` floats of this thread's buffer `slot` (contents unspecified). A kernel
// uses distinct slots for buffers it holds at the same time; the pointer stays valid until
// this thread asks for a larger buffer in the same slot.
enum ScratchSlot { kScratchCols, kScratchAcc, kScratchGroup, kScratchPadded, kScratchTiles,
                  kScratchPanel, kScratchSlots };

inline float* Scratch(ScratchSlot slot, int64_t floats) {
  thread_local std::vector<float> buffers[kScratchSlots];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < floats) b.resize(floats);
  return b.data();
}

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_SCRATCH_H_
