// More data movement (reference: graph_engine/ops/array_extra.py). Rearrangements whose source
// of each output element follows from the shapes alone (ReverseV2, Roll, DepthToSpace,
// SpaceToDepth, SpaceToBatchND, BatchToSpaceND, Extract*Patches) are planned at load as one
// source element (or none: zero) per output element and run as element copies of any dtype.
// Variants of existing kernels (Concat, Gather) rename their attrs and use the existing
// factory. Small index ops (OneHot, InvertPermutation, UnravelIndex ...) compute in int64.
#include <cstring>
#include <functional>
#include <set>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {

// The shape StridedSlice gives a tensor of shape `in` (shape_ops.cc).
Status StridedSliceShape(const Attrs& attrs, const Dims& in, Dims* shape);

namespace {

// Copies one element of `size` bytes.
inline void CopyElement(const char* src, char* dst, int size) {
  switch (size) {
    case 1: *dst = *src; break;
    case 2: std::memcpy(dst, src, 2); break;
    case 4: std::memcpy(dst, src, 4); break;
    default: std::memcpy(dst, src, 8); break;
  }
}

// out[i] = in[src[i]], or zero where src[i] < 0.
class IndexMapKernel : public Kernel {
 public:
  IndexMapKernel(std::vector<int64_t> src, int elem) : src_(std::move(src)), elem_(elem) {}

  Status Compute(const KernelArgs& args) const override {
    const char* in = args.in<char>(0);
    char* out = args.out<char>(0);
    ParallelFor(static_cast<int64_t>(src_.size()), 2, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        if (src_[i] < 0) std::memset(out + i * elem_, 0, elem_);
        else CopyElement(in + src_[i] * elem_, out + i * elem_, elem_);
      }
    });
    return Status::Ok();
  }

 private:
  std::vector<int64_t> src_;
  int elem_;
};

// The source of each element of `out`: fn(index of the output element) -> flat input index
// or -1 (zero), visited in row-major order.
std::vector<int64_t> MapOutput(const Dims& out, const std::function<int64_t(const Dims&)>& fn) {
  const int64_t n = NumElements(out);
  std::vector<int64_t> src(n);
  Dims idx(out.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    src[i] = fn(idx);
    for (int64_t a = static_cast<int64_t>(out.size()) - 1; a >= 0; --a) {
      if (++idx[a] < out[a]) break;
      idx[a] = 0;
    }
  }
  return src;
}

int64_t Flat(const Dims& dims, const Dims& idx) {
  int64_t f = 0;
  for (size_t a = 0; a < dims.size(); ++a) f = f * dims[a] + idx[a];
  return f;
}

Status SameDType(const KernelDef& def) {
  if (def.inputs[0].dtype != def.outputs[0].dtype)
    return Error("output is ", DTypeName(def.outputs[0].dtype), "; expected the input dtype ",
                 DTypeName(def.inputs[0].dtype));
  return Status::Ok();
}

// A kernel planned as an index map from input 0 (other inputs must be absent).
using MapPlanner = std::function<Status(const KernelDef&, const Dims& in, const Dims& out,
                                        std::function<int64_t(const Dims&)>*)>;
KernelFactory MapKernel(MapPlanner planner) {
  return [planner](const KernelDef& def, std::unique_ptr<Kernel>* out) -> Status {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    NPU_RETURN_IF_ERROR(SameDType(def));
    std::function<int64_t(const Dims&)> fn;
    NPU_RETURN_IF_ERROR(planner(def, def.inputs[0].dims, def.outputs[0].dims, &fn));
    *out = std::make_unique<IndexMapKernel>(MapOutput(def.outputs[0].dims, fn), DTypeSize(def.inputs[0].dtype));
    return Status::Ok();
  };
}

Status SameShape(const Dims& in, const Dims& out) {
  if (in != out) return Error("output has shape ", ShapeString(out), "; expected ", ShapeString(in));
  return Status::Ok();
}

Status PlanReverse(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  NPU_RETURN_IF_ERROR(SameShape(in, out));
  if (in.empty() || NumElements(in) == 0) {   // TF returns these unchecked, whatever the axes
    *fn = [](const Dims&) -> int64_t { return 0; };
    return Status::Ok();
  }
  std::vector<int64_t> axes;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("axis", &axes));
  std::vector<bool> flip(in.size(), false);
  for (int64_t a : axes) {
    NPU_RETURN_IF_ERROR(NormalizeAxis(a, static_cast<int64_t>(in.size()), &a));
    if (flip[a]) return Error("axis ", a, " specified more than once");
    flip[a] = true;
  }
  *fn = [in, flip](const Dims& i) {
    Dims s = i;
    for (size_t a = 0; a < s.size(); ++a) if (flip[a]) s[a] = in[a] - 1 - s[a];
    return Flat(in, s);
  };
  return Status::Ok();
}

Status PlanRoll(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  NPU_RETURN_IF_ERROR(SameShape(in, out));
  std::vector<int64_t> shift, axes;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("shift", &shift));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("axis", &axes));
  if (shift.size() != axes.size())
    return Error("shift ", ShapeString(shift), " and axis ", ShapeString(axes), " must have the same size");
  Dims total(in.size(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a;
    NPU_RETURN_IF_ERROR(NormalizeAxis(axes[k], static_cast<int64_t>(in.size()), &a));
    total[a] += shift[k];
  }
  *fn = [in, total](const Dims& i) {
    Dims s = i;
    for (size_t a = 0; a < s.size(); ++a)
      if (in[a] > 0) s[a] = ((s[a] - total[a]) % in[a] + in[a]) % in[a];
    return Flat(in, s);
  };
  return Status::Ok();
}

Status BlockSize(const KernelDef& def, const Dims& in, int64_t* b) {
  std::string format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &format));
  if (format != "NHWC") return Error("only data_format NHWC is supported, got ", format);
  if (in.size() != 4) return Error("input must be 4-D, got ", ShapeString(in));
  NPU_RETURN_IF_ERROR(def.attrs.Int("block_size", b));
  if (*b < 2) return Error("block_size ", *b, " must be at least 2");
  return Status::Ok();
}

// DepthToSpace: out[n, h*b + i, w*b + j, c] = in[n, h, w, (i*b + j)*C' + c].
Status PlanDepthToSpace(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  int64_t b;
  NPU_RETURN_IF_ERROR(BlockSize(def, in, &b));
  if (in[3] % (b * b)) return Error("input depth ", in[3], " is not divisible by block_size squared ", b * b);
  NPU_RETURN_IF_ERROR(SameShape({in[0], in[1] * b, in[2] * b, in[3] / (b * b)}, out));
  const int64_t c = out[3];
  *fn = [in, b, c](const Dims& i) {
    return Flat(in, {i[0], i[1] / b, i[2] / b, ((i[1] % b) * b + i[2] % b) * c + i[3]});
  };
  return Status::Ok();
}

// SpaceToDepth: the inverse.
Status PlanSpaceToDepth(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  int64_t b;
  NPU_RETURN_IF_ERROR(BlockSize(def, in, &b));
  if (in[1] % b || in[2] % b) return Error("image size ", ShapeString(in), " is not divisible by block_size ", b);
  NPU_RETURN_IF_ERROR(SameShape({in[0], in[1] / b, in[2] / b, in[3] * b * b}, out));
  const int64_t c = in[3];
  *fn = [in, b, c](const Dims& i) {
    const int64_t blk = i[3] / c;
    return Flat(in, {i[0], i[1] * b + blk / b, i[2] * b + blk % b, i[3] % c});
  };
  return Status::Ok();
}

// block_shape [M] and paddings/crops [M, 2] (`pairs_name`) as the ND ops take them.
Status BlockArgs(const KernelDef& def, const char* pairs_name, const Dims& in, Dims* block, Dims* pairs) {
  if (def.attrs.Has("block_size")) {     // SpaceToBatch/BatchToSpace: a square block on 4-D input
    int64_t b;
    NPU_RETURN_IF_ERROR(def.attrs.Int("block_size", &b));
    if (in.size() != 4) return Error("input must be 4-D, got ", ShapeString(in));
    *block = {b, b};
  } else {
    NPU_RETURN_IF_ERROR(def.attrs.IntList("block_shape", block));
  }
  NPU_RETURN_IF_ERROR(def.attrs.IntList(pairs_name, pairs));
  const size_t m = block->size();
  if (m < 1 || in.size() < m + 1 || pairs->size() != 2 * m)
    return Error("block_shape ", ShapeString(*block), " and ", pairs_name, " ", ShapeString(*pairs),
                 " do not fit input ", ShapeString(in));
  for (size_t i = 0; i < m; ++i)
    if ((*block)[i] < 1 || (*pairs)[2 * i] < 0 || (*pairs)[2 * i + 1] < 0)
      return Error("block_shape must be positive and ", pairs_name, " non-negative");
  return Status::Ok();
}

// SpaceToBatchND: out[(o * B + n), s..., r...] with o the block offset (row-major over block)
// reads padded[n, s_i * b_i + o_i, ..., r...], zero in the padding.
Status PlanSpaceToBatch(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  Dims block, pads;
  NPU_RETURN_IF_ERROR(BlockArgs(def, "paddings", in, &block, &pads));
  const size_t m = block.size();
  Dims want = in;
  want[0] = in[0] * NumElements(block);
  for (size_t i = 0; i < m; ++i) {
    const int64_t padded = in[1 + i] + pads[2 * i] + pads[2 * i + 1];
    if (padded % block[i]) return Error("padded dimension ", padded, " is not divisible by block ", block[i]);
    want[1 + i] = padded / block[i];
  }
  NPU_RETURN_IF_ERROR(SameShape(want, out));
  *fn = [in, block, pads, m](const Dims& i) -> int64_t {
    Dims s = i;
    int64_t o = i[0] / in[0];
    s[0] = i[0] % in[0];
    for (int64_t k = static_cast<int64_t>(m) - 1; k >= 0; --k) {
      const int64_t off = o % block[k];
      o /= block[k];
      const int64_t p = i[1 + k] * block[k] + off - pads[2 * k];
      if (p < 0 || p >= in[1 + k]) return -1;
      s[1 + k] = p;
    }
    return Flat(in, s);
  };
  return Status::Ok();
}

// BatchToSpaceND: the inverse, cropped.
Status PlanBatchToSpace(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  Dims block, crops;
  NPU_RETURN_IF_ERROR(BlockArgs(def, "crops", in, &block, &crops));
  const size_t m = block.size();
  const int64_t prod = NumElements(block);
  if (in[0] % prod)
    return InvalidArgument("input batch dimension (", in[0], ") is not divisible by product of block sizes (", prod, ")");
  Dims want = in;
  want[0] = in[0] / prod;
  for (size_t i = 0; i < m; ++i) {
    want[1 + i] = in[1 + i] * block[i] - crops[2 * i] - crops[2 * i + 1];
    if (want[1 + i] < 0) return Error("crops are larger than dimension ", 1 + i, " of ", ShapeString(in));
  }
  NPU_RETURN_IF_ERROR(SameShape(want, out));
  const int64_t batch = want[0];
  *fn = [in, block, crops, m, batch](const Dims& i) {
    Dims s = i;
    int64_t o = 0;
    for (size_t k = 0; k < m; ++k) {
      const int64_t full = i[1 + k] + crops[2 * k];
      o = o * block[k] + full % block[k];
      s[1 + k] = full / block[k];
    }
    s[0] = o * batch + i[0];
    return Flat(in, s);
  };
  return Status::Ok();
}

// Extract{Image,Volume}Patches: out[n, pos..., (tap..., c)] = in[n, pos*stride - before +
// tap*rate ..., c], zero outside.
Status PlanPatches(const KernelDef& def, const Dims& in, const Dims& out, std::function<int64_t(const Dims&)>* fn) {
  const size_t r = in.size();
  if (r != 4 && r != 5) return Error("input must be 4-D or 5-D, got ", ShapeString(in));
  const size_t sp = r - 2;
  std::vector<int64_t> ks, st, rates;
  std::string padding;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("ksizes", &ks));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("strides", &st));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("rates", std::vector<int64_t>(r, 1), &rates));
  NPU_RETURN_IF_ERROR(def.attrs.String("padding", &padding));
  if (ks.size() != r || st.size() != r || rates.size() != r)
    return Error("ksizes, strides and rates need ", r, " entries");
  if (padding != "VALID" && padding != "SAME") return Error("padding ", padding, " must be VALID or SAME");
  Dims before(sp), want{in[0]};
  int64_t taps = 1;
  for (size_t d = 0; d < sp; ++d) {
    const int64_t k = ks[1 + d], s = st[1 + d], q = rates[1 + d], n = in[1 + d];
    if (k < 1 || s < 1 || q < 1) return Error("ksizes, strides and rates must be positive");
    const int64_t eff = (k - 1) * q + 1;
    int64_t o;
    if (padding == "VALID") {
      o = (n - eff + s) / s;   // truncating, as TF's GetWindowedOutputSize
      if (o < 0)
        return InvalidArgument("Computed output size would be negative: ", o, " [input_size: ", n,
                               ", effective_filter_size: ", eff, ", stride: ", s, "]");
      before[d] = 0;
    } else {
      o = (n + s - 1) / s;
      before[d] = std::max<int64_t>((o - 1) * s + eff - n, 0) / 2;
    }
    want.push_back(o);
    taps *= k;
  }
  want.push_back(taps * in[r - 1]);
  NPU_RETURN_IF_ERROR(SameShape(want, out));
  const int64_t c = in[r - 1];
  *fn = [in, ks, st, rates, before, sp, c](const Dims& i) -> int64_t {
    Dims s(in.size());
    s[0] = i[0];
    s[sp + 1] = i[sp + 1] % c;
    int64_t tap = i[sp + 1] / c;
    for (int64_t d = static_cast<int64_t>(sp) - 1; d >= 0; --d) {
      const int64_t t = tap % ks[1 + d];
      tap /= ks[1 + d];
      const int64_t p = i[1 + d] * st[1 + d] - before[d] + t * rates[1 + d];
      if (p < 0 || p >= in[1 + d]) return -1;
      s[1 + d] = p;
    }
    return Flat(in, s);
  };
  return Status::Ok();
}

// Another kernel's factory with attrs renamed or added (Concat -> ConcatV2 ...).
KernelFactory Variant(const char* kernel, std::function<Status(Attrs*)> edit) {
  return [kernel, edit](const KernelDef& def, std::unique_ptr<Kernel>* out) -> Status {
    const KernelFactory* base = FindKernel(kernel);
    if (base == nullptr) return Error("needs the ", kernel, " kernel");
    KernelDef copy = def;
    NPU_RETURN_IF_ERROR(edit(&copy.attrs));
    return (*base)(copy, out);
  };
}

Status Rename(Attrs* a, const char* from, const char* to) {
  if (!a->Has(from)) return Error("attribute ", from, " is missing");
  a->values[to] = a->values.at(from);
  return Status::Ok();
}

AttrValue IntAttr(int64_t v) {
  AttrValue a;
  a.type = AttrValue::kInt;
  a.i = v;
  return a;
}

// ReverseSequence: within batch entry b, the first seq_lengths[b] entries along seq_dim reversed.
class ReverseSequenceKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(SameDType(def));
    const Dims& in = def.inputs[0].dims;
    NPU_RETURN_IF_ERROR(SameShape(in, def.outputs[0].dims));
    auto k = std::make_unique<ReverseSequenceKernel>();
    NPU_RETURN_IF_ERROR(def.attrs.Int("seq_dim", &k->seq_));
    NPU_RETURN_IF_ERROR(def.attrs.Int("batch_dim", 0, &k->batch_));
    const int64_t rank = static_cast<int64_t>(in.size());
    if (k->seq_ < 0 || k->seq_ >= rank || k->batch_ < 0 || k->batch_ >= rank || k->seq_ == k->batch_)
      return Error("seq_dim ", k->seq_, " and batch_dim ", k->batch_, " must be different axes of ", ShapeString(in));
    if (def.inputs[1].dims != Dims{in[k->batch_]})
      return Error("seq_lengths ", ShapeString(def.inputs[1].dims), " must be [", in[k->batch_], "]");
    k->in_ = in;
    k->len_dtype_ = def.inputs[1].dtype;
    k->elem_ = DTypeSize(def.inputs[0].dtype);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<int64_t> lens(in_[batch_]);
    Load<int64_t>(len_dtype_, args.in(1), in_[batch_], lens.data());
    for (size_t b = 0; b < lens.size(); ++b) {
      if (lens[b] < 0) return InvalidArgument("seq_lens(", b, ") < 0");
      if (lens[b] > in_[seq_]) return InvalidArgument("seq_lens(", b, ") > input.dims(", seq_, ")");
    }
    const int64_t n = NumElements(in_);
    if (n == 0) return Status::Ok();
    const Dims strides = RowMajorStrides(in_);
    const char* src = args.in<char>(0);
    char* dst = args.out<char>(0);
    ParallelFor(n, 4, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = i / strides[batch_] % in_[batch_], s = i / strides[seq_] % in_[seq_];
        const int64_t from = s < lens[b] ? i + (lens[b] - 1 - 2 * s) * strides[seq_] : i;
        CopyElement(src + from * elem_, dst + i * elem_, elem_);
      }
    });
    return Status::Ok();
  }

 private:
  bool ChecksValues() const override { return true; }
  Dims in_;
  int64_t seq_ = 0, batch_ = 0;
  int len_dtype_ = kInt64, elem_ = 4;
};

// OneHot: on_value where indices == depth position, off_value elsewhere.
class OneHotKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 3, 1));
    auto k = std::make_unique<OneHotKernel>();
    const Dims& i = def.inputs[0].dims;
    int64_t axis;
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("depth", &k->depth_));
    NPU_RETURN_IF_ERROR(def.attrs.Int("axis", -1, &axis));
    if (axis < -1 || axis > static_cast<int64_t>(i.size())) return Error("axis ", axis, " is out of range");
    if (axis == -1) axis = static_cast<int64_t>(i.size());
    Dims want = i;
    want.insert(want.begin() + axis, k->depth_);
    NPU_RETURN_IF_ERROR(SameShape(want, def.outputs[0].dims));
    for (int j : {1, 2})
      if (def.inputs[j].dtype != def.outputs[0].dtype || NumElements(def.inputs[j].dims) != 1)
        return Error("on_value and off_value must be scalars of the output dtype");
    k->outer_ = NumElements(Dims(i.begin(), i.begin() + axis));
    k->inner_ = NumElements(Dims(i.begin() + axis, i.end()));
    k->index_dtype_ = def.inputs[0].dtype;
    k->elem_ = DTypeSize(def.outputs[0].dtype);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    std::vector<int64_t> idx(outer_ * inner_);
    Load<int64_t>(index_dtype_, args.in(0), outer_ * inner_, idx.data());
    const char *on = args.in<char>(1), *off = args.in<char>(2);
    char* o = args.out<char>(0);
    const int64_t block = depth_ * inner_;   // one outer position's [depth, inner]
    ParallelFor(outer_, block, [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) {   // off everywhere, then on at each index in range
        char* dst = o + a * block * elem_;
        for (int64_t e = 0; e < block; ++e) CopyElement(off, dst + e * elem_, elem_);
        for (int64_t c = 0; c < inner_; ++c) {
          const int64_t d = idx[a * inner_ + c];
          if (d >= 0 && d < depth_) CopyElement(on, dst + (d * inner_ + c) * elem_, elem_);
        }
      }
    });
    return Status::Ok();
  }

 private:
  int64_t depth_ = 0, outer_ = 1, inner_ = 1;
  int index_dtype_ = kInt64, elem_ = 4;
};

// LinSpace in float32: start + i * step, the last element exactly stop.
class LinSpaceKernel : public Kernel {
 public:
  explicit LinSpaceKernel(int64_t num) : num_(num) {}
  Status Compute(const KernelArgs& args) const override {
    const float start = *args.in<float>(0), stop = *args.in<float>(1);
    float* o = args.out<float>(0);
    if (num_ == 1) { o[0] = start; return Status::Ok(); }
    const float step = (stop - start) / static_cast<float>(num_ - 1);
    for (int64_t i = 0; i < num_ - 1; ++i) o[i] = start + step * static_cast<float>(i);
    o[num_ - 1] = stop;
    return Status::Ok();
  }
 private:
  int64_t num_;
};

Status MakeLinSpace(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  int64_t num;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("num", &num));
  if (num <= 0) return InvalidArgument("Requires num > 0: ", num);
  for (const TensorDesc* t : {&def.inputs[0], &def.inputs[1], &def.outputs[0]})
    if (t->dtype != kFloat) return Error("supports float32 only, got ", DTypeName(t->dtype));
  NPU_RETURN_IF_ERROR(SameShape({num}, def.outputs[0].dims));
  *out = std::make_unique<LinSpaceKernel>(num);
  return Status::Ok();
}

// Empty: zeros (TF leaves them uninitialized unless init is set).
class ZerosKernel : public Kernel {
 public:
  explicit ZerosKernel(int64_t bytes) : bytes_(bytes) {}
  Status Compute(const KernelArgs& args) const override {
    if (bytes_) std::memset(args.out(0), 0, bytes_);
    return Status::Ok();
  }
 private:
  int64_t bytes_;
};

Status MakeEmpty(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 0, 1));
  Dims shape;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("shape", &shape));
  NPU_RETURN_IF_ERROR(SameShape(shape, def.outputs[0].dims));
  *out = std::make_unique<ZerosKernel>(NumElements(shape) * DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// Small integer-vector ops computed in int64: fn(inputs, output) with the output length fixed.
using IntFn = std::function<Status(const std::vector<std::vector<int64_t>>&, std::vector<int64_t>*)>;
class IntVectorKernel : public Kernel {
 public:
  IntVectorKernel(std::vector<TensorDesc> in, TensorDesc out, IntFn fn)
      : in_(std::move(in)), out_(std::move(out)), fn_(std::move(fn)) {}
  Status Compute(const KernelArgs& args) const override {
    std::vector<std::vector<int64_t>> xs(in_.size());
    for (size_t k = 0; k < in_.size(); ++k) {
      xs[k].resize(NumElements(in_[k].dims));
      Load<int64_t>(in_[k].dtype, args.in(static_cast<int>(k)), xs[k].size(), xs[k].data());
    }
    std::vector<int64_t> y(NumElements(out_.dims));
    NPU_RETURN_IF_ERROR(fn_(xs, &y));
    Store<int64_t>(out_.dtype, y.data(), y.size(), args.out(0));
    return Status::Ok();
  }
 private:
  bool ChecksValues() const override { return true; }
  std::vector<TensorDesc> in_;
  TensorDesc out_;
  IntFn fn_;
};

Status CheckInts(const KernelDef& def, int n_in) {
  NPU_RETURN_IF_ERROR(CheckArity(def, n_in, 1));
  for (const auto* descs : {&def.inputs, &def.outputs})
    for (const TensorDesc& d : *descs)
      if (d.dtype != kInt32 && d.dtype != kInt64) return Error("supports int32 and int64 only, got ", DTypeName(d.dtype));
  return Status::Ok();
}

Status MakeInvertPermutation(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckInts(def, 1));
  NPU_RETURN_IF_ERROR(SameShape(def.inputs[0].dims, def.outputs[0].dims));
  if (def.inputs[0].dims.size() != 1) return Error("x must be a vector, got ", ShapeString(def.inputs[0].dims));
  *out = std::make_unique<IntVectorKernel>(def.inputs, def.outputs[0], [](const auto& xs, std::vector<int64_t>* y) {
    const std::vector<int64_t>& x = xs[0];
    const int64_t n = static_cast<int64_t>(x.size());
    y->assign(n, -1);
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] < 0 || x[i] >= n) return InvalidArgument(x[i], " is not between 0 and ", n);
      if ((*y)[x[i]] != -1) return InvalidArgument(x[i], " is duplicated in the input.");
      (*y)[x[i]] = i;
    }
    return Status::Ok();
  });
  return Status::Ok();
}

Status MakeBroadcastArgs(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckInts(def, 2));
  const Dims &a = def.inputs[0].dims, &b = def.inputs[1].dims;
  if (a.size() != 1 || b.size() != 1) return Error("s0 and s1 must be vectors");
  NPU_RETURN_IF_ERROR(SameShape({std::max(a[0], b[0])}, def.outputs[0].dims));
  *out = std::make_unique<IntVectorKernel>(def.inputs, def.outputs[0], [](const auto& xs, std::vector<int64_t>* y) {
    const std::vector<int64_t>&s0 = xs[0], &s1 = xs[1];
    const size_t n = y->size();
    for (size_t i = 0; i < n; ++i) {   // right-aligned, as numpy broadcasting
      const int64_t d0 = i < n - s0.size() ? 1 : s0[i - (n - s0.size())];
      const int64_t d1 = i < n - s1.size() ? 1 : s1[i - (n - s1.size())];
      if (d0 != d1 && d0 != 1 && d1 != 1) {
        std::string t0, t1;
        for (size_t k = 0; k < s0.size(); ++k) t0 += (k ? "," : "") + std::to_string(s0[k]);
        for (size_t k = 0; k < s1.size(); ++k) t1 += (k ? "," : "") + std::to_string(s1[k]);
        return InvalidArgument("Incompatible shapes: [", t0, "] vs. [", t1, "]");
      }
      (*y)[i] = d0 == 1 ? d1 : d0;
    }
    return Status::Ok();
  });
  return Status::Ok();
}

Status MakeUnravelIndex(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckInts(def, 1));
  Dims dims;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("dims", &dims));
  for (int64_t d : dims) if (d <= 0) return InvalidArgument("dims ", ShapeString(dims), " must be positive");
  if (NumElements(def.inputs[0].dims) == 0) return InvalidArgument("received empty tensor indices");
  Dims want{static_cast<int64_t>(dims.size())};
  want.insert(want.end(), def.inputs[0].dims.begin(), def.inputs[0].dims.end());
  NPU_RETURN_IF_ERROR(SameShape(want, def.outputs[0].dims));
  // TF checks only idx < prod(dims): a negative index gets C++'s truncating (idx / stride) % dim.
  *out = std::make_unique<IntVectorKernel>(def.inputs, def.outputs[0], [dims](const auto& xs, std::vector<int64_t>* y) {
    const std::vector<int64_t>& idx = xs[0];
    const int64_t n = static_cast<int64_t>(idx.size()), total = NumElements(dims);
    for (int64_t j = 0; j < n; ++j) {
      if (idx[j] >= total) return InvalidArgument("index is out of bound as with dims");
      int64_t stride = 1;
      for (int64_t a = static_cast<int64_t>(dims.size()) - 1; a >= 0; --a) {
        (*y)[a * n + j] = idx[j] / stride % dims[a];
        stride *= dims[a];
      }
    }
    return Status::Ok();
  });
  return Status::Ok();
}

// TensorStridedSliceUpdate: the input, with the StridedSlice view written from value broadcast
// to the slice's shape (TF's StridedSliceAssignBCast: numpy's rule, and value may have extra
// leading 1s). The view's element offsets come from the StridedSlice kernel run once on the
// input's flat indices, so both ops share one reading of the slice spec. An empty slice ignores
// value, as TF does.
class StridedUpdateKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(SameDType(def));
    const Dims& in = def.inputs[0].dims;
    NPU_RETURN_IF_ERROR(SameShape(in, def.outputs[0].dims));
    if (def.inputs[1].dtype != def.inputs[0].dtype) return Error("value and input differ in dtype");
    Dims slice, v = def.inputs[1].dims, v_strides;
    NPU_RETURN_IF_ERROR(StridedSliceShape(def.attrs, in, &slice));
    auto k = std::make_unique<StridedUpdateKernel>();
    k->bytes_ = NumElements(in) * DTypeSize(def.inputs[0].dtype);
    k->elem_ = DTypeSize(def.inputs[0].dtype);
    if (NumElements(slice) > 0) {
      while (v.size() > slice.size() && v[0] == 1) v.erase(v.begin());
      if (v.size() > slice.size() || !BroadcastStrides(v, slice, &v_strides).ok())
        return InvalidArgument("Cannot broadcast input shape ", ShapeString(def.inputs[1].dims),
                               " into final shape ", ShapeString(slice));
      const KernelFactory* factory = FindKernel("StridedSlice");
      if (factory == nullptr) return Error("needs the StridedSlice kernel");
      KernelDef sd = def;
      sd.kernel = "StridedSlice";
      sd.inputs = {def.inputs[0]};
      sd.inputs[0].dtype = kInt64;
      sd.outputs = {sd.inputs[0]};
      sd.outputs[0].dims = slice;
      std::unique_ptr<Kernel> sk;
      NPU_RETURN_IF_ERROR((*factory)(sd, &sk));
      std::vector<int64_t> iota(NumElements(in));
      for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int64_t>(i);
      k->at_.resize(NumElements(slice));
      const void* ins[] = {iota.data()};
      void* outs[] = {k->at_.data()};
      NPU_RETURN_IF_ERROR(sk->Compute({ins, outs}));
      k->from_ = MapOutput(slice, [v_strides](const Dims& i) {
        int64_t f = 0;
        for (size_t a = 0; a < i.size(); ++a) f += i[a] * v_strides[a];
        return f;
      });
    }
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const char *x = args.in<char>(0), *v = args.in<char>(1);
    char* o = args.out<char>(0);
    if (o != x && bytes_) std::memcpy(o, x, bytes_);
    for (size_t j = 0; j < at_.size(); ++j) CopyElement(v + from_[j] * elem_, o + at_[j] * elem_, elem_);
    return Status::Ok();
  }

 private:
  std::vector<int64_t> at_, from_;   // per slice element: its input offset, its value element
  int64_t bytes_ = 0;
  int elem_ = 4;
};

void RegisterAll() {
  RegisterKernel("ReverseV2", MapKernel(PlanReverse));
  RegisterKernel("Roll", MapKernel(PlanRoll));
  RegisterKernel("DepthToSpace", MapKernel(PlanDepthToSpace));
  RegisterKernel("SpaceToDepth", MapKernel(PlanSpaceToDepth));
  for (const char* name : {"SpaceToBatchND", "SpaceToBatch"}) RegisterKernel(name, MapKernel(PlanSpaceToBatch));
  for (const char* name : {"BatchToSpaceND", "BatchToSpace"}) RegisterKernel(name, MapKernel(PlanBatchToSpace));
  for (const char* name : {"ExtractImagePatches", "ExtractVolumePatches"}) RegisterKernel(name, MapKernel(PlanPatches));
  RegisterKernel("ReverseSequence", ReverseSequenceKernel::Make);
  RegisterKernel("OneHot", OneHotKernel::Make);
  RegisterKernel("LinSpace", MakeLinSpace);
  RegisterKernel("Empty", MakeEmpty);
  RegisterKernel("InvertPermutation", MakeInvertPermutation);
  RegisterKernel("BroadcastArgs", MakeBroadcastArgs);
  RegisterKernel("UnravelIndex", MakeUnravelIndex);
  RegisterKernel("TensorStridedSliceUpdate", StridedUpdateKernel::Make);
  RegisterKernel("Concat", Variant("ConcatV2", [](Attrs* a) { return Rename(a, "concat_dim", "axis"); }));
  RegisterKernel("Gather", Variant("GatherV2", [](Attrs* a) {
    a->values["axis"] = IntAttr(0);
    a->values["batch_dims"] = IntAttr(0);
    return Status::Ok();
  }));
}

StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
