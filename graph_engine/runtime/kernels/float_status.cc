#include "kernels/float_status.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {

// NPU_OVERFLOW_MODE seeds the mode (the Python option sets it again at configuration time).
int InitialMode() {
  const char* env = std::getenv("NPU_OVERFLOW_MODE");
  return env && std::strcmp(env, "inf_nan") == 0 ? NPU_OVERFLOW_INF_NAN : NPU_OVERFLOW_SATURATION;
}

std::atomic<int> g_mode{InitialMode()};
std::atomic<uint32_t> g_status{0};

constexpr uint16_t kExponent = 0x7C00, kMantissa = 0x03FF, kSign = 0x8000, kMaxHalf = 0x7BFF;

}  // namespace

int npuGetOverflowMode(void) { return g_mode.load(std::memory_order_relaxed); }

int npuSetOverflowMode(int mode) {
  if (mode != NPU_OVERFLOW_SATURATION && mode != NPU_OVERFLOW_INF_NAN) return -1;
  g_mode.store(mode, std::memory_order_relaxed);
  return 0;
}

uint32_t npuGetFloatStatus(void) { return g_status.load(std::memory_order_acquire); }
uint32_t npuClearFloatStatus(void) { return g_status.exchange(0, std::memory_order_acq_rel); }

namespace npu {
namespace kernels {

void CheckHalfStore(uint16_t* dst, int64_t n) {
  // Fast path: a branch-free OR over the stored bits finds whether any exponent is all ones.
  uint16_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= static_cast<uint16_t>((dst[i] & kExponent) == kExponent);
  if (!any) return;
  const bool saturate = npuGetOverflowMode() == NPU_OVERFLOW_SATURATION;
  uint32_t bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((dst[i] & kExponent) != kExponent) continue;
    if (dst[i] & kMantissa) {
      bits |= NPU_STATUS_NAN;
    } else {
      bits |= NPU_STATUS_OVERFLOW;
      if (saturate) dst[i] = static_cast<uint16_t>((dst[i] & kSign) | kMaxHalf);
    }
  }
  g_status.fetch_or(bits, std::memory_order_acq_rel);
}

}  // namespace kernels
}  // namespace npu
