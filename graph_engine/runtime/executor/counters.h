// Process-wide execution counters behind npurtGetCounters (what the executor really ran).
#ifndef NPU_EXECUTOR_COUNTERS_H_
#define NPU_EXECUTOR_COUNTERS_H_

#include <cstdint>

namespace npu {

void CountModelLoaded();                  // a CompiledModel::Load succeeded
void CountKernelsExecuted(uint64_t n);    // kernels that completed, whether or not the run did
void CountModelRun();                     // a Run completed without error
void CountConversionsReused(uint64_t n);  // cached steps a Run skipped (their values were valid)
void CountKernelsConcurrent(uint64_t n);  // of the kernels executed, those run beside others
void CountWeightsKept(uint64_t n);        // kernel reads of an unchanged input it keeps a form of

}  // namespace npu

#endif  // NPU_EXECUTOR_COUNTERS_H_
