// NpuHostLogicalAnd / NpuHostLogicalOr: LogicalAnd / LogicalOr with every argument in host
// memory, for loop conditions. A tf.while_loop's condition is typically int32 comparisons
// joined by a LogicalAnd (Keras' RNNs: step < steps and counter < maximum_iterations). TF runs
// the comparisons on the NPU in host memory itself but has no such kernel for LogicalAnd, so the
// partitioner rewrites a LogicalAnd/Or of such host values into these ops
// (graph_engine/compiler/partition/host_logic.py) instead of launching a cluster for it every
// iteration. Ops of their own, not second kernels for LogicalAnd/Or: those have the eager
// per-op NPU kernels, in device memory, and two kernels of one op for one device would be
// ambiguous to TF's lookup. The kernels are TF's CPU ones (broadcasting included): the
// operands are host tensors.
#define EIGEN_USE_THREADS

#include "absl/status/status.h"
#include "registration.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/kernels/cwise_ops_common.h"

namespace npu_tf {
namespace {

using CpuDevice = Eigen::ThreadPoolDevice;

template <typename Functor>
void RegisterHostLogical(const char* op) {
  tensorflow::OpRegistry::Global()->Register(
      [op](tensorflow::OpRegistrationData* data) -> absl::Status {
        return tensorflow::OpDefBuilder(op)
            .Input("x: bool")
            .Input("y: bool")
            .Output("z: bool")
            .SetShapeFn(tensorflow::shape_inference::BroadcastBinaryOpShapeFn)
            .Doc("Logical and/or of host-memory bools on the NPU (loop conditions).")
            .Finalize(data);
      });
  tensorflow::kernel_factory::OpKernelRegistrar(
      tensorflow::KernelDefBuilder(op)
          .Device(kNpuDeviceType)
          .HostMemory("x")
          .HostMemory("y")
          .HostMemory("z")
          .Build(),
      op, [](tensorflow::OpKernelConstruction* c) -> tensorflow::OpKernel* {
        return new tensorflow::BinaryOp<CpuDevice, Functor>(c);
      });
}

}  // namespace

void RegisterHostLogicKernels() {
  RegisterHostLogical<tensorflow::functor::logical_and>("NpuHostLogicalAnd");
  RegisterHostLogical<tensorflow::functor::logical_or>("NpuHostLogicalOr");
}

}  // namespace npu_tf
