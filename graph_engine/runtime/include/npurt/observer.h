// Observing compiled-model runs: the one per-kernel hook that tensor dumps, the Chrome-trace
// profiler and the TensorFlow profiler plugin all use (docs/debugging.md).
//
// An Observer registered with AddObserver is asked, at the start of every model run, whether it
// wants to watch that run (Observer::BeginRun returns a RunObserver, or nullptr). A RunObserver
// then sees each kernel step before and after it computes, on the thread that executes the run,
// and the end of the run. With no observer registered, the executor pays one relaxed atomic load
// per run and runs its plain loop.
//
// Rules for observers:
//  * Hooks run on the thread that runs the model (the stream's worker, or the caller when the
//    stream was idle: npurtRunHostFunc) in the middle of a run: keep them short, never
//    enqueue work on that stream and wait for it (deadlock), never throw (an exception is caught
//    and logged once, and the run carries on).
//  * Operand pointers are device addresses valid only during the hook. Inputs are read in
//    BeforeKernel: a kernel may write its output in place over an input.
//  * A RunObserver lives for one run. An Observer removed with RemoveObserver may still get
//    hooks from runs that started before the removal (they hold a reference to it).
//
// Timestamps are CLOCK_REALTIME nanoseconds (ObserverClockNs), the clock TensorFlow's profiler
// uses, so NPU events line up with TensorFlow's host events.
#ifndef NPURT_OBSERVER_H_
#define NPURT_OBSERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "npurt/model.h"

namespace npu {

// One kernel step of a loaded model, as the compiled model describes it.
struct ObservedStep {
  std::string kernel;                       // kernel name: TF op type or GE kernel (TransData ...)
  std::string node;                         // the graph node it came from
  std::vector<uint32_t> inputs, outputs;    // value ids (ModelInfo::values)
};

// What an observer knows of a loaded model; built once at load, immutable afterwards.
struct ModelInfo {
  uint64_t uid = 0;                  // process-unique, in load order (names repeat: one cluster
                                     // compiles once per input signature)
  std::string name;                  // the compiled model's name (the NPU cluster or eager op)
  int32_t device = 0;
  std::string metadata;              // the compiler's JSON
  std::vector<TensorDesc> values;    // by value id: dtype, logical dims, storage format, bytes
  std::vector<uint32_t> inputs, outputs;   // model inputs / outputs (value ids)
  std::vector<ObservedStep> steps;
};

// One run of a model.
struct RunInfo {
  const ModelInfo* model;
  uint64_t step;        // how many runs of this loaded model came before this one (0, 1, ...)
  const void* stream;   // the npurtStream it runs on (identifies the queue, never dereference)
  int64_t start_ns;
  const std::vector<void*>* values;   // device address of every value (ModelInfo::values ids)
};

// One kernel step of a run.
struct KernelView {
  const RunInfo* run;
  uint32_t index;                 // into ModelInfo::steps
  const ObservedStep* step;
  const void* const* inputs;      // device addresses, step->inputs order
  void* const* outputs;
  const TensorDesc& input_desc(size_t i) const { return run->model->values[step->inputs[i]]; }
  const TensorDesc& output_desc(size_t i) const { return run->model->values[step->outputs[i]]; }
};

struct KernelResult {
  int64_t start_ns, end_ns;
  uint32_t float_status;   // float-status bits this kernel raised (NPU_STATUS_OVERFLOW 1,
                           // NPU_STATUS_NAN 2); 0 unless some RunObserver watches it
  const Status* status;    // the kernel's result; after a failure the run stops
};

class NPURT_API RunObserver {
 public:
  virtual ~RunObserver();
  // Whether this run should attribute float-status bits (fp16 overflow, NaN) to kernels.
  virtual bool WatchFloatStatus() const { return false; }
  virtual void BeforeKernel(const KernelView&) {}
  virtual void AfterKernel(const KernelView&, const KernelResult&) {}
  virtual void EndRun(const RunInfo&, int64_t end_ns, const Status& status) {}
};

class NPURT_API Observer {
 public:
  virtual ~Observer();
  // nullptr: this run is not watched by this observer.
  virtual std::unique_ptr<RunObserver> BeginRun(const RunInfo& run) = 0;
};

NPURT_API void AddObserver(std::shared_ptr<Observer> observer);
// Returns false when `observer` was not registered.
NPURT_API bool RemoveObserver(const Observer* observer);
NPURT_API int64_t ObserverClockNs();

}  // namespace npu

// --- options of the runtime's own observers (Python pushes them through ctypes) -------------
// Each returns 0, or -1 with the reason in `error` (capacity `error_size`, NUL-terminated).
extern "C" {
// Tensor dumps (options enable_dump, dump_path, dump_step, dump_mode). path NULL or "": off.
// steps: "" for every step, else "0|5|10-20". mode: "input", "output" or "all".
NPURT_API int npurtSetDump(const char* path, const char* steps, const char* mode, char* error,
                           size_t error_size);
// Chrome-trace profiling (options enable_profiling, profiling_dir). dir NULL or "": off (the
// file is completed). Writes <dir>/npu_profile_<pid>.json.
NPURT_API int npurtSetProfiling(const char* dir, char* error, size_t error_size);
// Writes buffered trace events now (the file is valid JSON after every flush).
NPURT_API void npurtFlushProfiling(void);
// The trace file being written ("" when none); valid until the next npurtSetProfiling.
NPURT_API const char* npurtProfilingFile(void);
}

#endif  // NPURT_OBSERVER_H_
