// NpuGraphOp: one cluster of a partitioned graph, run as one compiled model on the NPU.
//
// The graph engine's partitioner writes these nodes (attrs below); the kernel compiles the
// cluster for the input shapes it sees, once per signature, and runs it. Its models are cached
// under the cluster's identity, attr `cluster_key`, which the partitioner computed: the plugin
// hashes no cluster itself. Inputs come in three
// lists: `args`, the data; `host_args`, data TF keeps in host memory on devices like ours (int32,
// loop counters); and `values`, inputs whose contents the compiler needs (shapes, axes, range
// limits ... computed at run time): they live in host memory, and their contents join the
// signature and are compiled in as constants, the way XLA treats must-be-constant inputs.
// Outputs: `results`, and `host_results` in host memory (int32, control-flow predicates), so
// the loop-control ops that read them (Merge, Switch, LoopCond: host memory in TF) need no copy
// from the device and no event poll per iteration.
//
// NpuStatefulGraphOp (the same kernel) has one more input list, `variables`: handles of
// variables the cluster reads itself, because it computes their next value (result
// `variable_updates[i]`, which an AssignVariableOp then stores:
// graph_engine/compiler/partition/variables_in_place.py) or because nothing in the graph writes
// them (`variable_updates[i]` -1: an inference step's weights, read as ReadVariableOp would,
// without a TF op each). Each stands for the variable's value as the model's input; under the
// updated variables' locks, when nothing else shares such a variable's buffer (TF's
// copy-on-write test, as in AssignAddVariableOp) and the model allows it, the result is written
// over that buffer: an optimizer's update in place instead of into new memory. A signature's
// first call compiles without those locks, so the variables' other users never wait for a
// compile.
//
// A cluster that the engine cannot compile (anything but the program's own invalid input) runs
// its original TF ops on CPU instead (cpu_fallback.h); the compiler already said why, once.
#include "registration.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cpu_fallback.h"
#include "model_runner.h"
#include "variable_access.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_builder.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/tensor.pb.h"

namespace npu_tf {
namespace {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

class NpuGraphOp : public tensorflow::OpKernel {
 public:
  explicit NpuGraphOp(OpKernelConstruction* c) : OpKernel(c), device_(DeviceIndex(c->device())) {
    std::string cluster, cluster_key;
    OP_REQUIRES_OK(c, c->GetAttr("cluster", &cluster));
    OP_REQUIRES_OK(c, c->GetAttr("cluster_key", &cluster_key));
    OP_REQUIRES(c, !cluster_key.empty(),
                absl::InvalidArgumentError("NpuGraphOp: attr cluster_key is empty"));
    tensorflow::DataTypeVector tin, thost_in;
    OP_REQUIRES_OK(c, c->GetAttr("Tin", &tin));
    OP_REQUIRES_OK(c, c->GetAttr("Thost_in", &thost_in));
    int num_variables = 0;
    if (c->HasAttr("Nvariables")) {                  // NpuStatefulGraphOp
      OP_REQUIRES_OK(c, c->GetAttr("variable_dtypes", &variable_dtypes_));
      OP_REQUIRES_OK(c, c->GetAttr("variable_updates", &variable_updates_));
      OP_REQUIRES_OK(c, c->GetAttr("Nvariables", &num_variables));
    }
    OP_REQUIRES(c, variable_dtypes_.size() == static_cast<size_t>(num_variables) &&
                       variable_updates_.size() == variable_dtypes_.size(),
                absl::InvalidArgumentError("NpuGraphOp: variable_dtypes and variable_updates "
                                           "need one entry per variable"));
    num_args_ = static_cast<int>(tin.size() + thost_in.size());
    key_ = absl::StrCat(kNpuGraphOp, "|", cluster_key);
    tensorflow::GraphDef body;
    OP_REQUIRES(c, body.ParseFromString(cluster),
                absl::InvalidArgumentError("NpuGraphOp: attr cluster is not a GraphDef"));
    fallback_ = std::make_unique<CpuFallback>(absl::StrCat(name(), "_", cluster_key),
                                              std::move(body));
  }

  void Compute(OpKernelContext* ctx) override {
    // The variables' values take their handles' places among the inputs, read and (for the
    // run) held under their locks.
    const int num_variables = static_cast<int>(variable_dtypes_.size());
    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> variables(num_variables);
    for (int v = 0; v < num_variables; ++v) {
      const tensorflow::ResourceHandle& handle = tensorflow::HandleFromInput(ctx, num_args_ + v);
      absl::Status found = tensorflow::LookupResource(ctx, handle, &variables[v]);
      OP_REQUIRES(ctx, found.ok(), absl::FailedPreconditionError(absl::StrCat(
          "Could not find variable ", handle.name(), ". This could mean that the variable has "
          "been deleted. In TF1, it can also mean the variable is uninitialized. Debug info: ",
          found.message())));
    }
    // The variables the cluster updates are read, and held for the run, under their locks
    // (with any read-only one sharing a lock); the read-only ones are read first, each under its
    // lock shared, as ReadVariableOp reads them. A signature's first call compiles (seconds for
    // a large training step) without the locks, so that the variables' other readers and
    // writers never wait for a compile, and then reads them again (a variable assigned a new
    // shape meanwhile gets that signature compiled under the locks).
    std::vector<tsl::mutex*> updated;
    for (int v = 0; v < num_variables; ++v)
      if (variable_updates_[v] >= 0) updated.push_back(variables[v]->mu());
    std::sort(updated.begin(), updated.end());
    std::vector<bool> held(num_variables);
    for (int v = 0; v < num_variables; ++v)
      held[v] = std::binary_search(updated.begin(), updated.end(), variables[v]->mu());
    std::vector<Tensor> values(num_variables);
    std::vector<int> write_over;
    std::vector<tsl::mutex_lock> locks;
    std::shared_ptr<npu::CompiledModel> model;
    absl::Status s;
    for (int pass = 0;; ++pass) {
      OP_REQUIRES_OK(ctx, ReadVariables(ctx, variables, held, /*locked=*/false, nullptr, &values));
      locks = LockInOrder(updated);
      write_over.assign(ctx->num_outputs(), -1);
      OP_REQUIRES_OK(ctx, ReadVariables(ctx, variables, held, /*locked=*/true, &write_over,
                                        &values));
      const std::string key = SignatureKey(ctx, values);
      if (FindModel(key, device_, /*count_hit=*/pass == 0, &s, &model)) break;
      if (pass > 0) {
        s = GetModelFor(ctx, key, values, &model);
        break;
      }
      locks.clear();
      GetModelFor(ctx, key, values, &model).IgnoreError();   // the next pass finds the outcome
      for (Tensor& t : values) t = Tensor();     // no reference of ours left: copy-on-write test
    }
    const std::vector<const Tensor*> inputs = Inputs(ctx, values);
    if (FallsBackToCpu(s)) {
      // The engine cannot compile this signature (the model cache remembers that, so it is
      // not tried again): run the cluster's TF ops on CPU instead.
      CountFallbackRun();
      OP_REQUIRES_OK(ctx, Named(fallback_->Run(ctx, inputs)));
      return;
    }
    const bool any_over = std::any_of(write_over.begin(), write_over.end(),
                                      [](int i) { return i >= 0; });
    std::vector<const Tensor*> data(inputs.begin(), inputs.begin() + num_args_ + num_variables);
    if (s.ok() && any_over) {
      const std::vector<int32_t>& allowed = model->output_over_input();
      for (size_t o = 0; o < write_over.size(); ++o)
        if (write_over[o] >= 0 && (o >= allowed.size() || allowed[o] != write_over[o])) write_over[o] = -1;
    }
    if (s.ok()) s = RunModel(ctx, *model, data, any_over ? &write_over : nullptr, /*packed=*/true);
    OP_REQUIRES_OK(ctx, Named(s));
  }

 private:
  // The values of the variables `held` says are (`locked`: REQUIRES their locks held) or are
  // not (each read under its lock shared), checked: initialized, of the declared dtype. A
  // variable held for the run may share its buffer with the model's input; one read without
  // being held is copied where the variable is in copy-on-read mode (sparse updates write its
  // buffer in place), as ReadVariableOp does. In `write_over`, result variable_updates_[v] may
  // be written over variable v's buffer where only the variable holds it (TF's copy-on-write
  // test, as in AssignAddVariableOp: the step's other readers are done with it), tested before
  // `values` takes its own reference.
  absl::Status ReadVariables(OpKernelContext* ctx,
                             const std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>>& vars,
                             const std::vector<bool>& held, bool locked,
                             std::vector<int>* write_over, std::vector<Tensor>* values) const {
    for (size_t v = 0; v < vars.size(); ++v) {
      if (held[v] != locked) continue;
      tensorflow::Var* var = vars[v].get();
      std::optional<tsl::tf_shared_lock> shared;
      if (!locked) shared.emplace(*var->mu());
      if (!var->is_initialized || !var->tensor()->IsInitialized())
        return absl::FailedPreconditionError(absl::StrCat(
            "Error while reading resource variable ",
            tensorflow::HandleFromInput(ctx, num_args_ + v).name(), ": it is uninitialized"));
      TF_RETURN_IF_ERROR(CheckVariableDtype(*var->tensor(), variable_dtypes_[v]));
      if (!locked && var->copy_on_read_mode.load()) {
        TF_RETURN_IF_ERROR(SyncComputeStream(ctx));
        TF_RETURN_IF_ERROR(CopyOf(ctx, *var->tensor(), &(*values)[v]));
        continue;
      }
      const int result = variable_updates_[v];
      if (result >= 0 && !var->copy_on_read_mode.load() && var->tensor()->RefCountIsOne())
        (*write_over)[result] = num_args_ + v;
      (*values)[v] = *var->tensor();
    }
    return absl::OkStatus();
  }

  // The kernel's inputs, each variable's value in its handle's place.
  std::vector<const Tensor*> Inputs(OpKernelContext* ctx, const std::vector<Tensor>& values) const {
    std::vector<const Tensor*> inputs;
    const int num_variables = static_cast<int>(values.size());
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const bool variable = i >= num_args_ && i < num_args_ + num_variables;
      inputs.push_back(variable ? &values[i - num_args_] : &ctx->input(i));
    }
    return inputs;
  }

  // The model cache's key for the signature of these inputs: dtypes and shapes, and the
  // contents of the `values` inputs.
  std::string SignatureKey(OpKernelContext* ctx, const std::vector<Tensor>& values) const {
    const std::vector<const Tensor*> inputs = Inputs(ctx, values);
    std::string key = key_;
    AppendSignature(inputs, &key);
    for (int i = num_args_ + static_cast<int>(values.size()); i < ctx->num_inputs(); ++i) {
      absl::StrAppend(&key, "#", i, "=", inputs[i]->tensor_data());
    }
    return key;
  }

  // The model for signature `key` of these inputs (compiled, or from the cache).
  absl::Status GetModelFor(OpKernelContext* ctx, const std::string& key,
                           const std::vector<Tensor>& values,
                           std::shared_ptr<npu::CompiledModel>* model) const {
    const std::vector<const Tensor*> inputs = Inputs(ctx, values);
    const int num_data = num_args_ + static_cast<int>(values.size());
    return GetModel(key, device_, [&] {
      tensorflow::NodeDef node = def();
      SetInputShapes(inputs, &node);
      auto* consts = (*node.mutable_attr())["_const_inputs"].mutable_list();
      for (int i = num_data; i < ctx->num_inputs(); ++i) {
        inputs[i]->AsProtoTensorContent(consts->add_tensor());
      }
      return node;
    }, model);
  }

  absl::Status Named(const absl::Status& s) const {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("NPU cluster '", name(), "': ", s.message()));
  }

  const int device_;
  int num_args_ = 0;
  tensorflow::DataTypeVector variable_dtypes_;
  std::vector<int> variable_updates_;
  std::string key_;
  std::unique_ptr<CpuFallback> fallback_;
};

}  // namespace

namespace {

absl::Status RegisterOp(const char* name, bool with_variables) {
  tensorflow::OpRegistry::Global()->Register(
      [name, with_variables](tensorflow::OpRegistrationData* op) -> absl::Status {
        tensorflow::OpDefBuilder b(name);
        b.Input("args: Tin").Input("host_args: Thost_in");   // host_args: in host memory
        if (with_variables) {
          b.Input("variables: Nvariables * resource")         // read by the cluster, see above
              .Attr("Nvariables: int >= 1")
              .Attr("variable_dtypes: list(type) >= 1")
              .Attr("variable_updates: list(int)");  // per variable: its new value's result, or -1
        }
        return b.Input("values: Tvalues")         // contents needed at compile time; host memory
            .Output("results: Tout")
            .Output("host_results: Thost_out")  // in host memory
            .Attr("Tin: list(type) >= 0")
            .Attr("Thost_in: list(type) >= 0 = []")
            .Attr("Tvalues: list(type) >= 0 = []")
            .Attr("Tout: list(type) >= 0")
            .Attr("Thost_out: list(type) >= 0 = []")
            .Attr("cluster: string")          // serialized GraphDef with _Arg/_Retval nodes
            .Attr("cluster_name: string")
            .Attr("options: string = ''")     // graph-engine options the cluster compiles with
            .Attr("cluster_key: string")      // the cluster's identity: sha256 of cluster and
                                              // options (graph_engine partition.cluster_key)
            .SetShapeFn(tensorflow::shape_inference::UnknownShape)
            .Doc("A cluster of TF ops compiled by the NPU graph engine and run as one model.")
            .Finalize(op);
      });
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder(name)
          .Device(kNpuDeviceType)
          .HostMemory("host_args")
          .HostMemory("values")
          .HostMemory("host_results")
          .Build(),
      name, [](OpKernelConstruction* c) -> tensorflow::OpKernel* { return new NpuGraphOp(c); });
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterNpuGraphOp() {
  const tensorflow::OpRegistrationData* existing = nullptr;
  if (tensorflow::OpRegistry::Global()->LookUp(kNpuGraphOp, &existing).ok()) {
    return absl::AlreadyExistsError(absl::StrCat(kNpuGraphOp, " is already registered"));
  }
  TF_RETURN_IF_ERROR(RegisterOp(kNpuGraphOp, false));
  return RegisterOp(kNpuStatefulGraphOp, true);
}

}  // namespace npu_tf
