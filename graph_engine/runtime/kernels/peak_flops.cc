// The CPU's peak FP32 multiply-add rate on the NPU's threads: the roof that the benchmarks
// (benchmarks/roofline.py) hold the GEMM kernel against. Not used by any kernel.
//
// Every thread of the pool runs a loop of fused multiply-adds on registers alone (no loads or
// stores), on kChains independent accumulators: enough to hide the FMA latency on every port
// of current x86 cores (4-5 cycles x 2 ports = 8-10 in flight), so the loop is bound by FMA
// throughput only. acc = acc * a + b with 0 < a < 1 converges to b / (1 - a): no overflow, no
// denormals. Measured, not taken from a datasheet: a shared or throttled core, SMT siblings and
// AVX-512 that runs as two 256-bit halves (AMD Zen 4) all show in the number.
#include <immintrin.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/thread_pool.h"
#include "npurt/npurt.h"

namespace npu {
namespace kernels {
namespace {

constexpr int kChains = 12;

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// The loops return their sum so that the compiler must compute them.
__attribute__((target("avx512f"))) float FmaLoop512(int64_t iterations) {
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(1e-4f);
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  return _mm512_reduce_add_ps(acc[0]);
}

float FmaLoop256(int64_t iterations) {   // the build's baseline: AVX2 + FMA
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(1e-4f);
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc[0]);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

}  // namespace
}  // namespace kernels
}  // namespace npu

// One timing of the loop, `iterations` trips, on every NPU thread at once, for isa "avx512"
// (512-bit vectors) or "avx2" (256-bit). Returns the FLOP/s of all threads together by wall
// clock (a multiply-add counts 2), or 0 when the CPU lacks the instruction set or the name is
// unknown. Per range (one per NPU thread, at most `capacity`; *count of them): rates[i] = its
// FLOP/s over the CPU time its thread spent in it (unlike the wall clock, this leaves out time
// the OS gave the core to other processes; a range the caller took over from a sleeping worker
// still reads one core's rate). Callers repeat timings and keep the best.
extern "C" NPURT_API double npuPeakFlops(const char* isa, int64_t iterations, double* rates,
                                         int capacity, int* count) {
  using namespace npu::kernels;
  *count = 0;
  const bool wide = std::strcmp(isa, "avx512") == 0;
  if (!wide && std::strcmp(isa, "avx2") != 0) return 0;
  if (wide ? !__builtin_cpu_supports("avx512f")
           : !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    return 0;
  const int ranges = std::min(NumThreads(), capacity);
  const double flops = 2.0 * (wide ? 16 : 8) * kChains * static_cast<double>(iterations);
  std::vector<float> sums(ranges);
  const auto start = std::chrono::steady_clock::now();
  // One range per thread; the cost hint only has to be large enough to be parallel.
  ParallelFor(ranges, int64_t{1} << 40, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const double cpu0 = ThreadCpuSeconds();
      sums[r] = wide ? FmaLoop512(iterations) : FmaLoop256(iterations);
      rates[r] = flops / std::max(ThreadCpuSeconds() - cpu0, 1e-9);
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float sink = 0;   // keeps the loops' results alive
  for (float s : sums) sink = sink + s;
  *count = ranges;
  return flops * ranges / seconds;
}
