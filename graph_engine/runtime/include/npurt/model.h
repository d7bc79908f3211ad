// A compiled model (docs/compiled_model_format.md) loaded onto one device, and its executor.
#ifndef NPURT_MODEL_H_
#define NPURT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "npurt/npurt.h"

namespace npu {

// An error carries a message that names the node and the reason; ok() when message is empty.
// `code` is the TensorFlow error code (tensorflow/core/protobuf/error_codes.proto) the plugin
// raises for it where the class matters to the program (integer division by zero is TF's
// InvalidArgumentError, device memory exhaustion its ResourceExhaustedError); 0 leaves it to
// the caller (INTERNAL).
struct Status {
  std::string message;
  int code = 0;
  bool ok() const { return message.empty(); }
  static Status Ok() { return {}; }
  static Status Error(std::string m, int code = 0) {
    return {m.empty() ? "unknown error" : std::move(m), code};
  }
};
enum StatusCode : int {
  kCodeInvalidArgument = 3, kCodeResourceExhausted = 8, kCodeOutOfRange = 11, kCodeInternal = 13
};

struct TensorDesc {
  int dtype = 0;                // TF DataType enum value (DT_FLOAT = 1, ...)
  std::vector<int64_t> dims;
  int format = 0;               // graph_engine Format enum, 0 = ND
  uint64_t nbytes = 0;
};

// Exported from libnpu_runtime (built with hidden visibility) for the plugin and Python.
class NPURT_API CompiledModel {
 public:
  virtual ~CompiledModel() = default;
  // Parses and validates `data` (magic, version, checksum), instantiates every kernel and
  // uploads constants to `device`'s memory.
  static Status Load(const void* data, size_t size, int32_t device,
                     std::shared_ptr<CompiledModel>* out);

  virtual const std::string& name() const = 0;
  virtual const std::vector<TensorDesc>& inputs() const = 0;
  virtual const std::vector<TensorDesc>& outputs() const = 0;
  virtual const std::string& metadata() const = 0;   // JSON written by the compiler
  virtual std::vector<std::string> kernel_names() const = 0;
  virtual uint64_t arena_bytes() const = 0;

  // A caller's promise that an input buffer's bytes do not change while this lives (TF: a
  // reference to the tensor, since TF's writers copy a buffer a reader shares before writing).
  using InputOwner = std::shared_ptr<const void>;

  // Per output: the input whose buffer a caller may pass as this output's (the kernel writing
  // it is that input's last reader and reads it element by element), or -1. A variable the
  // model updates can so be written in place.
  virtual const std::vector<int32_t>& output_over_input() const = 0;

  // Inputs the model converts into CACHED values (weights into the NPU's formats), ascending.
  virtual const std::vector<uint32_t>& cached_inputs() const = 0;
  // Inputs a kernel keeps its own form of while they hold (a MatMul's packed weight) and no
  // output is written over, ascending. An owner for one from the second run with the same
  // buffer on lets the kernel reuse that form; it also keeps the caller from updating the
  // weight in place (TF copies a shared buffer first), so give one only where the same weights
  // come back run after run (a graph's inference), not to a model many callers share.
  virtual const std::vector<uint32_t>& packed_inputs() const = 0;

  // The groups of kernel steps (indices into kernel_names()) that runs execute at once: empty
  // until the runs that time the steps are done (compiled_model.cc says how they are chosen).
  virtual std::vector<std::vector<uint32_t>> concurrent_groups() const = 0;

  // Runs the kernel sequence on `stream` (in order with earlier work on it) and waits for it.
  // Buffers are device pointers of the model's device; outputs are caller-allocated with
  // outputs()[i].nbytes, distinct from the inputs' except as output_over_input() allows. Safe to call concurrently from several threads (runs of a model with
  // cached values take turns). `owners`, if given, has one entry per input (null: no promise):
  // a conversion into a CACHED value is skipped when every input it reads has an owner and the
  // buffer of the last successful run, whose owners the model keeps.
  virtual Status Run(npurtStream stream, const std::vector<const void*>& inputs,
                     const std::vector<void*>& outputs,
                     const std::vector<InputOwner>* owners) = 0;
  Status Run(npurtStream stream, const std::vector<const void*>& inputs,
             const std::vector<void*>& outputs) {
    return Run(stream, inputs, outputs, nullptr);
  }
};

// Names of the kernels this runtime implements (TF op types and GE kernels), sorted.
NPURT_API std::vector<std::string> RegisteredKernels();

}  // namespace npu

#endif  // NPURT_MODEL_H_
