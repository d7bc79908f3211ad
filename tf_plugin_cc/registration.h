// The kernels and ops TF_InitKernel registers (kernels_init.cc).
#ifndef TF_PLUGIN_CC_REGISTRATION_H_
#define TF_PLUGIN_CC_REGISTRATION_H_

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace npu_tf {

inline constexpr char kNpuDeviceType[] = "NPU";
inline constexpr char kNpuGraphOp[] = "NpuGraphOp";
// A cluster that also reads and updates variables (their handles as inputs): stateful, as TF
// makes every op with resource inputs, so it is an op of its own and NpuGraphOp stays stateless
// (a TF1 session shares a stateful kernel between its graphs by node name).
inline constexpr char kNpuStatefulGraphOp[] = "NpuStatefulGraphOp";

// The NpuGraphOp and NpuStatefulGraphOp ops and their NPU kernel (graph_op.cc). AlreadyExists
// when another copy of the plugin registered them first.
absl::Status RegisterNpuGraphOp();

// An NPU kernel for every op of the graph engine's supported-op table (eager_op.cc), so TF's
// placer puts those ops on the NPU. Returns how many were registered.
absl::Status RegisterEagerKernels(int* registered);

// NPU kernels for ResourceGather(Nd) and ResourceScatter(Nd)* on NPU variables
// (resource_ops.cc). Returns how many ops got kernels.
absl::Status RegisterResourceKernels(int* registered);

// NPU kernels for the optimizer updates of resource variables, ResourceApply* and
// ResourceSparseApply* (training_ops.cc). Returns how many ops got kernels.
absl::Status RegisterTrainingKernels(int* registered);

// NPU kernels for the ops whose output shape depends on input values: Where, Unique*,
// DynamicPartition, DynamicStitch, ListDiff, Segment*, SparseSegment*, NonMaxSuppression*
// (dynamic_shape_ops.cc). Returns how many ops got kernels.
absl::Status RegisterDynamicShapeKernels(int* registered);

// AlreadyExists naming the first of `ops` that has an NPU kernel already (registered by another
// copy of the plugin, or by the graph engine's op table): a second one would make TF's kernel
// lookup ambiguous (resource_ops.cc).
absl::Status CheckNoNpuKernels(absl::Span<const char* const> ops);

// NPU kernels for AssignVariableOp, AssignAddVariableOp and AssignSubVariableOp that account
// variable memory (variable_ops.cc). Returns how many ops got kernels.
absl::Status RegisterVariableKernels(int* registered);

// NPU kernels for the sparse ops whose output size depends on the values: SparseSlice and
// SparseSliceGrad (sparse_ops.cc). Returns how many ops got kernels.
absl::Status RegisterSparseKernels(int* registered);

// NPU kernel for RaggedTensorToTensor (ragged_ops.cc). Returns how many ops got kernels.
absl::Status RegisterRaggedKernels(int* registered);

// NPU kernels for what TF's device-default registrations leave out of TensorLists: the list ops
// of bool and complex64 elements, AddN and ZerosLike of variants (list_ops.cc). Returns how many
// ops got kernels.
absl::Status RegisterListKernels(int* registered);

// NPU kernel for RngReadAndSkip, tf.random.Generator's read-and-advance of its state variable
// (random_ops.cc). Returns how many ops got kernels.
absl::Status RegisterRandomKernels(int* registered);

// NpuHostLogicalAnd / NpuHostLogicalOr, ops and NPU kernels with every argument in host memory:
// the partitioner's form of a loop condition's LogicalAnd/Or (host_logic_ops.cc).
void RegisterHostLogicKernels();

}  // namespace npu_tf

#endif  // TF_PLUGIN_CC_REGISTRATION_H_
