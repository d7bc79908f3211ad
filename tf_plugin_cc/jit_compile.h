// tf.function(jit_compile=True) on the NPU (jit_compile.cc).
#ifndef TF_PLUGIN_CC_JIT_COMPILE_H_
#define TF_PLUGIN_CC_JIT_COMPILE_H_

namespace npu_tf {

// Makes functions that must be XLA-compiled (attr _XlaMustCompile) run through the NPU graph
// engine when TensorFlow places them on the NPU; elsewhere XLA compiles them as before.
// Idempotent; called once the plugin is loaded (TF_InitGraph).
void InstallJitCompileRedirect();

}  // namespace npu_tf

#endif  // TF_PLUGIN_CC_JIT_COMPILE_H_
