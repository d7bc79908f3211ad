// One device's memory ("HBM"): host blocks accounted against a fixed capacity.
//
// The capacity is not reserved up front (a 16 GiB default must not cost 16 GiB of host RAM);
// every block is a separate 64-byte-aligned host allocation and the statistics describe exactly
// what is live. A freed block leaves the accounting at once but goes to `release`, which keeps
// it readable until queued stream work that may use it has run (frees are stream-ordered, as
// TensorFlow assumes of device memory).
#ifndef NPURT_SIM_MEMORY_POOL_H_
#define NPURT_SIM_MEMORY_POOL_H_

#include <cstdint>
#include <map>
#include <mutex>

#include "npurt/npurt.h"

namespace npurt_sim {

class MemoryPool {
 public:
  using ReleaseFn = void (*)(void* block);
  MemoryPool(int32_t device, uint64_t capacity, ReleaseFn release)
      : device_(device), capacity_(capacity), release_(release) {}
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  npurtError Allocate(uint64_t size, void** ptr);
  npurtError Free(void* ptr);
  // Whether [ptr, ptr + size) lies inside one live block (device pointers may be offsets).
  bool Contains(const void* ptr, uint64_t size) const;
  npurtMemStats Stats() const;
  void ResetPeak();

 private:
  const int32_t device_;
  const uint64_t capacity_;
  const ReleaseFn release_;
  mutable std::mutex mu_;
  std::map<uintptr_t, uint64_t> blocks_;  // start address -> rounded size
  uint64_t in_use_ = 0, peak_ = 0, total_allocs_ = 0;
};

}  // namespace npurt_sim

#endif  // NPURT_SIM_MEMORY_POOL_H_
