// Process-wide state of the sim backend: the configuration and, once initialized, the devices.
#ifndef NPURT_SIM_RUNTIME_H_
#define NPURT_SIM_RUNTIME_H_

#include <memory>
#include <mutex>
#include <vector>

#include "npurt/npurt.h"
#include "sim/memory_pool.h"
#include "sim/stream.h"

namespace npurt_sim {

// Frees `block` now, or once every stream has run the work it had queued at this call.
void ReleaseBlock(void* block);

struct Device {
  Device(int32_t device_id, uint64_t hbm_bytes)
      : id(device_id), pool(device_id, hbm_bytes, &ReleaseBlock) {}
  const int32_t id;
  MemoryPool pool;
  struct StreamRef {
    std::weak_ptr<Stream> stream;               // what npurtSynchronizeDevice waits for
    std::shared_ptr<StreamProgress> progress;  // what a freed block waits for
  };
  std::mutex streams_mu;
  std::vector<StreamRef> streams;
};

// Device `id`, initializing the runtime on first use; null (and the error in *err) on failure.
Device* GetDevice(int32_t id, npurtError* err);

// Checks the operands of a copy of `kind`: device-side ranges must lie inside live allocations.
npurtError CheckCopy(void* dst, const void* src, uint64_t size, npurtMemcpyKind kind);
npurtError CheckDeviceRange(const void* ptr, uint64_t size, const char* what);

}  // namespace npurt_sim

#endif  // NPURT_SIM_RUNTIME_H_
