// One device's memory ("HBM"): host blocks accounted against a fixed capacity.
//
// The capacity is not reserved up front (a 16 GiB default must not cost 16 GiB of host RAM).
// The statistics describe exactly what is live: in_use/peak count the 64-byte-rounded sizes of
// live allocations. Freed blocks are cached and reused by later allocations of about the same
// size, because a fresh host allocation per tensor or per model run costs page faults that
// dominate kernel time. A cached block is reused only once the stream work queued at its free
// has run (frees are stream-ordered, as TensorFlow assumes of device memory), and the host never
// holds more than the capacity: cached blocks are released (through `release`, which keeps a
// block readable until queued work that may use it has run) before an allocation would exceed it.
#ifndef NPURT_SIM_MEMORY_POOL_H_
#define NPURT_SIM_MEMORY_POOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "npurt/npurt.h"

namespace npurt_sim {

struct StreamProgress;

// Stream work queued at some moment: (stream, tasks it must have finished).
using Fence = std::vector<std::pair<std::shared_ptr<StreamProgress>, uint64_t>>;
Fence QueuedWork();                 // on every stream of every device, now
bool Passed(const Fence& fence);    // all of it has run

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
  // Variable memory (npurtMarkVariableMemory): the live block holding `ptr` is counted in
  // place of the one holding `replaced` while at least one variable holds it; `limit` 0: none.
  npurtError MarkVariable(const void* ptr, const void* replaced, uint64_t limit,
                          uint64_t* block_bytes);
  npurtMemStats Stats() const;
  void ResetPeak();
  uint64_t CachedBytes() const;     // host bytes held for reuse, not counted in Stats()

 private:
  struct Live {
    uint64_t size;      // accounted (rounded request)
    uint64_t capacity;  // what the host block holds (>= size when a cached block was reused)
    uint32_t variable_holders = 0;   // variables whose value lives in the block
  };
  // The live block containing `ptr`, or blocks_.end(). Call with mu_ held.
  std::map<uintptr_t, Live>::iterator FindLocked(const void* ptr);
  struct Cached {
    void* block;
    uint64_t age;       // order of the free: trimming drops the oldest first
    Fence fence;        // reusable once this has run
  };
  using Cache = std::multimap<uint64_t, Cached>;   // by the capacity of the host block
  // Call with mu_ held. Drops cached blocks, oldest first, until `need` more bytes fit the
  // capacity and the cache is within its budget; returns them for release outside the lock.
  std::vector<void*> TrimLocked(uint64_t need);

  const int32_t device_;
  const uint64_t capacity_;
  const ReleaseFn release_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Live> blocks_;  // start address -> sizes
  Cache cache_;
  std::map<uint64_t, Cache::iterator> by_age_;     // the same blocks, oldest first
  uint64_t next_age_ = 0;
  uint64_t in_use_ = 0, peak_ = 0, total_allocs_ = 0, cached_ = 0, variable_bytes_ = 0;
  uint64_t high_water_ = 0;   // the most bytes ever in use (peak_ is reset by the statistics)
};

}  // namespace npurt_sim

#endif  // NPURT_SIM_MEMORY_POOL_H_
