// Data movement on NC1HWC0 values: Pad of H and W (ZeroPadding2D) and ConcatV2 on the
// channel axis (DenseNet). Both copy raw elements, so they serve every dtype.
#include <cstring>

#include "kernels/format.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

// Pad: zero-fills the output, then copies each input row (W * C0 lanes) into place.
class Pad5hdKernel : public Kernel {
 public:
  Pad5hdKernel(Nc1hwc0 x, Nc1hwc0 y, int64_t top, int64_t left, int elem)
      : x_(x), y_(y), top_(top), left_(left), elem_(elem) {}
  Status Compute(const KernelArgs& args) const override {
    const char* src = args.in<char>(0);
    char* dst = args.out<char>(0);
    std::memset(dst, 0, y_.size() * elem_);
    const int64_t row = x_.w * x_.c0 * elem_;
    ParallelFor(x_.n * x_.c1 * x_.h, x_.w * x_.c0, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t plane = r / x_.h, h = r % x_.h;
        std::memcpy(dst + ((plane * y_.h + h + top_) * y_.w + left_) * y_.c0 * elem_, src + r * row, row);
      }
    });
    return Status::Ok();
  }

 private:
  Nc1hwc0 x_, y_;
  int64_t top_, left_;
  int elem_;
};

Status MakePad5hd(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const TensorDesc &in = def.inputs[0], &o = def.outputs[0];
  std::vector<int64_t> p;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("paddings", &p));
  if (in.format != kNC1HWC0 || o.format != kNC1HWC0 || in.dims.size() != 4 || p.size() != 8 || p[0] || p[1] ||
      p[6] || p[7] || in.dtype != o.dtype)
    return Error("on NC1HWC0 pads the H and W axes of a 4-D value only; got ", FormatName(in.format), " -> ",
                 FormatName(o.format), ", paddings ", ShapeString(p));
  Nc1hwc0 x, y;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(in, &x));
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(o, &y));
  if (o.dims != Dims{x.n, x.h + p[2] + p[3], x.w + p[4] + p[5], x.c})
    return Error("output shape ", ShapeString(o.dims), " does not match the paddings");
  *out = std::make_unique<Pad5hdKernel>(x, y, p[2], p[4], DTypeSize(in.dtype));
  return Status::Ok();
}

// ConcatV2 on channels: channel c of input i lands at channel offset_i + c. Inputs whose
// channels start on a C0 boundary and fill whole blocks copy (n, c1) planes; the others copy
// lane by lane.
class Concat5hdKernel : public Kernel {
 public:
  Concat5hdKernel(std::vector<Nc1hwc0> xs, Nc1hwc0 y, int elem) : xs_(std::move(xs)), y_(y), elem_(elem) {}
  Status Compute(const KernelArgs& args) const override {
    const int64_t plane = y_.plane() * elem_;
    int64_t offset = 0;
    for (size_t i = 0; i < xs_.size(); ++i) {
      const Nc1hwc0& x = xs_[i];
      const char* src = args.in<char>(static_cast<int>(i));
      char* dst = args.out<char>(0);
      if (offset % y_.c0 == 0 && (x.c % x.c0 == 0 || i + 1 == xs_.size())) {
        for (int64_t n = 0; n < x.n; ++n)
          std::memcpy(dst + (n * y_.c1 + offset / y_.c0) * plane, src + n * x.c1 * plane, x.c1 * plane);
      } else {
        for (int64_t c = 0; c < x.c; ++c) {
          const int64_t d = offset + c;
          const Dims dims = {x.n, x.h * x.w};
          const StridedPlan lane = StridedPlan::Make(
              dims, {{y_.c1 * y_.plane(), y_.c0}, {x.c1 * x.plane(), x.c0}},
              {d / y_.c0 * y_.plane() + d % y_.c0, c / x.c0 * x.plane() + c % x.c0});
          CopyStrided(lane, elem_, src, dst);
        }
      }
      offset += x.c;
    }
    return Status::Ok();
  }

 private:
  std::vector<Nc1hwc0> xs_;
  Nc1hwc0 y_;
  int elem_;
};

Status MakeConcat5hd(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, -1, 1));
  const TensorDesc& o = def.outputs[0];
  int64_t axis;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("axis", &axis));
  if (o.format != kNC1HWC0 || o.dims.size() != 4 || (axis != 3 && axis != -1))
    return Error("on NC1HWC0 concatenates 4-D values on the channel axis (3) only; got axis ", axis,
                 ", output ", FormatName(o.format), " ", ShapeString(o.dims));
  Nc1hwc0 y;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(o, &y));
  std::vector<Nc1hwc0> xs;
  int64_t channels = 0;
  for (size_t i = 0; i < def.inputs.size(); ++i) {
    const TensorDesc& d = def.inputs[i];
    Nc1hwc0 x;
    if (d.format != kNC1HWC0 || d.dtype != o.dtype || d.dims.size() != 4 || !Nc1hwc0::Of(d, &x).ok() ||
        x.n != y.n || x.h != y.h || x.w != y.w)
      return Error("input ", i, " must be NC1HWC0 ", DTypeName(o.dtype), " [", y.n, ",", y.h, ",", y.w,
                   ",C]; got ", FormatName(d.format), " ", DTypeName(d.dtype), " ", ShapeString(d.dims));
    channels += x.c;
    xs.push_back(x);
  }
  if (channels != y.c) return Error("inputs have ", channels, " channels in all; the output has ", y.c);
  *out = std::make_unique<Concat5hdKernel>(std::move(xs), y, DTypeSize(o.dtype));
  return Status::Ok();
}

NPU_REGISTER_FORMAT_KERNEL("Pad", MakePad5hd);
NPU_REGISTER_FORMAT_KERNEL("ConcatV2", MakeConcat5hd);

}  // namespace
}  // namespace kernels
}  // namespace npu
