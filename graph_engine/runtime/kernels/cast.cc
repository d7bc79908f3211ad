// Cast: converts elements between any two supported dtypes with TF's semantics (see dtype.h),
// through the source dtype's compute type so no precision is lost on the way.
#include <complex>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

template <class T>
void CastRange(int src_dtype, const char* src, int dst_dtype, char* dst, int64_t begin, int64_t end) {
  const int ss = DTypeSize(src_dtype), ds = DTypeSize(dst_dtype);
  T buf[512];
  for (int64_t s = begin; s < end; s += 512) {
    const int64_t m = std::min<int64_t>(512, end - s);
    Load<T>(src_dtype, src + s * ss, m, buf);
    Store<T>(dst_dtype, buf, m, dst + s * ds);
  }
}

// uint64 to a floating dtype: the int64 compute type would read values from 2^63 up as
// negative, so these convert from uint64 itself (one rounding, as TF's static_cast).
template <class T>
void CastUInt64Range(const char* src, int dst_dtype, char* dst, int64_t begin, int64_t end) {
  const uint64_t* s = reinterpret_cast<const uint64_t*>(src);
  const int ds = DTypeSize(dst_dtype);
  T buf[512];
  for (int64_t b = begin; b < end; b += 512) {
    const int64_t m = std::min<int64_t>(512, end - b);
    for (int64_t i = 0; i < m; ++i) buf[i] = static_cast<T>(s[b + i]);
    Store<T>(dst_dtype, buf, m, dst + b * ds);
  }
}

class CastKernel : public Kernel {
 public:
  CastKernel(int64_t n, int src, int dst) : n_(n), src_(src), dst_(dst) {}
  Status Compute(const KernelArgs& args) const override {
    const char* in = args.in<char>(0);
    char* out = args.out<char>(0);
    if (src_ == dst_) {
      if (in != out) std::memcpy(out, in, n_ * DTypeSize(src_));
      return Status::Ok();
    }
    ParallelFor(n_, 2, [&](int64_t b, int64_t e) {
      if (src_ == kComplex64 || dst_ == kComplex64)   // real values as real parts and back (TF)
        return CastRange<std::complex<float>>(src_, in, dst_, out, b, e);
      if (src_ == kUInt64 && IsFloating(dst_))
        return dst_ == kDouble ? CastUInt64Range<double>(in, dst_, out, b, e)
                               : CastUInt64Range<float>(in, dst_, out, b, e);
      switch (ComputeTypeOf(src_)) {
        case ComputeType::kFloat: return CastRange<float>(src_, in, dst_, out, b, e);
        case ComputeType::kDouble: return CastRange<double>(src_, in, dst_, out, b, e);
        case ComputeType::kInt64: return CastRange<int64_t>(src_, in, dst_, out, b, e);
      }
    });
    return Status::Ok();
  }

 private:
  int64_t n_;
  int src_, dst_;
};

Status MakeCast(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const TensorDesc &in = def.inputs[0], &o = def.outputs[0];
  if (in.dims != o.dims)
    return Error("output shape ", ShapeString(o.dims), " differs from input shape ",
                 ShapeString(in.dims));
  int64_t src = in.dtype, dst = o.dtype;
  NPU_RETURN_IF_ERROR(def.attrs.Int("SrcT", src, &src));
  NPU_RETURN_IF_ERROR(def.attrs.Int("DstT", dst, &dst));
  if (src != in.dtype || dst != o.dtype)
    return Error("attributes SrcT=", DTypeName(src), " DstT=", DTypeName(dst),
                 " disagree with the values (", DTypeName(in.dtype), " -> ", DTypeName(o.dtype), ")");
  *out = std::make_unique<CastKernel>(NumElements(o.dims), in.dtype, o.dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("Cast", MakeCast);

}  // namespace
}  // namespace kernels
}  // namespace npu
