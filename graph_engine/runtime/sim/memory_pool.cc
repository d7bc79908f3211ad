#include "sim/memory_pool.h"

#include <cstdlib>

#include "sim/errors.h"

namespace npurt_sim {

MemoryPool::~MemoryPool() {
  for (const auto& block : blocks_) std::free(reinterpret_cast<void*>(block.first));
}

npurtError MemoryPool::Allocate(uint64_t size, void** ptr) {
  if (ptr == nullptr) return Fail(NPURT_ERROR_INVALID_PARAM, "npurtMalloc: ptr is null");
  *ptr = nullptr;
  if (size == 0) return NPURT_SUCCESS;  // like malloc(0): nothing to account, free(nullptr) is ok
  const uint64_t align = NPURT_MEMORY_ALIGNMENT;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t free_bytes = capacity_ - in_use_;
  // size <= free_bytes <= capacity (at most 1 TiB) keeps the rounding from overflowing.
  const uint64_t rounded = size > free_bytes ? 0 : (size + align - 1) / align * align;
  if (size > free_bytes || rounded > free_bytes) {
    return Fail(NPURT_ERROR_OUT_OF_MEMORY,
                Format("NPU:%d out of memory: requested %llu bytes, %llu free of %llu", device_,
                       (unsigned long long)size, (unsigned long long)free_bytes,
                       (unsigned long long)capacity_));
  }
  void* block = std::aligned_alloc(align, rounded);
  if (block == nullptr) {
    return Fail(NPURT_ERROR_OUT_OF_MEMORY,
                Format("NPU:%d out of memory: the host could not provide %llu bytes (the "
                       "simulated NPU's memory lives in host RAM)",
                       device_, (unsigned long long)rounded));
  }
  blocks_.emplace(reinterpret_cast<uintptr_t>(block), rounded);
  in_use_ += rounded;
  if (in_use_ > peak_) peak_ = in_use_;
  ++total_allocs_;
  *ptr = block;
  return NPURT_SUCCESS;
}

npurtError MemoryPool::Free(void* ptr) {
  if (ptr == nullptr) return NPURT_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) {
      return Fail(NPURT_ERROR_BAD_ADDRESS,
                  Format("NPU:%d: npurtFree(%p): not the start of a live allocation of this "
                         "device", device_, ptr));
    }
    in_use_ -= it->second;
    blocks_.erase(it);
  }
  release_(ptr);
  return NPURT_SUCCESS;
}

bool MemoryPool::Contains(const void* ptr, uint64_t size) const {
  const uintptr_t start = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(start);
  if (it == blocks_.begin()) return false;
  --it;
  const uint64_t offset = start - it->first;
  return offset <= it->second && size <= it->second - offset;
}

npurtMemStats MemoryPool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {in_use_, peak_, capacity_, blocks_.size(), total_allocs_};
}

void MemoryPool::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}

}  // namespace npurt_sim
