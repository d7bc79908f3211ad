// NPU kernel for RaggedTensorToTensor (Keras' TextVectorization pads its ragged token ids with it):
// a ragged tensor given as flat values and row partitions becomes a dense tensor of `shape`, rows
// longer than the shape cut, missing entries filled with default_value (broadcast to one element).
// Its output shape depends on the partitions' values (a -1 in `shape` is the widest row), so it is
// a plugin kernel, not a graph-engine op.
//
// As the other plugin kernels (sparse_ops.cc): device memory of the simulated NPU is host memory,
// so the kernel waits for its NPU stream, then reads its inputs and writes its output on the host.
// Semantics, checks and messages are TF's CPU kernel's (ragged_tensor_to_tensor_op.cc,
// ragged_to_dense_util.cc): each level of the partition maps every row to the output position of
// its first element (-1: cut off), level by level from the outer dimension in. Partition types:
// ROW_SPLITS, VALUE_ROWIDS, and FIRST_DIM_SIZE first; the others are Unimplemented (TF's CPU kernel
// does not handle them either).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "host_kernel.h"
#include "registration.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace npu_tf {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

enum class Partition { kRowSplits, kValueRowIds, kFirstDimSize };

constexpr int kFirstPartition = 3;  // inputs: shape, values, default_value, row_partition_tensors...

// An int32 or int64 tensor's values as int64 (Tshape and Tindex are either).
std::vector<int64_t> AsInt64(const Tensor& t) {
  std::vector<int64_t> v(t.NumElements());
  for (int64_t i = 0; i < t.NumElements(); ++i) v[i] = IndexAt(t, i);
  return v;
}

// A dims list as TF's TensorShape::DebugString(TensorShapeProto) writes it: -1 as "?".
std::string DimsString(const std::vector<int64_t>* dims) {
  if (dims == nullptr) return "<unknown>";
  std::vector<std::string> parts;
  for (int64_t d : *dims) parts.push_back(d < 0 ? "?" : absl::StrCat(d));
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::vector<int64_t> Dims(const TensorShape& s) {
  std::vector<int64_t> d;
  for (int i = 0; i < s.dims(); ++i) d.push_back(s.dim_size(i));
  return d;
}

// The widest row of a partition: its largest split difference, or its longest run of equal row ids.
int64_t MaxWidth(Partition type, const std::vector<int64_t>& p) {
  int64_t width = 0;
  if (type == Partition::kRowSplits) {
    for (size_t i = 0; i + 1 < p.size(); ++i) width = std::max(width, p[i + 1] - p[i]);
    return width;
  }
  size_t run_start = 0;
  for (size_t i = 1; i <= p.size(); ++i) {
    if (i == p.size() || p[i] != p[run_start]) {
      width = std::max(width, static_cast<int64_t>(i - run_start));
      run_start = i;
    }
  }
  return width;
}

// One partition level: from the output position of each parent row's first element (`parent`,
// -1 where cut off) to each child's, `step` apart, at most `size` children per row.
absl::Status ChildPositions(Partition type, const std::vector<int64_t>& p, const std::vector<int64_t>& parent,
                            int64_t step, int64_t size, std::vector<int64_t>* out) {
  out->clear();
  if (type == Partition::kRowSplits) {
    if (static_cast<int64_t>(p.size()) - 1 > static_cast<int64_t>(parent.size()))
      return Invalid("Row partition size is greater than output size: ", p.size() - 1, " > ", parent.size());
    for (size_t i = 0; i + 1 < p.size(); ++i) {
      const int64_t length = p[i + 1] - p[i];
      const int64_t kept = parent[i] < 0 ? 0 : std::min(size, length);
      for (int64_t j = 0; j < length; ++j) out->push_back(j < kept ? parent[i] + j * step : -1);
    }
    if (!p.empty() && static_cast<int64_t>(out->size()) != p.back()) return Invalid("Invalid row split size.");
    return absl::OkStatus();
  }
  // VALUE_ROWIDS: a child's column is its place in the run of its row id (ids sorted, as TF's).
  int64_t column = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    // Compared unsigned as TF's kernel does: a negative id reads as too large.
    if (static_cast<uint64_t>(p[i]) >= parent.size())
      return Invalid("Got ", i == 0 ? "current" : "next", "_value_rowid=", p[i], " which is not less than ",
                     parent.size());
    column = i > 0 && p[i] == p[i - 1] ? column + 1 : 0;
    out->push_back(parent[p[i]] < 0 || column >= size ? -1 : parent[p[i]] + column * step);
  }
  return absl::OkStatus();
}

// RaggedTensorToTensor(shape, values, default_value, row_partition_tensors) -> dense of `shape`.
template <typename T>
class RaggedTensorToTensorOp : public HostKernel {
 public:
  explicit RaggedTensorToTensorOp(OpKernelConstruction* c) : HostKernel(c) {
    std::vector<std::string> names;
    OP_REQUIRES_OK(c, c->GetAttr("row_partition_types", &names));
    for (const std::string& name : names) {
      if (name == "ROW_SPLITS") {
        types_.push_back(Partition::kRowSplits);
      } else if (name == "VALUE_ROWIDS") {
        types_.push_back(Partition::kValueRowIds);
      } else if (name == "FIRST_DIM_SIZE") {
        types_.push_back(Partition::kFirstDimSize);
      } else {
        OP_REQUIRES(c, false, absl::UnimplementedError(absl::StrCat(
                                  "RaggedTensorToTensor on the NPU handles the row partition types ROW_SPLITS, "
                                  "VALUE_ROWIDS and FIRST_DIM_SIZE, not ", name)));
      }
    }
  }

 protected:
  absl::Status ComputeOnHost(OpKernelContext* c) override {
    if (types_.empty()) return Invalid("No row_partition_types given.");
    if (c->num_inputs() - kFirstPartition != static_cast<int>(types_.size()))
      return Invalid("Expected ", types_.size(), " row_partition_tensors but got ", c->num_inputs() - kFirstPartition);
    const Tensor &values = c->input(1), &default_value = c->input(2), &first = c->input(kFirstPartition);
    if (first.NumElements() == 0)
      return Invalid("Invalid first partition input. Tensor requires at least one element.");
    // The partitions below the first dimension, outer to inner (FIRST_DIM_SIZE only gives its size).
    const bool sized = types_[0] == Partition::kFirstDimSize;
    std::vector<Partition> levels(types_.begin() + (sized ? 1 : 0), types_.end());
    std::vector<std::vector<int64_t>> parts;
    for (int i = kFirstPartition + (sized ? 1 : 0); i < c->num_inputs(); ++i) parts.push_back(AsInt64(c->input(i)));
    const int ragged_rank = static_cast<int>(levels.size());
    for (Partition t : levels) {
      if (t == Partition::kFirstDimSize) return Invalid("Unsupported partition type:FIRST_DIM_SIZE");
    }
    int64_t first_dim;
    if (sized) {
      if (first.dims() != 0) return Invalid("FIRST_DIM_SIZE must be a scalar, got shape ", first.shape().DebugString());
      first_dim = AsInt64(first)[0];
    } else if (types_[0] == Partition::kValueRowIds) {
      return Invalid("Cannot handle VALUE_ROWIDS in first dimension.");
    } else {
      first_dim = first.dim_size(0) - 1;
    }

    std::vector<int64_t> out;
    TF_RETURN_IF_ERROR(OutputSize(c->input(0), values, default_value, ragged_rank, first_dim, levels, parts, &out));
    TensorShape out_shape;
    TF_RETURN_IF_ERROR(tensorflow::TensorShapeUtils::MakeShape(out.data(), out.size(), &out_shape));
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(c->allocate_output(0, out_shape, &output));
    if (output->NumElements() == 0) return absl::OkStatus();

    // step[i]: how many elements (of the dims below the ragged ones) one step in dim i moves.
    std::vector<int64_t> step(ragged_rank + 1, 1);
    for (int i = ragged_rank - 1; i >= 0; --i) step[i] = step[i + 1] * out[i + 1];
    std::vector<int64_t> pos, next;
    for (int64_t i = 0; i < first_dim; ++i) pos.push_back(i < out[0] ? i * step[0] : -1);
    for (int i = 0; i < ragged_rank; ++i) {
      TF_RETURN_IF_ERROR(ChildPositions(levels[i], parts[i], pos, step[i + 1], out[i + 1], &next));
      pos.swap(next);
    }
    // Values past the partitions' are ignored (as TF's); TF's kernel would read past too few.
    if (static_cast<int64_t>(pos.size()) > values.dim_size(0))
      return Invalid("The row partitions describe ", pos.size(), " values but values has ", values.dim_size(0));

    TensorShape element_shape = out_shape;
    element_shape.RemoveDimRange(0, ragged_rank + 1);
    std::vector<T> pad;
    TF_RETURN_IF_ERROR(Broadcast(default_value, element_shape, &pad));
    const int64_t n = element_shape.num_elements();
    auto o = output->flat<T>();
    const auto v = values.flat<T>();
    for (int64_t e = 0; e < output->NumElements(); ++e) o(e) = pad[e % n];
    for (size_t i = 0; i < pos.size(); ++i) {
      if (pos[i] < 0) continue;
      for (int64_t k = 0; k < n; ++k) o(pos[i] * n + k) = v(i * n + k);
    }
    return absl::OkStatus();
  }

 private:
  // TF's output shape: `shape` (a scalar -1: unknown rank) checked against and completed by the
  // values' inner dims; a -1 left is the first dim's size (dim 0) or the widest row.
  static absl::Status OutputSize(const Tensor& shape, const Tensor& values, const Tensor& default_value,
                                 int ragged_rank, int64_t first_dim, const std::vector<Partition>& levels,
                                 const std::vector<std::vector<int64_t>>& parts, std::vector<int64_t>* out) {
    const std::vector<int64_t> value_dims = Dims(values.shape()), default_dims = Dims(default_value.shape());
    const int vrank = static_cast<int>(value_dims.size()), drank = static_cast<int>(default_dims.size());
    if (drank >= vrank)
      return Invalid("default_value.shape=", DimsString(&default_dims), " and rt_input.flat_values.shape=",
                     DimsString(&value_dims), " are incompatible: default_value.rank = ", drank,
                     "  must be less than rt_input.flat_values.rank = ", vrank);
    // As TF's ValidateDefaultValueShape, which lines the dims up from the front.
    for (int i = 0; i < drank; ++i) {
      if (default_dims[i] != 1 && default_dims[i] != value_dims[i + 1])
        return Invalid("default_value.shape=", DimsString(&default_dims), " and rt_input.flat_values.shape=",
                       DimsString(&value_dims), " are incompatible: default_value.shape[", i - drank, "] = ",
                       default_dims[i], " but rt_input.flat_values.shape[", i - drank, "] = ", value_dims[i + 1]);
    }
    std::vector<int64_t> requested = AsInt64(shape);
    const bool unknown_rank = shape.dims() == 0;
    if (unknown_rank && requested[0] != -1)
      return Invalid("The only valid scalar shape tensor is the fully unknown shape specified as -1.");
    if (shape.dims() > 1) return Invalid("Shape must be at most rank 1 but is rank ", shape.dims());
    if (!unknown_rank) {
      for (int64_t d : requested) {
        if (d < -1) return Invalid("Dimension ", d, " must be >= -1");
      }
    }
    *out = unknown_rank ? std::vector<int64_t>(ragged_rank + vrank, -1) : requested;
    if (static_cast<int>(out->size()) != ragged_rank + vrank)
      return Invalid("rt_input.shape and shape=", DimsString(unknown_rank ? nullptr : &requested),
                     " are incompatible: rt_input.rank = ", ragged_rank + vrank, " but shape.rank = ", out->size());
    for (int i = 1; i < vrank; ++i) {
      int64_t& d = (*out)[ragged_rank + i];
      if (d >= 0 && d != value_dims[i])
        return Invalid("rt_input.shape and shape=", DimsString(unknown_rank ? nullptr : &requested),
                       " are incompatible: rt_input.shape[", i + ragged_rank, "] = ", value_dims[i], " but shape[",
                       i + ragged_rank, "] = ", d);
      d = value_dims[i];
    }
    if ((*out)[0] < 0) (*out)[0] = first_dim;
    for (int i = 1; i <= ragged_rank; ++i) {
      if ((*out)[i] < 0) (*out)[i] = MaxWidth(levels[i - 1], parts[i - 1]);
    }
    return absl::OkStatus();
  }

  // default_value broadcast (numpy-style, from the back) to one element of `element_shape`.
  static absl::Status Broadcast(const Tensor& d, const TensorShape& element_shape, std::vector<T>* pad) {
    const int er = element_shape.dims(), dr = d.dims();
    if (dr > er) return Invalid("Error broadcasting default_value");
    for (int i = 0; i < dr; ++i) {
      const int64_t dd = d.dim_size(i), ed = element_shape.dim_size(er - dr + i);
      if (dd != 1 && dd != ed) return Invalid("Error broadcasting default_value");
    }
    const auto src = d.flat<T>();
    pad->resize(element_shape.num_elements());
    for (int64_t e = 0; e < element_shape.num_elements(); ++e) {
      // Walk e's coordinates from the innermost dim, keeping the ones default_value has (size > 1).
      int64_t rest = e, at = 0, stride = 1;
      for (int i = er - 1; i >= 0; --i) {
        const int64_t coord = rest % element_shape.dim_size(i);
        rest /= element_shape.dim_size(i);
        const int j = i - (er - dr);
        if (j < 0) continue;
        if (d.dim_size(j) > 1) at += coord * stride;
        stride *= d.dim_size(j);
      }
      (*pad)[e] = src(at);
    }
    return absl::OkStatus();
  }

  std::vector<Partition> types_;
};

template <typename T>
void Register() {
  RegisterHostKernel("RaggedTensorToTensor", "T", tensorflow::DataTypeToEnum<T>::v(), "NpuRaggedOp",
                     [](OpKernelConstruction* c) -> OpKernel* { return new RaggedTensorToTensorOp<T>(c); });
}

}  // namespace

absl::Status RegisterRaggedKernels(int* registered) {
  *registered = 0;
  static constexpr const char* kOps[] = {"RaggedTensorToTensor"};
  absl::Status status = CheckNoNpuKernels(kOps);
  if (!status.ok()) return status;
  // Tindex and Tshape (int32 or int64) are read at run time, so one kernel per T covers both.
  Register<tensorflow::int32>();
  Register<tensorflow::int64>();
  Register<bool>();
  Register<float>();
  Register<Eigen::half>();
  Register<Eigen::bfloat16>();
  *registered = 1;
  return absl::OkStatus();
}

}  // namespace npu_tf
