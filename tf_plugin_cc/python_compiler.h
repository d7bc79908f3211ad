// The plugin's one way to reach the graph-engine compiler: Python code (npu_device's
// compiler_bridge.py, the other end of this call) registered behind npurtSetCompiler.
#ifndef TF_PLUGIN_CC_PYTHON_COMPILER_H_
#define TF_PLUGIN_CC_PYTHON_COMPILER_H_

#include <string>

#include "absl/status/status.h"
#include "npurt/compiler_hook.h"

namespace npu_tf {

// Sends `request` to the registered compiler and stores its answer in `response`.
// When nothing is registered yet (TensorFlow auto-loaded the plugin and nobody imported
// npu_device), imports npu_device into this process's Python interpreter, which registers it.
// Errors carry the compiler's message; a process without Python gets an error saying so.
absl::Status Compile(npurtCompileKind kind, const std::string& request, std::string* response);

}  // namespace npu_tf

#endif  // TF_PLUGIN_CC_PYTHON_COMPILER_H_
