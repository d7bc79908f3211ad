// TransData: converts a value between a logical layout (ND / NHWC / NCHW) and a padded NPU
// format (NC1HWC0, FRACTAL_Z, FILTER_KN). Every conversion is a strided copy over the storage's blocked
// axes, split into the full C0 (or N0) blocks and the last partial one; writing a padded
// format zeroes its padding first (docs/layouts.md: contents unspecified, zero is a choice).
// NHWC <-> NC1HWC0, every activation at a 5HD boundary, copies each pixel's channel run
// directly (RowCopy): the strided walk took 95 us for a 16x32x32x3 input, one 12-byte run at
// a time. HWIO <-> FILTER_KN moves whole rows: each (kh, kw, ci) row of Cout elements is one
// storage row.
#include <cstring>

#include "kernels/format.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

// A channel axis of `extent` elements stored as (outer, inner) block axes of the iteration.
struct Split {
  int outer, inner;
  int64_t extent;
};

// Copies between a padded storage (row-major over `dims`) and a logical layout that walks
// `dims` with `logical` strides. Each split axis pair visits only the real channels.
class BlockedCopy {
 public:
  BlockedCopy(Dims dims, Dims logical, std::vector<Split> splits, bool to_padded, int elem)
      : dims_(std::move(dims)), logical_(std::move(logical)), splits_(std::move(splits)),
        to_padded_(to_padded), elem_(elem) {
    padded_ = RowMajorStrides(dims_);
    for (const Split& s : splits_) has_padding_ |= s.extent % dims_[s.inner] != 0;
  }

  void Run(const void* src, void* dst) const {
    if (to_padded_ && has_padding_) std::memset(dst, 0, NumElements(dims_) * elem_);
    const int k = static_cast<int>(splits_.size());
    for (int mask = 0; mask < (1 << k); ++mask) {   // full blocks / the partial last block
      Dims d = dims_;
      int64_t poff = 0, loff = 0;
      bool empty = false;
      for (int j = 0; j < k; ++j) {
        const Split& s = splits_[j];
        const int64_t block = dims_[s.inner], full = s.extent / block, rem = s.extent % block;
        if (mask >> j & 1) {
          d[s.outer] = 1; d[s.inner] = rem;
          poff += full * padded_[s.outer];
          loff += full * logical_[s.outer];
        } else {
          d[s.outer] = full;
        }
        empty |= d[s.outer] == 0 || d[s.inner] == 0;
      }
      for (int64_t x : d) empty |= x == 0;
      if (empty) continue;
      const StridedPlan plan = to_padded_ ? StridedPlan::Make(d, {padded_, logical_}, {poff, loff})
                                          : StridedPlan::Make(d, {logical_, padded_}, {loff, poff});
      CopyStrided(plan, elem_, src, dst);
    }
  }

 private:
  Dims dims_, logical_, padded_;
  std::vector<Split> splits_;
  bool to_padded_, has_padding_ = false;
  int elem_;
};

// NHWC <-> NC1HWC0: per storage row (n, c1, h) the row's pixels, each a run of the block's
// real channels; the padded side's padding lanes are zeroed.
class RowCopy {
 public:
  RowCopy(Nc1hwc0 g, bool to_padded, int elem) : g_(g), to_padded_(to_padded), elem_(elem) {}

  void Run(const void* src, void* dst) const {
    const int64_t pixel = g_.c * elem_, lanes = g_.c0 * elem_, row_bytes = g_.w * lanes;
    ParallelFor(g_.n * g_.c1 * g_.h, row_bytes, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {          // storage row r = (n * C1 + c1) * H + h
        const int64_t h = r % g_.h, c1 = r / g_.h % g_.c1, n = r / (g_.h * g_.c1);
        const int64_t real = g_.valid(c1);
        const int64_t plain_at = ((n * g_.h + h) * g_.w * g_.c + c1 * g_.c0) * elem_;
        if (to_padded_) {
          char* out = static_cast<char*>(dst) + r * row_bytes;
          const char* in = static_cast<const char*>(src) + plain_at;
          if (real < g_.c0) std::memset(out, 0, row_bytes);
          Runs(in, pixel, out, lanes, real);
        } else {
          Runs(static_cast<const char*>(src) + r * row_bytes, lanes,
               static_cast<char*>(dst) + plain_at, pixel, real);
        }
      }
    });
  }

 private:
  // Copies `real` elements per pixel of one row, `from_step` / `to_step` bytes apart.
  void Runs(const char* from, int64_t from_step, char* to, int64_t to_step, int64_t real) const {
    if (elem_ == sizeof(float)) {
      for (int64_t w = 0; w < g_.w; ++w, from += from_step, to += to_step)
        CopyFloats(reinterpret_cast<float*>(to), reinterpret_cast<const float*>(from), real);
      return;
    }
    for (int64_t w = 0; w < g_.w; ++w, from += from_step, to += to_step)
      std::memcpy(to, from, real * elem_);
  }

  Nc1hwc0 g_;
  bool to_padded_;
  int elem_;
};

// HWIO <-> FILTER_KN: the padded side's columns past Cout are zeroed.
class KnRows {
 public:
  KnRows(Dims hwio, int64_t c0, bool to_padded, int elem)
      : kh_(hwio[0]), kw_(hwio[1]), ci_(hwio[2]), co_(hwio[3]), c0_(c0),
        np_(CeilDiv(co_, kN0) * kN0), to_padded_(to_padded), elem_(elem) {}

  void Run(const void* src, void* dst) const {
    const int64_t taps = kh_ * kw_, plain = co_ * elem_, padded = np_ * elem_;
    ParallelFor(taps * ci_, padded, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {          // HWIO row r = (kh * KW + kw) * Cin + ci
        const int64_t ci = r % ci_, tap = r / ci_;
        const int64_t kn = FilterKnRow(tap, ci, taps, ci_, c0_);
        if (to_padded_) {
          char* out = static_cast<char*>(dst) + kn * padded;
          std::memcpy(out, static_cast<const char*>(src) + r * plain, plain);
          std::memset(out + plain, 0, padded - plain);
        } else {
          std::memcpy(static_cast<char*>(dst) + r * plain, static_cast<const char*>(src) + kn * padded, plain);
        }
      }
    });
  }

 private:
  int64_t kh_, kw_, ci_, co_, c0_, np_;
  bool to_padded_;
  int elem_;
};

template <class Copy>
class TransDataKernel : public Kernel {
 public:
  explicit TransDataKernel(Copy copy) : copy_(std::move(copy)) {}
  Status Compute(const KernelArgs& args) const override {
    copy_.Run(args.in(0), args.out(0));
    return Status::Ok();
  }

 private:
  Copy copy_;
};

Status MakeTransData(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  int64_t src_format, dst_format;
  NPU_RETURN_IF_ERROR(def.attrs.Int("src_format", &src_format));
  NPU_RETURN_IF_ERROR(def.attrs.Int("dst_format", &dst_format));
  const TensorDesc &in = def.inputs[0], &o = def.outputs[0];
  // ND, NCHW and NHWC storage are all row-major: the attr says how to read the plain side.
  auto stored_as = [](int64_t attr, int actual) { return IsPaddedFormat(attr) ? actual == attr : !IsPaddedFormat(actual); };
  if (!stored_as(src_format, in.format) || !stored_as(dst_format, o.format))
    return Error("converts ", FormatName(src_format), " -> ", FormatName(dst_format),
                 " but its values are stored ", FormatName(in.format), " -> ", FormatName(o.format));
  if (in.dtype != o.dtype) return Error("input and output dtypes differ");
  const int elem = DTypeSize(in.dtype);
  if (elem == 0) return Error("does not support ", DTypeName(in.dtype), "; supported: ", SupportedDTypeNames());
  const bool to_padded = IsPaddedFormat(dst_format);
  const int64_t padded = to_padded ? dst_format : src_format, plain = to_padded ? src_format : dst_format;
  const TensorDesc& pd = to_padded ? o : in;
  const TensorDesc& ld = to_padded ? in : o;
  if (IsPaddedFormat(plain) || (padded != kNC1HWC0 && padded != kFractalZ && padded != kFilterKN))
    return Error("converts between ND/NCHW/NHWC and NC1HWC0/FRACTAL_Z/FILTER_KN; got ", FormatName(src_format),
                 " -> ", FormatName(dst_format));
  const int64_t c0 = C0Of(in.dtype);

  if (padded == kFilterKN) {
    if (plain == kNCHW) return Error("FILTER_KN converts from/to HWIO filters (ND), not NCHW");
    if (pd.dims.size() != 4 || ld.dims != pd.dims)
      return Error("FILTER_KN needs equal 4-D HWIO shapes, got ", ShapeString(in.dims), " -> ", ShapeString(o.dims));
    *out = std::make_unique<TransDataKernel<KnRows>>(KnRows(pd.dims, c0, to_padded, elem));
    return Status::Ok();
  }

  if (padded == kFractalZ) {
    if (plain == kNCHW) return Error("FRACTAL_Z converts from/to HWIO filters (ND), not NCHW");
    if (pd.dims.size() != 4 || ld.dims != pd.dims)
      return Error("FRACTAL_Z needs equal 4-D HWIO shapes, got ", ShapeString(in.dims), " -> ", ShapeString(o.dims));
    const int64_t kh = pd.dims[0], kw = pd.dims[1], ci = pd.dims[2], co = pd.dims[3];
    // Iteration axes (c1, kh, kw, n1, n0, c0) of storage [C1*KH*KW, N1, N0, C0].
    Dims dims = {CeilDiv(ci, c0), kh, kw, CeilDiv(co, kN0), kN0, c0};
    Dims logical = {c0 * co, kw * ci * co, ci * co, kN0, 1, co};
    *out = std::make_unique<TransDataKernel<BlockedCopy>>(
        BlockedCopy(dims, logical, {{0, 5, ci}, {3, 4, co}}, to_padded, elem));
    return Status::Ok();
  }

  Nc1hwc0 g;
  NPU_RETURN_IF_ERROR(Nc1hwc0::Of(pd, &g));
  const Dims want = plain == kNCHW ? Dims{g.n, g.c, g.h, g.w} : pd.dims;
  if (ld.dims != want || (plain == kNCHW && pd.dims.size() != 4))
    return Error("the ", FormatName(plain), " side must have shape ", ShapeString(want), " (NC1HWC0 values are",
                 " logically NHWC), got ", ShapeString(ld.dims));
  if (plain != kNCHW) {
    *out = std::make_unique<TransDataKernel<RowCopy>>(RowCopy(g, to_padded, elem));
    return Status::Ok();
  }
  // Iteration axes (n, c1, h, w, c0) of storage [N, C1, H, W, C0].
  Dims dims = {g.n, g.c1, g.h, g.w, g.c0};
  Dims logical = {g.c * g.h * g.w, g.c0 * g.h * g.w, g.w, 1, g.h * g.w};
  *out = std::make_unique<TransDataKernel<BlockedCopy>>(BlockedCopy(dims, logical, {{1, 4, g.c}}, to_padded, elem));
  return Status::Ok();
}

NPU_REGISTER_FORMAT_KERNEL("TransData", MakeTransData);

}  // namespace
}  // namespace kernels
}  // namespace npu
