// The pool of host threads the simulated NPU computes with (one per CPU core).
//
// ParallelFor splits [0, n) into contiguous ranges and runs them on the pool and on the calling
// thread. Several callers (one per stream) may use it at once; a call made from inside a
// range runs inline, so kernels can use helpers that are themselves parallel.
//
// Deterministic mode (compile option `deterministic`, attr `_deterministic` on a kernel; the
// executor opens a DeterministicScope around it): every partition a kernel makes is planned for
// kDeterministicThreads threads instead of the machine's, and ParallelFor cuts its ranges for
// that many too (running them in turn when the pool has one thread). Ranges, partial sums and
// their combination order then depend on the problem only, so results are bit-identical
// whatever NPU_NUM_THREADS is; the work is still spread over the real threads.
#ifndef NPU_KERNELS_THREAD_POOL_H_
#define NPU_KERNELS_THREAD_POOL_H_

#include <cstdint>
#include <functional>

namespace npu {
namespace kernels {

// Denormal floats are flushed to zero (inputs and results: MXCSR's DAZ and FTZ) on the calling
// thread while the scope lives, and always on the pool's threads: TF's CPU kernels compute so
// (tsl's ScopedFlushDenormal), and the NPU's results must be TF's.
class FlushDenormalsScope {
 public:
  FlushDenormalsScope();
  ~FlushDenormalsScope();
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  unsigned saved_;
};

int NumThreads();   // threads that compute, the caller included

// The thread count a kernel plans its partitions (row blocks, split sums ...) for: NumThreads(),
// or kDeterministicThreads inside a DeterministicScope. Use it for every such decision.
constexpr int kDeterministicThreads = 8;
int PlanThreads();
bool Deterministic();   // inside a DeterministicScope on this thread

// Deterministic mode for the calling thread while it lives (and for the ranges it hands to the
// pool); `on` = false leaves the mode as it is.
class DeterministicScope {
 public:
  explicit DeterministicScope(bool on);
  ~DeterministicScope();
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool saved_;
};

// `cost_per_item` is a rough count of scalar operations per index; small loops run inline.
void ParallelFor(int64_t n, int64_t cost_per_item,
                 const std::function<void(int64_t begin, int64_t end)>& fn);

// Runs task(0) .. task(n - 1), each once, on the caller and on idle pool threads at the same
// time; returns when all ran. Tasks the caller runs may use the pool (their ParallelFor calls
// split as usual); a pool thread runs its task's ParallelFor ranges in turn, cut as on the
// caller, so a task's results do not depend on the thread that took it. Called from inside a
// range or a task, or with one thread, the tasks run in turn on the caller.
void RunConcurrently(int64_t n, const std::function<void(int64_t)>& task);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_THREAD_POOL_H_
