// NPU kernels for the TensorList ops that TF's device-default kernels leave out: those of bool
// (Keras' masked RNNs keep their time-step masks in lists) and complex64 elements, and AddN and
// ZerosLike of variants (a loop gradient sums TensorLists).
//
// TF registers its list kernels for every pluggable device (DEVICE_DEFAULT) for int32, int64,
// bfloat16, half, float and double only; the placer then puts a bool list op on the CPU while
// its loop stays on the NPU, and the list crosses devices element by element on every
// iteration. These are TF's own kernel classes (list_kernels.h, the ones TF's default
// registrations use), with the same host-memory arguments; as the other host kernels
// (host_kernel.h) they first wait for the NPU stream, since they read and write device memory
// from the host.
#define EIGEN_USE_THREADS   // TF's CPU list kernels run Eigen expressions on its thread pool

#include "absl/status/status.h"
#include "host_kernel.h"
#include "registration.h"
#include "tensorflow/core/kernels/list_kernels.h"

namespace npu_tf {
namespace {

using CpuDevice = Eigen::ThreadPoolDevice;

template <typename Kernel>
class SyncedKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Compute(tensorflow::OpKernelContext* c) override {
    OP_REQUIRES_OK(c, SyncComputeStream(c));
    Kernel::Compute(c);
  }
};

template <template <typename, typename> class Kernel, typename T>
void RegisterList(const char* op, std::initializer_list<const char*> host_args) {
  class Factory : public tensorflow::kernel_factory::OpKernelFactory {
   public:
    tensorflow::OpKernel* Create(tensorflow::OpKernelConstruction* c) override {
      return new SyncedKernel<Kernel<CpuDevice, T>>(c);
    }
  };
  tensorflow::KernelDefBuilder b(op);
  b.Device(kNpuDeviceType).TypeConstraint<T>("element_dtype");
  for (const char* arg : host_args) b.HostMemory(arg);
  tensorflow::kernel_factory::OpKernelRegistrar(b.Build(), "NpuTensorListOp",
                                                std::make_unique<Factory>());
}

template <typename T>
void RegisterListOps() {
  using namespace tensorflow;  // NOLINT: TF's kernel class templates, by their op names
  RegisterList<TensorListStack, T>("TensorListStack", {"element_shape"});
  RegisterList<TensorListGather, T>("TensorListGather", {"indices", "element_shape"});
  RegisterList<TensorListConcat, T>("TensorListConcat", {"lengths"});
  RegisterList<TensorListConcat, T>("TensorListConcatV2", {"leading_dims", "element_shape", "lengths"});
  RegisterList<TensorListGetItem, T>("TensorListGetItem", {"index", "element_shape"});
  RegisterList<TensorListPopBack, T>("TensorListPopBack", {"element_shape"});
  RegisterList<TensorListFromTensor, T>("TensorListFromTensor", {"element_shape"});
  RegisterList<TensorListScatter, T>("TensorListScatter", {"element_shape", "indices"});
  RegisterList<TensorListScatter, T>("TensorListScatterV2", {"element_shape", "num_elements", "indices"});
  RegisterList<TensorListScatterIntoExistingList, T>("TensorListScatterIntoExistingList", {"indices"});
  RegisterList<TensorListSplit, T>("TensorListSplit", {"element_shape", "lengths"});
}

// A variant output: its Variant objects live in host memory.
absl::Status AllocateOnHost(tensorflow::OpKernelContext* c, const tensorflow::TensorShape& shape,
                            tensorflow::Tensor** out) {
  tensorflow::AllocatorAttributes on_host;
  on_host.set_on_host(true);
  return c->allocate_output(0, shape, out, on_host);
}

// AddN and ZerosLike of variants (TF has them for GPUs, not for pluggable devices): the gradient
// of a loop that reads a TensorList sums TensorLists every iteration. Each element goes through
// TF's variant op registry, whose TensorList functions add (or zero) the list element by element.
class VariantAddN : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(tensorflow::OpKernelContext* c) override {
    const tensorflow::Tensor& first = c->input(0);
    if (c->num_inputs() == 1) {
      c->set_output(0, first);
      return absl::OkStatus();
    }
    for (int j = 1; j < c->num_inputs(); ++j) {
      if (c->input(j).shape() != first.shape())
        return Invalid("Inputs to operation ", name(), " of type ", type_string(),
                       " must have the same size and shape.  Input 0: ",
                       first.shape().DebugString(), " != input ", j, ": ",
                       c->input(j).shape().DebugString());
    }
    tensorflow::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(AllocateOnHost(c, first.shape(), &out));
    for (int64_t i = 0; i < first.NumElements(); ++i) {
      tensorflow::Variant sum = first.flat<tensorflow::Variant>()(i);
      for (int j = 1; j < c->num_inputs(); ++j) {
        tensorflow::Variant next;
        TF_RETURN_IF_ERROR(tensorflow::BinaryOpVariants<CpuDevice>(
            c, tensorflow::ADD_VARIANT_BINARY_OP, sum, c->input(j).flat<tensorflow::Variant>()(i),
            &next));
        sum = std::move(next);
      }
      out->flat<tensorflow::Variant>()(i) = std::move(sum);
    }
    return absl::OkStatus();
  }
};

class VariantZerosLike : public HostKernel {
 public:
  using HostKernel::HostKernel;

 protected:
  absl::Status ComputeOnHost(tensorflow::OpKernelContext* c) override {
    const tensorflow::Tensor& x = c->input(0);
    tensorflow::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(AllocateOnHost(c, x.shape(), &out));
    for (int64_t i = 0; i < x.NumElements(); ++i) {
      TF_RETURN_IF_ERROR(tensorflow::UnaryOpVariant<CpuDevice>(
          c, tensorflow::ZEROS_LIKE_VARIANT_UNARY_OP, x.flat<tensorflow::Variant>()(i),
          &out->flat<tensorflow::Variant>()(i)));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status RegisterListKernels(int* registered) {
  RegisterListOps<bool>();
  RegisterListOps<tensorflow::complex64>();
  RegisterHostKernel("AddN", "T", tensorflow::DT_VARIANT, "NpuVariantAddN",
                     [](tensorflow::OpKernelConstruction* c) { return new VariantAddN(c); });
  RegisterHostKernel("ZerosLike", "T", tensorflow::DT_VARIANT, "NpuVariantZerosLike",
                     [](tensorflow::OpKernelConstruction* c) { return new VariantZerosLike(c); });
  *registered = 13;
  return absl::OkStatus();
}

}  // namespace npu_tf
