// The graph engine's table of NPU ops (graph_engine/ops/supported_ops.json), as kernel
// registrations for the plugin.
#ifndef TF_PLUGIN_CC_SUPPORTED_OPS_H_
#define TF_PLUGIN_CC_SUPPORTED_OPS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/types.pb.h"

namespace npu_tf {

// One NPU kernel to register: the op, the dtypes each type attr may take, and its host-memory
// (compile-time constant) arguments.
struct KernelSpec {
  std::string op;
  std::map<std::string, std::vector<tensorflow::DataType>> type_constraints;
  std::vector<std::string> host_memory;
};

// Reads the table and turns every op into kernel specs, leaving out the dtype combinations
// TensorFlow already serves with its own DEVICE_DEFAULT kernels (a second kernel would take
// precedence over TF's host-side shape arithmetic for no gain). `source` gets the file's path.
// The file is found next to the plugin (in-tree: npu_device/_lib/../../graph_engine/ops/,
// installed: tensorflow-plugins/../graph_engine/ops/) or at $NPU_SUPPORTED_OPS.
absl::Status LoadKernelSpecs(std::vector<KernelSpec>* specs, std::string* source);

}  // namespace npu_tf

#endif  // TF_PLUGIN_CC_SUPPORTED_OPS_H_
