// Data-dependent indexing: GatherV2 and UnsortedSegmentSum. Indices are read at run time and
// checked; an index out of range is a kernel error naming it.
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

std::vector<int64_t> LoadIndices(int dtype, const void* data, int64_t n) {
  std::vector<int64_t> idx(n);
  Load<int64_t>(dtype, data, n, idx.data());
  return idx;
}

// out[b, o, m, :] = params[b, o, indices[b, m], :] with rows of `inner` elements.
class GatherKernel : public Kernel {
 public:
  GatherKernel(int64_t batch, int64_t outer, int64_t n, int64_t inner, int64_t m, int elem, int index_dtype)
      : batch_(batch), outer_(outer), n_(n), inner_(inner), m_(m), elem_(elem), index_dtype_(index_dtype) {}

  Status Compute(const KernelArgs& args) const override {
    const std::vector<int64_t> idx = LoadIndices(index_dtype_, args.in(1), batch_ * m_);
    for (size_t i = 0; i < idx.size(); ++i)
      if (idx[i] < 0 || idx[i] >= n_)
        return InvalidArgument("indices[", i, "] = ", idx[i], " is not in [0, ", n_, ")");
    const char* params = args.in<char>(0);
    char* out = args.out<char>(0);
    const int64_t row = inner_ * elem_;
    ParallelFor(batch_ * outer_ * m_, row, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / (outer_ * m_), o = r / m_ % outer_, j = r % m_;
        std::memcpy(out + r * row, params + ((b * outer_ + o) * n_ + idx[b * m_ + j]) * row, row);
      }
    });
    return Status::Ok();
  }

 private:
  int64_t batch_, outer_, n_, inner_, m_;
  int elem_, index_dtype_;
};

Status MakeGather(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  const TensorDesc &params = def.inputs[0], &indices = def.inputs[1], &o = def.outputs[0];
  if (indices.dtype != kInt32 && indices.dtype != kInt64)
    return Error("indices are ", DTypeName(indices.dtype), "; expected int32 or int64");
  if (params.dtype != o.dtype)
    return Error("output is ", DTypeName(o.dtype), "; expected the params dtype ", DTypeName(params.dtype));
  const int64_t rank = static_cast<int64_t>(params.dims.size()), irank = static_cast<int64_t>(indices.dims.size());
  int64_t axis, batch_dims;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("axis", &axis));
  NPU_RETURN_IF_ERROR(NormalizeAxis(axis, rank, &axis));
  NPU_RETURN_IF_ERROR(def.attrs.Int("batch_dims", 0, &batch_dims));
  if (batch_dims < 0) batch_dims += irank;
  if (batch_dims < 0 || batch_dims > axis || batch_dims > irank)
    return Error("batch_dims ", batch_dims, " must lie in [0, min(axis=", axis, ", indices rank=", irank, ")]");
  for (int64_t a = 0; a < batch_dims; ++a)
    if (params.dims[a] != indices.dims[a])
      return Error("params ", ShapeString(params.dims), " and indices ", ShapeString(indices.dims),
                   " differ in the first ", batch_dims, " (batch) axes");
  Dims want(params.dims.begin(), params.dims.begin() + axis);
  want.insert(want.end(), indices.dims.begin() + batch_dims, indices.dims.end());
  want.insert(want.end(), params.dims.begin() + axis + 1, params.dims.end());
  if (o.dims != want) return Error("output has shape ", ShapeString(o.dims), "; expected ", ShapeString(want));
  auto prod = [](const Dims& d, int64_t b, int64_t e) { return NumElements(Dims(d.begin() + b, d.begin() + e)); };
  *out = std::make_unique<GatherKernel>(prod(params.dims, 0, batch_dims), prod(params.dims, batch_dims, axis),
                                        params.dims[axis], prod(params.dims, axis + 1, rank),
                                        prod(indices.dims, batch_dims, irank), DTypeSize(params.dtype), indices.dtype);
  return Status::Ok();
}

// out[s, :] = sum of data[i, :] over the i with segment_ids[i] == s (negative ids are dropped).
// Each thread owns a block of columns and adds the rows in id order. Stored as T (float32,
// float64, int64), the sums accumulate in the output itself; otherwise in a buffer of T, stored
// once (a fresh 256 KB buffer per call, faulted in page by page, was most of an embedding
// gradient's 130 us).
template <class T>
void SegmentSum(const std::vector<int64_t>& ids, int dtype, const char* data, int64_t inner, int64_t segments,
                char* out) {
  const int size = DTypeSize(dtype);
  const bool native = IsNative<T>(dtype);
  constexpr int64_t kCols = 256;
  ParallelFor((inner + kCols - 1) / kCols, static_cast<int64_t>(ids.size()) * kCols, [&](int64_t c0, int64_t c1) {
    T buf[kCols];
    std::vector<T> staged;
    for (int64_t cb = c0; cb < c1; ++cb) {
      const int64_t col = cb * kCols, w = std::min(kCols, inner - col);
      // Segment s's w sums start at acc + s * stride.
      T* acc;
      int64_t stride;
      if (native) {
        acc = reinterpret_cast<T*>(out) + col;
        stride = inner;
        if (w == inner) std::fill(acc, acc + segments * inner, T(0));
        else for (int64_t s = 0; s < segments; ++s) std::fill(acc + s * stride, acc + s * stride + w, T(0));
      } else {
        staged.assign(segments * w, T(0));
        acc = staged.data();
        stride = w;
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0) continue;
        T* a = acc + ids[i] * stride;
        if (native) {
          const T* row = reinterpret_cast<const T*>(data) + i * inner + col;
          for (int64_t c = 0; c < w; ++c) a[c] += row[c];
        } else {
          Load<T>(dtype, data + (i * inner + col) * size, w, buf);
          for (int64_t c = 0; c < w; ++c) a[c] += buf[c];
        }
      }
      if (!native)
        for (int64_t s = 0; s < segments; ++s) Store<T>(dtype, acc + s * w, w, out + (s * inner + col) * size);
    }
  });
}

class SegmentSumKernel : public Kernel {
 public:
  SegmentSumKernel(int64_t n_ids, int64_t inner, int64_t segments, int dtype, int id_dtype)
      : n_ids_(n_ids), inner_(inner), segments_(segments), dtype_(dtype), id_dtype_(id_dtype) {}

  Status Compute(const KernelArgs& args) const override {
    if (n_ids_ * inner_ == 0) {               // TF checks the ids only when data is not empty
      if (segments_ * inner_ > 0) std::memset(args.out(0), 0, segments_ * inner_ * DTypeSize(dtype_));
      return Status::Ok();
    }
    const std::vector<int64_t> ids = LoadIndices(id_dtype_, args.in(1), n_ids_);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= segments_)
        return InvalidArgument("segment_ids[", i, "] = ", ids[i], " is out of range [0, ", segments_, ")");
    if (segments_ * inner_ == 0) return Status::Ok();
    const char* data = args.in<char>(0);
    char* out = args.out<char>(0);
    switch (ComputeTypeOf(dtype_)) {
      case ComputeType::kFloat: SegmentSum<float>(ids, dtype_, data, inner_, segments_, out); break;
      case ComputeType::kDouble: SegmentSum<double>(ids, dtype_, data, inner_, segments_, out); break;
      case ComputeType::kInt64: SegmentSum<int64_t>(ids, dtype_, data, inner_, segments_, out); break;
    }
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }

  int64_t n_ids_, inner_, segments_;
  int dtype_, id_dtype_;
};

Status MakeSegmentSum(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  const TensorDesc &data = def.inputs[0], &ids = def.inputs[1], &o = def.outputs[0];
  if (!InTypeSet(kNumeric, data.dtype) || o.dtype != data.dtype)
    return Error("does not support ", DTypeName(data.dtype), " -> ", DTypeName(o.dtype), "; supported: ",
                 TypeSetNames(kNumeric), " (same dtype in and out)");
  if (ids.dtype != kInt32 && ids.dtype != kInt64)
    return Error("segment_ids are ", DTypeName(ids.dtype), "; expected int32 or int64");
  int64_t segments;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("num_segments", &segments));
  if (ids.dims.size() > data.dims.size() || !std::equal(ids.dims.begin(), ids.dims.end(), data.dims.begin()))
    return Error("segment_ids ", ShapeString(ids.dims), " must be a prefix of data ", ShapeString(data.dims));
  Dims want{segments};
  want.insert(want.end(), data.dims.begin() + ids.dims.size(), data.dims.end());
  if (o.dims != want) return Error("output has shape ", ShapeString(o.dims), "; expected ", ShapeString(want));
  const int64_t inner = NumElements(Dims(data.dims.begin() + ids.dims.size(), data.dims.end()));
  *out = std::make_unique<SegmentSumKernel>(NumElements(ids.dims), inner, segments, data.dtype, ids.dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("GatherV2", MakeGather);
NPU_REGISTER_KERNEL("UnsortedSegmentSum", MakeSegmentSum);

}  // namespace
}  // namespace kernels
}  // namespace npu
