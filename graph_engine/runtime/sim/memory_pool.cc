#include "sim/memory_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "sim/errors.h"
#include "sim/runtime.h"

namespace npurt_sim {
namespace {

// A cached block serves a request of at most this much less than it holds (a quarter).
bool GoodFit(uint64_t capacity, uint64_t size) { return capacity >= size && capacity - size <= size / 4; }

// The cache holds at most as many bytes as were ever in use at once, or this much if more: a
// step's freed memory is what the next step allocates again (a training step's new weights and
// optimizer moments, about as large as the model, take fresh blocks while the old ones are
// still read), and an idle process keeps no more than its busiest moment needed.
constexpr uint64_t kCacheFloor = 256ull << 20;

// The simulated NPU's memory is host RAM, and Linux grants any allocation: blocks the host
// could not back were an OOM kill of the process once their pages were touched (bincount with
// minlength 2**31 - 1). Large blocks are checked against MemAvailable and touched at once, so
// the next check sees them; a block the host cannot back is an out-of-memory error.
constexpr uint64_t kLargeBlock = 64ull << 20;

bool HostCanBack(uint64_t size) {
  if (size < kLargeBlock) return true;
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return true;
  char line[256];
  unsigned long long kb = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr)
    found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
  std::fclose(f);
  return !found || size <= kb * 1024;
}

void TouchPages(void* block, uint64_t size) {
  if (size < kLargeBlock) return;
  for (uint64_t i = 0; i < size; i += 4096) static_cast<volatile char*>(block)[i] = 0;
}

}  // namespace

Fence QueuedWork() {
  Fence fence;
  uint32_t count = 0;
  if (npurtGetDeviceCount(&count) != NPURT_SUCCESS) return fence;
  for (uint32_t id = 0; id < count; ++id) {  // any device's stream may copy from any block
    npurtError err;
    Device* device = GetDevice(static_cast<int32_t>(id), &err);
    if (device == nullptr) continue;
    std::lock_guard<std::mutex> lock(device->streams_mu);
    for (const auto& ref : device->streams) {
      const uint64_t submitted = ref.progress->submitted.load(std::memory_order_acquire);
      if (ref.progress->finished.load(std::memory_order_acquire) < submitted)
        fence.emplace_back(ref.progress, submitted);
    }
  }
  return fence;
}

bool Passed(const Fence& fence) {
  for (const auto& [progress, ticket] : fence)
    if (progress->finished.load(std::memory_order_acquire) < ticket) return false;
  return true;
}

MemoryPool::~MemoryPool() {
  for (const auto& block : blocks_) std::free(reinterpret_cast<void*>(block.first));
  for (const auto& [capacity, c] : cache_) std::free(c.block);
}

std::vector<void*> MemoryPool::TrimLocked(uint64_t need) {
  std::vector<void*> dropped;
  const uint64_t budget = std::max(kCacheFloor, high_water_);
  while (!by_age_.empty() && (in_use_ + cached_ + need > capacity_ || cached_ > budget)) {
    const auto oldest = by_age_.begin()->second;
    cached_ -= oldest->first;
    dropped.push_back(oldest->second.block);
    cache_.erase(oldest);
    by_age_.erase(by_age_.begin());
  }
  return dropped;
}

npurtError MemoryPool::Allocate(uint64_t size, void** ptr) {
  if (ptr == nullptr) return Fail(NPURT_ERROR_INVALID_PARAM, "npurtMalloc: ptr is null");
  *ptr = nullptr;
  if (size == 0) return NPURT_SUCCESS;  // like malloc(0): nothing to account, free(nullptr) is ok
  const uint64_t align = NPURT_MEMORY_ALIGNMENT;
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t free_bytes = capacity_ - in_use_;
  // size <= free_bytes <= capacity (at most 1 TiB) keeps the rounding from overflowing.
  const uint64_t rounded = size > free_bytes ? 0 : (size + align - 1) / align * align;
  if (size > free_bytes || rounded > free_bytes) {
    return Fail(NPURT_ERROR_OUT_OF_MEMORY,
                Format("NPU:%d out of memory: requested %llu bytes, %llu free of %llu", device_,
                       (unsigned long long)size, (unsigned long long)free_bytes,
                       (unsigned long long)capacity_));
  }
  // Best fit among the cached blocks whose queued work has run: the smallest that fits.
  auto best = cache_.lower_bound(rounded);
  while (best != cache_.end() && GoodFit(best->first, rounded) && !Passed(best->second.fence)) ++best;
  void* block = nullptr;
  uint64_t capacity = rounded;
  if (best != cache_.end() && GoodFit(best->first, rounded)) {
    block = best->second.block;
    capacity = best->first;
    cached_ -= capacity;
    by_age_.erase(best->second.age);
    cache_.erase(best);
  } else {
    std::vector<void*> dropped = TrimLocked(rounded);
    block = HostCanBack(rounded) ? std::aligned_alloc(align, rounded) : nullptr;
    if (block == nullptr) {  // the host is short: give back every cached block and retry
      for (const auto& [size, c] : cache_) dropped.push_back(c.block);
      cache_.clear();
      by_age_.clear();
      cached_ = 0;
    }
    lock.unlock();
    for (void* b : dropped) release_(b);
    if (block == nullptr && HostCanBack(rounded)) block = std::aligned_alloc(align, rounded);
    if (block == nullptr) {
      return Fail(NPURT_ERROR_OUT_OF_MEMORY,
                  Format("NPU:%d out of memory: the host could not provide %llu bytes (the "
                         "simulated NPU's memory lives in host RAM)",
                         device_, (unsigned long long)rounded));
    }
    TouchPages(block, rounded);
    lock.lock();
    if (rounded > capacity_ - in_use_) {  // another thread took the room meanwhile
      lock.unlock();
      std::free(block);
      return Allocate(size, ptr);
    }
  }
  blocks_.emplace(reinterpret_cast<uintptr_t>(block), Live{rounded, capacity});
  in_use_ += rounded;
  if (in_use_ > peak_) peak_ = in_use_;
  if (in_use_ > high_water_) high_water_ = in_use_;
  ++total_allocs_;
  *ptr = block;
  return NPURT_SUCCESS;
}

npurtError MemoryPool::Free(void* ptr) {
  if (ptr == nullptr) return NPURT_SUCCESS;
  Fence fence = QueuedWork();  // before taking mu_: it locks the devices' stream lists
  std::vector<void*> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) {
      return Fail(NPURT_ERROR_BAD_ADDRESS,
                  Format("NPU:%d: npurtFree(%p): not the start of a live allocation of this "
                         "device", device_, ptr));
    }
    in_use_ -= it->second.size;
    if (it->second.variable_holders > 0) variable_bytes_ -= it->second.size;
    const uint64_t age = next_age_++;
    by_age_.emplace(age, cache_.emplace(it->second.capacity, Cached{ptr, age, std::move(fence)}));
    cached_ += it->second.capacity;
    blocks_.erase(it);
    dropped = TrimLocked(0);
  }
  for (void* b : dropped) release_(b);
  return NPURT_SUCCESS;
}

std::map<uintptr_t, MemoryPool::Live>::iterator MemoryPool::FindLocked(const void* ptr) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.upper_bound(start);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  return start - it->first < it->second.size ? it : blocks_.end();
}

npurtError MemoryPool::MarkVariable(const void* ptr, const void* replaced, uint64_t limit,
                                    uint64_t* block_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = FindLocked(ptr);
  if (it == blocks_.end()) {
    return Fail(NPURT_ERROR_BAD_ADDRESS,
                Format("NPU:%d: %p is not inside a live allocation of this device", device_, ptr));
  }
  Live& block = it->second;
  if (block_bytes != nullptr) *block_bytes = block.size;
  auto old = replaced != nullptr ? FindLocked(replaced) : blocks_.end();
  if (old != blocks_.end() && old->second.variable_holders == 0) old = blocks_.end();
  if (old == it) return NPURT_SUCCESS;   // the variable keeps its block
  uint64_t bytes = variable_bytes_;      // what the variables hold once the switch is made
  if (old != blocks_.end() && old->second.variable_holders == 1) bytes -= old->second.size;
  if (block.variable_holders == 0) {
    if (limit != 0 && bytes + block.size > limit) {
      return Fail(NPURT_ERROR_OUT_OF_MEMORY,
                  Format("NPU:%d variable memory exhausted: this variable's value takes %llu "
                         "bytes and the other variables hold %llu bytes, %llu in all, more than "
                         "variable_memory_max_size = %llu bytes",
                         device_, (unsigned long long)block.size, (unsigned long long)bytes,
                         (unsigned long long)(bytes + block.size), (unsigned long long)limit));
    }
    bytes += block.size;
  }
  ++block.variable_holders;
  if (old != blocks_.end()) --old->second.variable_holders;
  variable_bytes_ = bytes;
  return NPURT_SUCCESS;
}

bool MemoryPool::Contains(const void* ptr, uint64_t size) const {
  const uintptr_t start = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(start);
  if (it == blocks_.begin()) return false;
  --it;
  const uint64_t offset = start - it->first;
  return offset <= it->second.size && size <= it->second.size - offset;
}

npurtMemStats MemoryPool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {in_use_, peak_, capacity_, blocks_.size(), total_allocs_, cached_, variable_bytes_};
}

void MemoryPool::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}

uint64_t MemoryPool::CachedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace npurt_sim
