// tf.function(jit_compile=True) on the NPU: run through the graph engine, not XLA.
//
// TensorFlow decides per function call node whether XLA compiles it: a node with
// _XlaMustCompile=true (set by jit_compile=True on the function, or by eager execution of such
// a function) gets its kernel from the process's default CustomKernelCreator, which XLA
// registers (XlaKernelCreator, tensorflow/compiler/jit/xla_kernel_creator.cc). That kernel
// needs an XLA JIT device for the node's device type, and a PluggableDevice has none: every
// such call placed on the NPU failed with "No JIT device registered for NPU" -- in eager mode,
// inside another tf.function, and inside Keras (its grouped Conv2D runs through an inner
// jit_compile=True function on the TensorFlow backend).
//
// That creator is the one place where both eager and graph execution turn the request into an
// XLA kernel, so the plugin wraps it: a must-compile call whose function library runtime is an
// NPU device's becomes an ordinary StatefulPartitionedCall of the same function (the attribute
// dropped), which TensorFlow instantiates as a multi-device function -- placement, Grappler and
// so our partitioner, which hands its NPU ops to the graph engine like any tf.function's. Every
// other request (another device, no must-compile attribute) goes to XLA's creator unchanged.
// The first redirected call is reported once per process.
//
// TF's registry owns its creator and deletes the previous one on registration, so the wrapper
// cannot keep XLA's: it holds its own XlaKernelCreator (stateless, so the same thing), and is
// installed only where XLA's creator is the one registered.
#include "jit_compile.h"

#include <memory>
#include <mutex>
#include <string>
#include <typeinfo>

#include "absl/status/status.h"
#include "registration.h"
#include "tensorflow/compiler/jit/xla_kernel_creator.h"
#include "tensorflow/core/common_runtime/executor.h"
#include "tensorflow/core/common_runtime/function.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/device.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/node_properties.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/logging.h"

namespace npu_tf {
namespace {

using tensorflow::CustomKernelCreator;
using tensorflow::FunctionLibraryRuntime;
using tensorflow::NodeDef;
using tensorflow::NodeProperties;

constexpr char kXlaMustCompile[] = "_XlaMustCompile";   // tensorflow/compiler/jit/defs.h

bool MustCompile(const NodeDef& node) {
  auto it = node.attr().find(kXlaMustCompile);
  return it != node.attr().end() && it->second.b();
}

bool IsCallOp(const std::string& op) {
  return op == "PartitionedCall" || op == "StatefulPartitionedCall";
}

bool Redirected(const FunctionLibraryRuntime& flr, const NodeProperties& props) {
  return flr.device() != nullptr && flr.device()->device_type() == kNpuDeviceType &&
         MustCompile(props.node_def);
}

// The called function's name: the op of an eager call, attr f of a call node.
std::string FunctionName(const NodeDef& node) {
  if (IsCallOp(node.op())) {
    auto it = node.attr().find("f");
    if (it != node.attr().end()) return it->second.func().name();
  }
  return node.op();
}

void WarnOnce(const NodeDef& node, const std::string& device) {
  static std::once_flag once;
  std::call_once(once, [&] {
    LOG(WARNING) << "npu_device: function '" << FunctionName(node) << "' asks for XLA "
                 << "(tf.function(jit_compile=True), e.g. Keras' grouped Conv2D) and runs on "
                 << device << ". XLA has no NPU backend, so it runs through the NPU graph "
                 << "engine instead, like any tf.function on the NPU (place it on the CPU to "
                 << "keep XLA). Reported once; later such functions are handled the same way.";
  });
}

// The node as a call TensorFlow runs without XLA: _XlaMustCompile dropped, and an eager call
// of a function (op = the function's name) wrapped in a StatefulPartitionedCall, so that the
// function is instantiated as a multi-device function (with Grappler) rather than run op by op
// on the NPU by a single-device call.
absl::Status WithoutXla(const FunctionLibraryRuntime& flr, const NodeProperties& props,
                        std::shared_ptr<const NodeProperties>* out) {
  NodeDef call = props.node_def;
  call.mutable_attr()->erase(kXlaMustCompile);
  const auto* library = flr.GetFunctionLibraryDefinition();
  if (IsCallOp(call.op()) || library == nullptr || library->Find(call.op()) == nullptr) {
    *out = std::make_shared<NodeProperties>(props.op_def, std::move(call), props.input_types,
                                            props.output_types);
    return absl::OkStatus();
  }
  NodeDef wrapped;
  wrapped.set_name(call.name());
  wrapped.set_op("StatefulPartitionedCall");
  wrapped.set_device(call.device());
  *wrapped.mutable_input() = call.input();
  auto& attrs = *wrapped.mutable_attr();
  tensorflow::NameAttrList* f = attrs["f"].mutable_func();
  f->set_name(call.op());
  *f->mutable_attr() = call.attr();      // what the eager call instantiates the function with
  for (const char* name : {"config_proto", "executor_type"}) {
    auto it = call.attr().find(name);
    if (it != call.attr().end()) attrs[name] = it->second;
  }
  attrs["Tin"].mutable_list();           // present even when empty
  attrs["Tout"].mutable_list();
  for (tensorflow::DataType t : props.input_types) attrs["Tin"].mutable_list()->add_type(t);
  for (tensorflow::DataType t : props.output_types) attrs["Tout"].mutable_list()->add_type(t);
  const tensorflow::OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(tensorflow::OpRegistry::Global()->LookUpOpDef(wrapped.op(), &op_def));
  tensorflow::AddDefaultsToNodeDef(*op_def, &wrapped);
  *out = std::make_shared<NodeProperties>(op_def, std::move(wrapped), props.input_types,
                                          props.output_types);
  return absl::OkStatus();
}

class NpuJitRedirect : public CustomKernelCreator {
 public:
  bool CanCreateKernel(const FunctionLibraryRuntime& flr,
                       const std::shared_ptr<const NodeProperties>& props) const override {
    return Redirected(flr, *props) || xla_.CanCreateKernel(flr, props);
  }

  absl::Status CreateKernel(FunctionLibraryRuntime* flr,
                            const std::shared_ptr<const NodeProperties>& props,
                            std::unique_ptr<tensorflow::OpKernel>* kernel) const override {
    if (!Redirected(*flr, *props)) return xla_.CreateKernel(flr, props, kernel);
    std::shared_ptr<const NodeProperties> call;
    TF_RETURN_IF_ERROR(WithoutXla(*flr, *props, &call));
    WarnOnce(props->node_def, flr->device()->name());
    // TF's own kernel for the call (PartitionedCallOp), made as the function library runtime
    // makes the kernel of any primitive op (flr may be an overlay, which makes none itself).
    tensorflow::OpKernel* created = nullptr;
    TF_RETURN_IF_ERROR(tensorflow::CreateNonCachedKernel(flr->device(), flr, call,
                                                         flr->graph_def_version(), &created));
    kernel->reset(created);
    return absl::OkStatus();
  }

 private:
  tensorflow::XlaKernelCreator xla_;
};

}  // namespace

void InstallJitCompileRedirect() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CustomKernelCreator* current = tensorflow::GetDefaultCustomKernelCreator();
    if (current == nullptr) return;   // no XLA in this TensorFlow: nothing asks for it
    if (typeid(*current) != typeid(tensorflow::XlaKernelCreator)) {
      // Someone else's (another copy of this plugin's included): replacing it would delete it,
      // so it stays, and jit_compile=True on the NPU is up to it.
      LOG(WARNING) << "NPU plugin: the function kernel creator is not XLA's, so "
                      "tf.function(jit_compile=True) functions placed on the NPU are left to it";
      return;
    }
    // TF owns the creator from here (and deletes XLA's, which ours replaces).
    tensorflow::RegisterDefaultCustomKernelCreator(new NpuJitRedirect());
  });
}

}  // namespace npu_tf
