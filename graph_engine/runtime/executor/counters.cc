#include "executor/counters.h"

#include <atomic>

#include "npurt/npurt.h"

namespace npu {
namespace {

std::atomic<uint64_t> g_loaded{0}, g_run{0}, g_kernels{0}, g_reused{0}, g_concurrent{0}, g_kept{0};

}  // namespace

void CountModelLoaded() { g_loaded.fetch_add(1, std::memory_order_relaxed); }
void CountKernelsExecuted(uint64_t n) { g_kernels.fetch_add(n, std::memory_order_relaxed); }
void CountModelRun() { g_run.fetch_add(1, std::memory_order_relaxed); }
void CountConversionsReused(uint64_t n) { g_reused.fetch_add(n, std::memory_order_relaxed); }
void CountKernelsConcurrent(uint64_t n) { g_concurrent.fetch_add(n, std::memory_order_relaxed); }
void CountWeightsKept(uint64_t n) { g_kept.fetch_add(n, std::memory_order_relaxed); }

}  // namespace npu

extern "C" {

void npurtGetCounters(npurtCounters* counters) {
  if (counters == nullptr) return;
  counters->models_loaded = npu::g_loaded.load(std::memory_order_relaxed);
  counters->models_run = npu::g_run.load(std::memory_order_relaxed);
  counters->kernels_executed = npu::g_kernels.load(std::memory_order_relaxed);
  counters->conversions_reused = npu::g_reused.load(std::memory_order_relaxed);
  counters->kernels_run_concurrently = npu::g_concurrent.load(std::memory_order_relaxed);
  counters->weights_kept = npu::g_kept.load(std::memory_order_relaxed);
}

void npurtResetCounters(void) {
  npu::g_loaded.store(0);
  npu::g_run.store(0);
  npu::g_kernels.store(0);
  npu::g_reused.store(0);
  npu::g_concurrent.store(0);
  npu::g_kept.store(0);
}

}  // extern "C"
