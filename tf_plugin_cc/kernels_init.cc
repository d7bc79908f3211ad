// TF_InitKernel: registers NpuGraphOp and the per-op NPU kernels.
//
// TensorFlow aborts on a duplicate op registration, so a second initialisation (the plugin
// loaded again from another path) must register nothing: the op registry is process-wide and
// tells us whether a copy of the plugin got here first.
#include "registration.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/core/platform/logging.h"

extern "C" __attribute__((visibility("default"))) void TF_InitKernel() {
  absl::Status s = npu_tf::RegisterNpuGraphOp();
  if (absl::IsAlreadyExists(s)) {
    LOG(WARNING) << "NPU plugin: kernels are already registered by another copy of the "
                    "plugin; this copy registers none";
    return;
  }
  int registered = 0;
  s = npu_tf::RegisterEagerKernels(&registered);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no per-op NPU kernels registered, so TensorFlow places every "
                  "op on CPU: "
               << s.message();
  }
  int resource_ops = 0;
  s = npu_tf::RegisterResourceKernels(&resource_ops);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no NPU kernels for the resource-variable ops, so embedding "
                  "lookups, sparse updates and slice assignments of NPU variables cannot be "
                  "placed: "
               << s.message();
  }
  int training_ops = 0;
  s = npu_tf::RegisterTrainingKernels(&training_ops);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no NPU kernels for the optimizer updates (ResourceApply*), so "
                  "optimizers cannot update NPU variables: "
               << s.message();
  }
  int dynamic_shape_ops = 0;
  s = npu_tf::RegisterDynamicShapeKernels(&dynamic_shape_ops);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no NPU kernels for the ops with value-dependent output shapes "
                  "(Where, Unique, Segment* ...), so they run on CPU: "
               << s.message();
  }
  int variable_ops = 0;
  s = npu_tf::RegisterVariableKernels(&variable_ops);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no NPU kernels for the dense variable writes, so "
                  "variable_memory_max_size cannot be enforced: "
               << s.message();
  }
  int sparse_ops = 0;
  s = npu_tf::RegisterSparseKernels(&sparse_ops);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no NPU kernels for SparseSlice(Grad), so they run on CPU: "
               << s.message();
  }
  int ragged_ops = 0;
  s = npu_tf::RegisterRaggedKernels(&ragged_ops);
  if (!s.ok()) LOG(ERROR) << "NPU plugin: no NPU kernel for RaggedTensorToTensor, so it runs on CPU: " << s.message();
  int list_ops = 0;
  s = npu_tf::RegisterListKernels(&list_ops);
  if (!s.ok()) LOG(ERROR) << "NPU plugin: no NPU kernels for bool TensorLists, so they run on CPU: " << s.message();
  int random_ops = 0;
  s = npu_tf::RegisterRandomKernels(&random_ops);
  if (!s.ok()) {
    LOG(ERROR) << "NPU plugin: no NPU kernel for RngReadAndSkip, so a tf.random.Generator whose "
                  "state is on the NPU cannot draw numbers: "
               << s.message();
  }
  npu_tf::RegisterHostLogicKernels();
  VLOG(1) << "NPU plugin: registered NpuGraphOp, " << registered << " per-op kernels and "
          << resource_ops + variable_ops + training_ops << " resource-variable ops";
}
