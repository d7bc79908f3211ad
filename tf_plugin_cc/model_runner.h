// What the NPU kernels share: compiling a request once per key, and running the compiled model
// on the kernel's device with TF tensors.
#ifndef TF_PLUGIN_CC_MODEL_RUNNER_H_
#define TF_PLUGIN_CC_MODEL_RUNNER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "npurt/model.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace npu_tf {

// Process-wide compile counters (npu_device.compile_stats()).
struct CompileStats {
  uint64_t compiles = 0, compile_failures = 0, cache_hits = 0, evictions = 0, fallback_runs = 0;
  uint64_t disk_cache_hits = 0;  // models the compiler hook loaded from its disk cache
  double compile_seconds = 0;
  double load_seconds = 0;       // loading compiled (or disk-cached) models onto the device
};

// Waits for the work TF queued on the kernel's NPU stream, so the host sees device memory as the
// stream leaves it (before host code reads or writes it directly).
absl::Status SyncComputeStream(tensorflow::OpKernelContext* ctx);

// Counts one run of a cluster on CPU instead of the NPU.
void CountFallbackRun();

// Whether a compile failure other than the program's own invalid input runs the cluster or op
// on CPU (option cpu_fallback, default on) instead of failing the step.
bool FallsBackToCpu(const absl::Status& compile_status);

// The model compiled for `key` and loaded on `device`, compiling `request()` (a NodeDef) on
// first use.
// Process-wide, thread-safe and bounded (LRU): concurrent first calls of one key compile once.
absl::Status GetModel(const std::string& key, int device,
                      const std::function<tensorflow::NodeDef()>& request,
                      std::shared_ptr<npu::CompiledModel>* model);

// What GetModel would give for `key` without compiling: true with the cached model or the
// remembered compile failure in `status`; false when the key has neither yet (never compiled,
// or compiling on another thread now). `count_hit`: whether a find counts as a cache hit.
bool FindModel(const std::string& key, int device, bool count_hit, absl::Status* status,
               std::shared_ptr<npu::CompiledModel>* model);

// Appends the attr `_input_shapes` (list(shape)) the compiler needs.
void SetInputShapes(const std::vector<const tensorflow::Tensor*>& inputs,
                    tensorflow::NodeDef* node);

// A deterministic key for the op and its public attrs (internal "_" attrs are dropped: the
// compiler ignores them too).
std::string AttrKey(const tensorflow::NodeDef& node);

// Counts changes of the compile options (NpuPluginOptionsChanged, called from Python). Keys of
// models compiled with the options of the moment (eager ops) include it; clusters carry their
// options in the node instead.
uint64_t OptionsGeneration();

// Appends dtype and shape of each tensor to `key`.
void AppendSignature(const std::vector<const tensorflow::Tensor*>& tensors, std::string* key);

// Whether the kernel's input `i` is in host memory. A variable's handle stands for the
// variable's value (NpuGraphOp `variables`: float types), which is in device memory.
bool InputInHostMemory(tensorflow::OpKernelContext* ctx, int i);

// Runs `model` with `inputs` (device memory) and fills the kernel's outputs. Outputs the kernel
// declares in host memory go through a device buffer and are copied back. `write_over`, if
// given, has per output the input whose buffer becomes that output (-1: a new buffer); the
// model must allow each (CompiledModel::output_over_input) and the caller own the buffer.
// `packed`: also vouch for the inputs the model keeps packed (a graph's NpuGraphOp, whose
// weights come back run after run; not an eager op's model, which its op's callers share).
absl::Status RunModel(tensorflow::OpKernelContext* ctx, npu::CompiledModel& model,
                      const std::vector<const tensorflow::Tensor*>& inputs,
                      const std::vector<int>* write_over = nullptr, bool packed = false);

// The NPU index of the kernel's device ("/device:NPU:1" -> 1).
int DeviceIndex(tensorflow::DeviceBase* device);

}  // namespace npu_tf

#endif  // TF_PLUGIN_CC_MODEL_RUNNER_H_
