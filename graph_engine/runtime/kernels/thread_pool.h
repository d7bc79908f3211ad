// The pool of host threads the simulated NPU computes with (one per CPU core).
//
// ParallelFor splits [0, n) into contiguous ranges and runs them on the pool and on the calling
// thread. Several callers (one per stream) may use it at once; a call made from inside a
// range runs inline, so kernels can use helpers that are themselves parallel.
#ifndef NPU_KERNELS_THREAD_POOL_H_
#define NPU_KERNELS_THREAD_POOL_H_

#include <cstdint>
#include <functional>

namespace npu {
namespace kernels {

int NumThreads();   // threads that compute, the caller included

// `cost_per_item` is a rough count of scalar operations per index; small loops run inline.
void ParallelFor(int64_t n, int64_t cost_per_item,
                 const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_THREAD_POOL_H_
