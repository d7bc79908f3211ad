// Data movement: Reshape-like copies, Transpose, ConcatV2, Pack/Unpack, Slice, StridedSlice,
// Tile, BroadcastTo, Fill, ZerosLike/OnesLike. Each is planned at load as a few strided
// copies (shape.h) from inputs (or a constant of the kernel) to outputs.
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {
namespace {

struct ViewCopy {
  StridedPlan plan;   // operand 0: destination, 1: source
  int input;          // -1: the kernel's own element (Fill-like kernels)
  int output;
};

class ViewCopyKernel : public Kernel {
 public:
  ViewCopyKernel(std::vector<ViewCopy> copies, int elem_size, uint64_t constant = 0)
      : copies_(std::move(copies)), elem_size_(elem_size), constant_(constant) {}

  Status Compute(const KernelArgs& args) const override {
    for (const ViewCopy& c : copies_) {
      const void* src = c.input < 0 ? static_cast<const void*>(&constant_) : args.in(c.input);
      if (src == args.out(c.output) && IsIdentity(c.plan)) continue;   // aliased in place
      CopyStrided(c.plan, elem_size_, src, args.out(c.output));
    }
    return Status::Ok();
  }

 private:
  static bool IsIdentity(const StridedPlan& p) {
    return p.strides[0] == p.strides[1] && p.offsets[0] == p.offsets[1];
  }
  std::vector<ViewCopy> copies_;
  int elem_size_;
  uint64_t constant_;
};

Status SameDType(const KernelDef& def) {
  const int dtype = def.outputs.empty() ? def.inputs[0].dtype : def.outputs[0].dtype;
  for (const auto* descs : {&def.inputs, &def.outputs})
    for (const TensorDesc& d : *descs)
      if (d.dtype != dtype)
        return Error("mixes ", DTypeName(dtype), " and ", DTypeName(d.dtype), "; all values must share one dtype");
  return Status::Ok();
}

std::unique_ptr<Kernel> Single(const Dims& dims, const Dims& dst_strides, const Dims& src_strides,
                               int64_t src_offset, int elem_size, int input = 0) {
  std::vector<ViewCopy> copies{{StridedPlan::Make(dims, {dst_strides, src_strides}, {0, src_offset}), input, 0}};
  return std::make_unique<ViewCopyKernel>(std::move(copies), elem_size);
}

// Reshape, Squeeze, ExpandDims and the Identity family: the bytes are unchanged.
Status MakeCopy(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  const Dims &in = def.inputs[0].dims, &o = def.outputs[0].dims;
  if (NumElements(in) != NumElements(o))
    return Error("input ", ShapeString(in), " and output ", ShapeString(o), " differ in size");
  const Dims flat{NumElements(o)};
  *out = Single(flat, {1}, {1}, 0, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

Status MakeTranspose(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  std::vector<int64_t> perm;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("perm", &perm));
  const Dims &in = def.inputs[0].dims, &o = def.outputs[0].dims;
  const int64_t rank = static_cast<int64_t>(in.size());
  if (static_cast<int64_t>(perm.size()) != rank)
    return Error("perm ", ShapeString(perm), " has ", perm.size(), " entries; the input has rank ", rank);
  std::vector<bool> seen(rank, false);
  const Dims in_strides = RowMajorStrides(in);
  Dims want(rank), src(rank);
  for (int64_t i = 0; i < rank; ++i) {
    int64_t p;
    NPU_RETURN_IF_ERROR(NormalizeAxis(perm[i], rank, &p));
    if (seen[p]) return Error("perm ", ShapeString(perm), " is not a permutation");
    seen[p] = true;
    want[i] = in[p];
    src[i] = in_strides[p];
  }
  if (o != want) return Error("output has shape ", ShapeString(o), "; expected ", ShapeString(want));
  *out = Single(o, RowMajorStrides(o), src, 0, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// ConcatV2 (many inputs, one output) and Pack: input k lands at an offset along `axis`.
Status MakeConcat(const KernelDef& def, bool pack, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, -1, 1));
  if (def.inputs.empty()) return Error("expects at least one input");
  NPU_RETURN_IF_ERROR(SameDType(def));
  const Dims& o = def.outputs[0].dims;
  const int64_t rank = static_cast<int64_t>(o.size());
  int64_t axis;
  NPU_RETURN_IF_ERROR(pack ? def.attrs.Int("axis", 0, &axis) : def.attrs.Scalar("axis", &axis));
  NPU_RETURN_IF_ERROR(NormalizeAxis(axis, rank, &axis));
  const Dims out_strides = RowMajorStrides(o);
  std::vector<ViewCopy> copies;
  int64_t at = 0;
  for (size_t k = 0; k < def.inputs.size(); ++k) {
    const Dims& in = def.inputs[k].dims;
    Dims view = in;
    if (pack) {   // the input is one slice of the output: read it as size 1 on `axis`
      view.insert(view.begin() + axis, 1);
    }
    Dims want = o;
    if (view.size() == o.size()) want[axis] = view[axis];
    if (view != want)
      return Error("input ", k, " has shape ", ShapeString(in), ", which does not fit output ",
                   ShapeString(o), " along axis ", axis);
    copies.push_back({StridedPlan::Make(view, {out_strides, RowMajorStrides(view)}, {at * out_strides[axis], 0}),
                      static_cast<int>(k), 0});
    at += view[axis];
  }
  if (at != o[axis])
    return Error("inputs fill ", at, " entries along axis ", axis, "; the output has ", o[axis]);
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// Unpack: output k is the slice k of the input along `axis`.
Status MakeUnpack(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, -1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  const Dims& in = def.inputs[0].dims;
  int64_t axis;
  NPU_RETURN_IF_ERROR(def.attrs.Int("axis", 0, &axis));
  NPU_RETURN_IF_ERROR(NormalizeAxis(axis, static_cast<int64_t>(in.size()), &axis));
  if (static_cast<int64_t>(def.outputs.size()) != in[axis])
    return Error("has ", def.outputs.size(), " outputs; axis ", axis, " of ", ShapeString(in),
                 " has ", in[axis], " entries");
  Dims slice = in;
  slice.erase(slice.begin() + axis);
  Dims src = RowMajorStrides(in);
  const int64_t step = src[axis];
  src.erase(src.begin() + axis);
  std::vector<ViewCopy> copies;
  for (size_t k = 0; k < def.outputs.size(); ++k) {
    if (def.outputs[k].dims != slice)
      return Error("output ", k, " has shape ", ShapeString(def.outputs[k].dims), "; expected ",
                   ShapeString(slice));
    copies.push_back({StridedPlan::Make(slice, {RowMajorStrides(slice), src}, {0, static_cast<int64_t>(k) * step}),
                      0, static_cast<int>(k)});
  }
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), DTypeSize(def.inputs[0].dtype));
  return Status::Ok();
}

Status MakeSlice(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  std::vector<int64_t> begin, size;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("begin", &begin));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("size", &size));
  const Dims& in = def.inputs[0].dims;
  if (begin.size() != in.size() || size.size() != in.size())
    return Error("begin ", ShapeString(begin), " and size ", ShapeString(size), " need one entry per axis of ",
                 ShapeString(in));
  const Dims strides = RowMajorStrides(in);
  Dims want(in.size());
  int64_t offset = 0;
  for (size_t a = 0; a < in.size(); ++a) {
    want[a] = size[a] == -1 ? in[a] - begin[a] : size[a];
    if (begin[a] < 0 || want[a] < 0 || begin[a] + want[a] > in[a])
      return Error("slice begin ", ShapeString(begin), " size ", ShapeString(size), " is out of bounds for ",
                   ShapeString(in));
    offset += begin[a] * strides[a];
  }
  const Dims& o = def.outputs[0].dims;
  if (o != want) return Error("output has shape ", ShapeString(o), "; expected ", ShapeString(want));
  *out = Single(o, RowMajorStrides(o), strides, offset, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// The elements TF's StridedSlice spec (begin/end/strides and the five masks) selects from
// a tensor of shape `in`: a strided view, and the shape the op gives it (with new axes and
// without shrunk ones).
struct StridedView {
  Dims dims, strides;   // per input axis: selected count and element step
  int64_t offset = 0;   // element offset of the first selected element
  Dims shape;           // the op's output shape
};

Status MakeStridedView(const Attrs& attrs, const Dims& in, StridedView* v) {
  std::vector<int64_t> begin, end, stride;
  NPU_RETURN_IF_ERROR(attrs.IntList("begin", &begin));
  NPU_RETURN_IF_ERROR(attrs.IntList("end", &end));
  NPU_RETURN_IF_ERROR(attrs.IntList("strides", &stride));
  int64_t begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_mask;
  NPU_RETURN_IF_ERROR(attrs.Int("begin_mask", 0, &begin_mask));
  NPU_RETURN_IF_ERROR(attrs.Int("end_mask", 0, &end_mask));
  NPU_RETURN_IF_ERROR(attrs.Int("ellipsis_mask", 0, &ellipsis_mask));
  NPU_RETURN_IF_ERROR(attrs.Int("new_axis_mask", 0, &new_axis_mask));
  NPU_RETURN_IF_ERROR(attrs.Int("shrink_axis_mask", 0, &shrink_mask));
  if (end.size() != begin.size() || stride.size() != begin.size())
    return Error("begin, end and strides differ in length: ", begin.size(), ", ", end.size(), ", ", stride.size());
  if (ellipsis_mask & (ellipsis_mask - 1)) return Error("ellipsis_mask has more than one bit set");
  const int64_t rank = static_cast<int64_t>(in.size()), n = static_cast<int64_t>(begin.size());
  auto bit = [](int64_t mask, int64_t i) { return i < 63 && ((mask >> i) & 1); };

  // Expand the sparse spec to one entry per input axis; remember where new axes go.
  struct Axis { int64_t b = 0, e = 0, s = 1; bool full = true, bm = false, em = false, shrink = false; };
  std::vector<Axis> axes;
  std::vector<int64_t> final_axes;   // input axis per output axis, -1 for a new axis
  int64_t real = 0;
  for (int64_t i = 0; i < n; ++i) real += !bit(ellipsis_mask, i) && !bit(new_axis_mask, i);
  if (real > rank) return Error("indexes ", real, " axes of a rank-", rank, " input");
  for (int64_t i = 0; i <= n; ++i) {
    const bool implicit_ellipsis = i == n && ellipsis_mask == 0;
    if (i == n && !implicit_ellipsis) break;
    if (implicit_ellipsis || bit(ellipsis_mask, i)) {
      for (int64_t k = 0; k < rank - real; ++k) {
        final_axes.push_back(static_cast<int64_t>(axes.size()));
        axes.push_back(Axis());
      }
    } else if (bit(new_axis_mask, i)) {
      final_axes.push_back(-1);
    } else {
      Axis a;
      a.full = false;
      a.b = begin[i], a.e = end[i], a.s = stride[i];
      a.bm = bit(begin_mask, i), a.em = bit(end_mask, i), a.shrink = bit(shrink_mask, i);
      if (!a.shrink) final_axes.push_back(static_cast<int64_t>(axes.size()));
      axes.push_back(a);
    }
  }
  // Canonical start, size and step per input axis.
  const Dims in_strides = RowMajorStrides(in);
  v->dims.assign(rank, 0);
  v->strides.assign(rank, 0);
  v->offset = 0;
  for (int64_t d = 0; d < rank; ++d) {
    const Axis& a = axes[d];
    const int64_t dim = in[d];
    int64_t start = 0, size = dim, step = 1;
    if (!a.full) {
      if (a.s == 0) return Error("strides must be non-zero");
      if (a.shrink) {
        if (a.s < 0) return Error("only stride 1 allowed on non-range indexing");
        start = a.b < 0 ? a.b + dim : a.b;
        if (start < 0 || start >= dim)
          return Error("index ", a.b, " is out of bounds for axis ", d, " of size ", dim);
        size = 1;
      } else {
        step = a.s;
        const int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? dim : dim - 1;
        auto canon = [&](int64_t x) { x = x < 0 ? x + dim : x; return std::min(std::max(x, lo), hi); };
        start = a.bm ? (step > 0 ? 0 : dim - 1) : canon(a.b);
        const int64_t stop = a.em ? (step > 0 ? dim : -1) : canon(a.e);
        const int64_t span = step > 0 ? stop - start : start - stop, mag = step > 0 ? step : -step;
        size = span > 0 ? (span + mag - 1) / mag : 0;
      }
    }
    v->dims[d] = size;
    v->strides[d] = in_strides[d] * step;
    v->offset += start * in_strides[d];
  }
  if (NumElements(v->dims) == 0) v->offset = 0;
  v->shape.clear();
  for (int64_t a : final_axes) v->shape.push_back(a < 0 ? 1 : v->dims[a]);
  return Status::Ok();
}

Status MakeStridedSlice(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  StridedView v;
  NPU_RETURN_IF_ERROR(MakeStridedView(def.attrs, def.inputs[0].dims, &v));
  const Dims& o = def.outputs[0].dims;
  if (o != v.shape) return Error("output has shape ", ShapeString(o), "; the slice gives ", ShapeString(v.shape));
  *out = Single(v.dims, RowMajorStrides(v.dims), v.strides, v.offset, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// StridedSliceGrad: zeros of the sliced tensor's shape, with dy written into the view.
Status MakeStridedSliceGrad(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  Dims shape;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("shape", &shape));
  const Dims& o = def.outputs[0].dims;
  if (o != shape) return Error("output has shape ", ShapeString(o), "; attribute shape is ", ShapeString(shape));
  StridedView v;
  NPU_RETURN_IF_ERROR(MakeStridedView(def.attrs, shape, &v));
  if (def.inputs[0].dims != v.shape)
    return Error("dy has shape ", ShapeString(def.inputs[0].dims), "; the slice gives ", ShapeString(v.shape));
  std::vector<ViewCopy> copies{
      {StridedPlan::Make({NumElements(o)}, {{1}, {0}}), -1, 0},
      {StridedPlan::Make(v.dims, {v.strides, RowMajorStrides(v.dims)}, {v.offset, 0}), 0, 0}};
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// Tile: output axis i of size m*d is read as (m, d) with the m part not advancing the source.
Status MakeTile(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  std::vector<int64_t> multiples;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("multiples", &multiples));
  const Dims &in = def.inputs[0].dims, &o = def.outputs[0].dims;
  if (multiples.size() != in.size())
    return Error("multiples ", ShapeString(multiples), " needs one entry per axis of ", ShapeString(in));
  const Dims in_strides = RowMajorStrides(in), out_strides = RowMajorStrides(o);
  Dims view, dst, src, want;
  for (size_t a = 0; a < in.size(); ++a) {
    if (multiples[a] < 0) return Error("multiples must not be negative");
    want.push_back(in[a] * multiples[a]);
    view.insert(view.end(), {multiples[a], in[a]});
    dst.insert(dst.end(), {in[a] * out_strides[a], out_strides[a]});
    src.insert(src.end(), {0, in_strides[a]});
  }
  if (o != want) return Error("output has shape ", ShapeString(o), "; expected ", ShapeString(want));
  *out = Single(view, dst, src, 0, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

Status MakeBroadcastTo(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  const Dims& o = def.outputs[0].dims;
  Dims shape, src;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("shape", o, &shape));
  if (shape != o) return Error("output has shape ", ShapeString(o), "; attribute shape is ", ShapeString(shape));
  NPU_RETURN_IF_ERROR(BroadcastStrides(def.inputs[0].dims, o, &src));
  *out = Single(o, RowMajorStrides(o), src, 0, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

Status MakeFill(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  const Dims& o = def.outputs[0].dims;
  Dims dims;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("dims", o, &dims));
  if (dims != o) return Error("output has shape ", ShapeString(o), "; attribute dims is ", ShapeString(dims));
  if (NumElements(def.inputs[0].dims) != 1)
    return Error("value must be a scalar, got shape ", ShapeString(def.inputs[0].dims));
  *out = Single({NumElements(o)}, {1}, {0}, 0, DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// ZerosLike/OnesLike: every element is the kernel's own constant.
Status MakeConstantLike(const KernelDef& def, int64_t value, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  const TensorDesc& o = def.outputs[0];
  if (def.inputs[0].dims != o.dims)
    return Error("output has shape ", ShapeString(o.dims), "; expected ", ShapeString(def.inputs[0].dims));
  uint64_t element = 0;
  Store<int64_t>(o.dtype, &value, 1, &element);
  std::vector<ViewCopy> copies{{StridedPlan::Make({NumElements(o.dims)}, {{1}, {0}}), -1, 0}};
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), DTypeSize(o.dtype), element);
  return Status::Ok();
}

// Pad/PadV2: the padding value everywhere (zero, or PadV2's scalar input), then the input.
Status MakePad(const KernelDef& def, bool v2, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, v2 ? 2 : 1, 1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  std::vector<int64_t> pads;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("paddings", &pads));
  const Dims &in = def.inputs[0].dims, &o = def.outputs[0].dims;
  if (pads.size() != 2 * in.size())
    return Error("paddings has ", pads.size(), " entries; a rank-", in.size(), " input needs ", 2 * in.size());
  if (v2 && NumElements(def.inputs[1].dims) != 1)
    return Error("constant_values must be a scalar, got shape ", ShapeString(def.inputs[1].dims));
  const Dims out_strides = RowMajorStrides(o);
  Dims want;
  for (size_t a = 0; a < in.size(); ++a) {
    if (pads[2 * a] < 0 || pads[2 * a + 1] < 0) return Error("paddings must not be negative");
    want.push_back(in[a] + pads[2 * a] + pads[2 * a + 1]);
  }
  if (o != want) return Error("output has shape ", ShapeString(o), "; expected ", ShapeString(want));
  int64_t offset = 0;
  for (size_t a = 0; a < in.size(); ++a) offset += pads[2 * a] * out_strides[a];
  std::vector<ViewCopy> copies{{StridedPlan::Make({NumElements(o)}, {{1}, {0}}), v2 ? 1 : -1, 0},
                               {StridedPlan::Make(in, {out_strides, RowMajorStrides(in)}, {offset, 0}), 0, 0}};
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), DTypeSize(def.outputs[0].dtype));
  return Status::Ok();
}

// Split/SplitV: output k is the input's k-th block of sizes[k] entries along `axis`.
Status MakeSplit(const KernelDef& def, bool v, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, -1));
  NPU_RETURN_IF_ERROR(SameDType(def));
  const Dims& in = def.inputs[0].dims;
  int64_t axis;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("split_dim", &axis));
  NPU_RETURN_IF_ERROR(NormalizeAxis(axis, static_cast<int64_t>(in.size()), &axis));
  const int64_t n = static_cast<int64_t>(def.outputs.size());
  std::vector<int64_t> sizes;
  if (v) {
    NPU_RETURN_IF_ERROR(def.attrs.IntList("size_splits", &sizes));
  } else {
    if (n == 0 || in[axis] % n != 0)
      return Error("axis ", axis, " of ", ShapeString(in), " does not split into ", n, " equal parts");
    sizes.assign(n, in[axis] / n);
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    return Error("size_splits has ", sizes.size(), " entries for ", n, " outputs");
  int64_t known = 0, unknown = -1;
  for (int64_t k = 0; k < n; ++k) {
    if (sizes[k] == -1 && unknown < 0) unknown = k;
    else if (sizes[k] < 0) return Error("size_splits ", ShapeString(sizes), " is invalid");
    else known += sizes[k];
  }
  if (unknown >= 0) sizes[unknown] = in[axis] - known;
  if ((unknown >= 0 && sizes[unknown] < 0) || (unknown < 0 && known != in[axis]))
    return Error("size_splits ", ShapeString(sizes), " does not add up to ", in[axis]);
  const Dims in_strides = RowMajorStrides(in);
  std::vector<ViewCopy> copies;
  int64_t at = 0;
  for (int64_t k = 0; k < n; ++k) {
    Dims part = in;
    part[axis] = sizes[k];
    if (def.outputs[k].dims != part)
      return Error("output ", k, " has shape ", ShapeString(def.outputs[k].dims), "; expected ", ShapeString(part));
    copies.push_back({StridedPlan::Make(part, {RowMajorStrides(part), in_strides}, {0, at * in_strides[axis]}),
                      0, static_cast<int>(k)});
    at += sizes[k];
  }
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), DTypeSize(def.inputs[0].dtype));
  return Status::Ok();
}

// IdentityN: output k is input k.
Status MakeIdentityN(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  if (def.inputs.size() != def.outputs.size() || def.inputs.empty())
    return Error("expects as many outputs as inputs (at least one), got ", def.inputs.size(), " and ",
                 def.outputs.size());
  std::vector<ViewCopy> copies;
  for (size_t k = 0; k < def.inputs.size(); ++k) {
    if (def.inputs[k].dtype != def.outputs[k].dtype || def.inputs[k].dims != def.outputs[k].dims)
      return Error("output ", k, " differs from input ", k, " in dtype or shape");
    // One byte-wise copy per pair (dtypes may differ between pairs).
    const int64_t bytes = NumElements(def.inputs[k].dims) * DTypeSize(def.inputs[k].dtype);
    copies.push_back({StridedPlan::Make({bytes}, {{1}, {1}}), static_cast<int>(k), static_cast<int>(k)});
  }
  *out = std::make_unique<ViewCopyKernel>(std::move(copies), 1);
  return Status::Ok();
}

// Bitcast: the same bytes read as another dtype.
Status MakeBitcast(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const TensorDesc &in = def.inputs[0], &o = def.outputs[0];
  const int64_t bytes = NumElements(in.dims) * DTypeSize(in.dtype);
  if (bytes != NumElements(o.dims) * DTypeSize(o.dtype))
    return Error(DTypeName(in.dtype), ShapeString(in.dims), " and ", DTypeName(o.dtype), ShapeString(o.dims),
                 " differ in size");
  *out = Single({bytes}, {1}, {1}, 0, 1);
  return Status::Ok();
}

void RegisterAll() {
  for (const char* name : {"Reshape", "Squeeze", "ExpandDims", "Identity", "Snapshot",
                           "StopGradient", "PreventGradient"})
    RegisterKernel(name, MakeCopy);
  RegisterKernel("Transpose", MakeTranspose);
  RegisterKernel("ConcatV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeConcat(d, false, k); });
  RegisterKernel("Pack", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeConcat(d, true, k); });
  RegisterKernel("Unpack", MakeUnpack);
  RegisterKernel("Slice", MakeSlice);
  RegisterKernel("StridedSlice", MakeStridedSlice);
  RegisterKernel("StridedSliceGrad", MakeStridedSliceGrad);
  RegisterKernel("Pad", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakePad(d, false, k); });
  RegisterKernel("PadV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakePad(d, true, k); });
  RegisterKernel("Split", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeSplit(d, false, k); });
  RegisterKernel("SplitV", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeSplit(d, true, k); });
  RegisterKernel("IdentityN", MakeIdentityN);
  RegisterKernel("Bitcast", MakeBitcast);
  RegisterKernel("Tile", MakeTile);
  RegisterKernel("BroadcastTo", MakeBroadcastTo);
  RegisterKernel("Fill", MakeFill);
  RegisterKernel("ZerosLike", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeConstantLike(d, 0, k); });
  RegisterKernel("OnesLike", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeConstantLike(d, 1, k); });
}
StaticInit init(RegisterAll);

}  // namespace

// The shape StridedSlice gives a tensor of shape `in` (TensorStridedSliceUpdate broadcasts its
// value to it: array_extra.cc).
Status StridedSliceShape(const Attrs& attrs, const Dims& in, Dims* shape) {
  StridedView v;
  NPU_RETURN_IF_ERROR(MakeStridedView(attrs, in, &v));
  *shape = v.shape;
  return Status::Ok();
}

}  // namespace kernels
}  // namespace npu
