#include "cpu_fallback.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "npurt/npurt.h"
#include "tensorflow/core/common_runtime/process_function_library_runtime.h"
#include "tensorflow/core/framework/allocator.h"
#include "tensorflow/core/framework/graph_to_functiondef.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/framework/device.h"

namespace npu_tf {

using tensorflow::Tensor;

CpuFallback::CpuFallback(std::string name, tensorflow::GraphDef body)
    : name_(std::move(name)), body_(std::move(body)) {}

CpuFallback::~CpuFallback() {
  if (cpu_ != nullptr && handle_ != tensorflow::kInvalidHandle) {
    cpu_->ReleaseHandle(handle_).IgnoreError();
  }
}

absl::Status CpuFallback::Instantiate(tensorflow::OpKernelContext* ctx) {
  tensorflow::FunctionLibraryRuntime* flr = ctx->function_library();
  if (flr == nullptr) return absl::InternalError("the NPU kernel has no function library");
  tensorflow::Graph graph(tensorflow::OpRegistry::Global());
  tensorflow::GraphConstructorOptions options;
  options.allow_internal_ops = true;
  TF_RETURN_IF_ERROR(tensorflow::ConvertGraphDefToGraph(options, body_, &graph));
  tensorflow::FunctionDef fdef;
  const std::string fname = absl::StrCat("__npu_cpu_fallback_", name_);
  TF_RETURN_IF_ERROR(tensorflow::GraphToFunctionDef(graph, fname, &fdef));
  tensorflow::FunctionLibraryRuntime* clone = nullptr;
  TF_RETURN_IF_ERROR(flr->Clone(&lib_, &pflr_, &clone));
  if (!lib_->Contains(fname)) TF_RETURN_IF_ERROR(lib_->AddFunctionDef(fdef));
  // The host CPU of the NPU's task: "/job:localhost/replica:0/task:0/device:NPU:1" -> "...CPU:0".
  std::string cpu = ctx->device()->name();
  cpu = absl::StrCat(cpu.substr(0, cpu.rfind("/device:")), "/device:CPU:0");
  cpu_ = pflr_->GetFLR(cpu);
  if (cpu_ == nullptr) return absl::InternalError(absl::StrCat("no CPU device ", cpu));
  tensorflow::FunctionLibraryRuntime::InstantiateOptions inst;
  inst.target = cpu;
  return cpu_->Instantiate(fname, tensorflow::AttrSlice(), inst, &handle_);
}

absl::Status CpuFallback::Run(tensorflow::OpKernelContext* ctx,
                              const std::vector<const Tensor*>& inputs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle_ == tensorflow::kInvalidHandle && instantiated_.ok()) {
      instantiated_ = Instantiate(ctx);
    }
  }
  if (!instantiated_.ok()) {
    return absl::Status(instantiated_.code(), absl::StrCat("running the cluster on CPU: ",
                                                           instantiated_.message()));
  }
  // Device values may still be written by work queued on the NPU: wait for it, then read them
  // into host tensors (the CPU kernels must not touch device memory).
  TF_RETURN_IF_ERROR(SyncComputeStream(ctx));
  std::vector<Tensor> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *inputs[i];
    if (InputInHostMemory(ctx, static_cast<int>(i)) || !tensorflow::DataTypeCanUseMemcpy(t.dtype())) {
      args.push_back(t);
      continue;
    }
    Tensor host(tensorflow::cpu_allocator(), t.dtype(), t.shape());
    if (t.TotalBytes() > 0 &&
        npurtMemcpy(host.data(), t.data(), t.TotalBytes(), NPURT_MEMCPY_DEVICE_TO_HOST) !=
            NPURT_SUCCESS) {
      return absl::InternalError(absl::StrCat("copying an input to the CPU: ",
                                              npurtGetLastErrorMessage()));
    }
    args.push_back(std::move(host));
  }
  // Run every kernel inline on this thread: the op already holds one of TF's inter-op threads,
  // and waiting for others from the same small pool could deadlock.
  std::function<void(std::function<void()>)> inline_runner = [](std::function<void()> f) { f(); };
  tensorflow::FunctionLibraryRuntime::Options opts;
  opts.runner = &inline_runner;
  opts.run_all_kernels_inline = true;
  opts.create_rendezvous = true;
  opts.cancellation_manager = ctx->cancellation_manager();
  std::vector<Tensor> rets;
  TF_RETURN_IF_ERROR(cpu_->RunSync(opts, handle_, args, &rets));
  if (rets.size() != static_cast<size_t>(ctx->num_outputs())) {
    return absl::InternalError(absl::StrCat("the CPU copy of the cluster returned ", rets.size(),
                                            " values, the op has ", ctx->num_outputs()));
  }
  for (int i = 0; i < ctx->num_outputs(); ++i) {
    const Tensor& r = rets[i];
    if (ctx->output_memory_type(i) == tensorflow::HOST_MEMORY ||
        !tensorflow::DataTypeCanUseMemcpy(r.dtype())) {
      ctx->set_output(i, r);
      continue;
    }
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(i, r.shape(), &out));
    if (r.TotalBytes() > 0 &&
        npurtMemcpy(out->data(), r.data(), r.TotalBytes(), NPURT_MEMCPY_HOST_TO_DEVICE) !=
            NPURT_SUCCESS) {
      return absl::InternalError(absl::StrCat("copying a CPU result to the NPU: ",
                                              npurtGetLastErrorMessage()));
    }
  }
  return absl::OkStatus();
}

}  // namespace npu_tf
