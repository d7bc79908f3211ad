// Reductions (Sum, Mean, Prod, Max, Min, All, Any), ArgMax/ArgMin and BiasAddGrad.
//
// A reduction is planned at load as out[o, i] = reduce_r in[o, r, i]. Axes that do not form
// one contiguous block are first gathered into [kept..., reduced...] order. Work is split
// into (o, block of i, part of r) items whose partial results are combined in a fixed order,
// so results do not depend on scheduling.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kWidth = 256;          // inner elements per work item
constexpr int64_t kPartElems = 1 << 14;  // elements of r per work item

struct ReducePlan {
  int64_t outer = 1, reduce = 1, inner = 1;
  bool gather = false;          // reduced axes are scattered: transpose first
  StridedPlan gather_plan;      // operand 0: [kept..., reduced...] buffer, 1: the input
};

// `reduced` flags the input axes to reduce.
ReducePlan MakePlan(const Dims& dims, const std::vector<bool>& reduced) {
  // Runs of axes with the same flag, ignoring size-1 axes (either flag fits them).
  std::vector<std::pair<bool, int64_t>> groups;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (dims[a] == 1) continue;
    if (!groups.empty() && groups.back().first == reduced[a]) groups.back().second *= dims[a];
    else groups.push_back({reduced[a], dims[a]});
  }
  ReducePlan p;
  int r_groups = 0;
  for (const auto& g : groups) r_groups += g.first;
  if (r_groups <= 1) {
    bool seen_r = false;
    for (const auto& g : groups) {
      if (g.first) { p.reduce = g.second; seen_r = true; }
      else if (seen_r) p.inner *= g.second;
      else p.outer *= g.second;
    }
    return p;
  }
  p.gather = true;
  Dims order_dims, src_strides;
  const Dims strides = RowMajorStrides(dims);
  for (bool want : {false, true})
    for (size_t a = 0; a < dims.size(); ++a)
      if (reduced[a] == want) {
        order_dims.push_back(dims[a]);
        src_strides.push_back(strides[a]);
        (want ? p.reduce : p.outer) *= dims[a];
      }
  p.gather_plan = StridedPlan::Make(order_dims, {RowMajorStrides(order_dims), src_strides});
  return p;
}

// Reduction ops over accumulator type A (double for floating inputs, int64 for integers,
// std::complex<double> for complex64).
struct SumR {
  template <class A> static A Init() { return A(0); }
  template <class A> static A Step(A acc, A x) {
    if constexpr (std::is_integral_v<A>) return A(uint64_t(acc) + uint64_t(x));
    else return acc + x;
  }
  template <class A> static A Finish(A acc, int64_t) { return acc; }
};
struct MeanR : SumR {
  template <class A> static A Finish(A acc, int64_t n) {
    if constexpr (std::is_integral_v<A>) return n ? acc / n : 0;
    else return acc / A(n);
  }
};
struct ProdR {
  template <class A> static A Init() { return A(1); }
  template <class A> static A Step(A acc, A x) {
    if constexpr (std::is_integral_v<A>) return A(uint64_t(acc) * uint64_t(x));
    else return acc * x;
  }
  template <class A> static A Finish(A acc, int64_t) { return acc; }
};
struct MaxR {
  template <class A> static A Init() {
    return std::is_integral_v<A> ? std::numeric_limits<A>::lowest() : -std::numeric_limits<A>::infinity();
  }
  template <class A> static A Step(A acc, A x) { return (x > acc || x != x) ? x : acc; }
  template <class A> static A Finish(A acc, int64_t) { return acc; }
};
struct MinR {
  template <class A> static A Init() {
    return std::is_integral_v<A> ? std::numeric_limits<A>::max() : std::numeric_limits<A>::infinity();
  }
  template <class A> static A Step(A acc, A x) { return (x < acc || x != x) ? x : acc; }
  template <class A> static A Finish(A acc, int64_t) { return acc; }
};
struct AllR {
  template <class A> static A Init() { return 1; }
  template <class A> static A Step(A acc, A x) { return acc && x; }
  template <class A> static A Finish(A acc, int64_t) { return acc; }
};
struct AnyR {
  template <class A> static A Init() { return 0; }
  template <class A> static A Step(A acc, A x) { return acc || x; }
  template <class A> static A Finish(A acc, int64_t) { return acc; }
};

// T: compute type of the stored elements; A: accumulator.
template <class T, class Op>
void Reduce(const ReducePlan& p, int in_dtype, const void* in, int out_dtype, void* out) {
  using A = std::conditional_t<std::is_integral_v<T>, int64_t,
                               std::conditional_t<std::is_same_v<T, std::complex<float>>, std::complex<double>, double>>;
  if (p.outer == 0 || p.inner == 0) return;   // an empty output (an empty reduced axis is fine)
  const int in_size = DTypeSize(in_dtype), out_size = DTypeSize(out_dtype);
  const char* src = static_cast<const char*>(in);
  const int64_t width = std::min(kWidth, p.inner), blocks = (p.inner + width - 1) / width;
  const int64_t part = p.inner == 1 ? kPartElems : std::max<int64_t>(1, kPartElems / width);
  const int64_t parts = std::max<int64_t>(1, (p.reduce + part - 1) / part);
  const int64_t items = p.outer * blocks * parts;
  std::vector<A> partial(items * width);
  ParallelFor(items, std::min(part, p.reduce) * width, [&](int64_t i0, int64_t i1) {
    T buf[1024];   // >= kWidth
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t o = item / (blocks * parts), blk = item / parts % blocks, q = item % parts;
      const int64_t c0 = blk * width, w = std::min(width, p.inner - c0);
      const int64_t r0 = q * part, r1 = std::min(p.reduce, r0 + part);
      A* acc = partial.data() + item * width;
      std::fill(acc, acc + w, Op::template Init<A>());
      if (p.inner == 1) {
        // Contiguous run of r: load in chunks; eight independent accumulators keep the
        // dependency chain short (combined in a fixed order).
        A lanes[8];
        std::fill(lanes, lanes + 8, Op::template Init<A>());
        for (int64_t r = r0; r < r1; r += 1024) {
          const int64_t m = std::min<int64_t>(1024, r1 - r);
          Load<T>(in_dtype, src + (o * p.reduce + r) * in_size, m, buf);
          int64_t i = 0;
          for (; i + 8 <= m; i += 8)
            for (int k = 0; k < 8; ++k) lanes[k] = Op::Step(lanes[k], A(buf[i + k]));
          for (; i < m; ++i) lanes[i % 8] = Op::Step(lanes[i % 8], A(buf[i]));
        }
        for (int k = 0; k < 8; ++k) acc[0] = Op::Step(acc[0], lanes[k]);
      } else {
        for (int64_t r = r0; r < r1; ++r) {
          Load<T>(in_dtype, src + ((o * p.reduce + r) * p.inner + c0) * in_size, w, buf);
          for (int64_t i = 0; i < w; ++i) acc[i] = Op::Step(acc[i], A(buf[i]));
        }
      }
    }
  });
  // Combine the parts of each (o, block) in order, finish and store.
  ParallelFor(p.outer * blocks, parts * width, [&](int64_t j0, int64_t j1) {
    T res[kWidth];
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t o = j / blocks, c0 = j % blocks * width, w = std::min(width, p.inner - c0);
      const A* first = partial.data() + j * parts * width;
      for (int64_t i = 0; i < w; ++i) {
        A a = first[i];
        for (int64_t q = 1; q < parts; ++q) a = Op::Step(a, first[q * width + i]);
        res[i] = static_cast<T>(Op::Finish(a, p.reduce));
      }
      Store<T>(out_dtype, res, w, static_cast<char*>(out) + (o * p.inner + c0) * out_size);
    }
  });
}

using ReduceFn = void (*)(const ReducePlan&, int, const void*, int, void*);

class ReduceKernel : public Kernel {
 public:
  ReduceKernel(ReducePlan plan, int in_dtype, int out_dtype, ReduceFn fn)
      : plan_(std::move(plan)), in_dtype_(in_dtype), out_dtype_(out_dtype), fn_(fn) {}

  Status Compute(const KernelArgs& args) const override {
    const void* in = args.in(0);
    std::vector<char> gathered;
    if (plan_.gather) {
      gathered.resize(plan_.gather_plan.size() * DTypeSize(in_dtype_));
      CopyStrided(plan_.gather_plan, DTypeSize(in_dtype_), in, gathered.data());
      in = gathered.data();
    }
    fn_(plan_, in_dtype_, in, out_dtype_, args.out(0));
    return Status::Ok();
  }

 private:
  ReducePlan plan_;
  int in_dtype_, out_dtype_;
  ReduceFn fn_;
};

// Flags the reduced axes; checks the output shape against keep_dims.
Status ReducedAxes(const KernelDef& def, const std::vector<int64_t>& axes, bool keep_dims,
                   std::vector<bool>* reduced) {
  const Dims& in = def.inputs[0].dims;
  reduced->assign(in.size(), false);
  for (int64_t axis : axes) {
    int64_t a;
    NPU_RETURN_IF_ERROR(NormalizeAxis(axis, static_cast<int64_t>(in.size()), &a));
    (*reduced)[a] = true;
  }
  Dims want;
  for (size_t a = 0; a < in.size(); ++a)
    if (!(*reduced)[a]) want.push_back(in[a]);
    else if (keep_dims) want.push_back(1);
  if (def.outputs[0].dims != want)
    return Error("output has shape ", ShapeString(def.outputs[0].dims), "; reducing ", ShapeString(in),
                 " over ", ShapeString(axes), (keep_dims ? " with" : " without"), " keep_dims gives ",
                 ShapeString(want));
  return Status::Ok();
}

template <class Op, unsigned Types>
Status MakeReduce(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const int dtype = def.inputs[0].dtype;
  if (!InTypeSet(Types, dtype))
    return Error("does not support ", DTypeName(dtype), "; supported: ", TypeSetNames(Types));
  if (def.outputs[0].dtype != dtype)
    return Error("output is ", DTypeName(def.outputs[0].dtype), "; expected ", DTypeName(dtype));
  std::vector<int64_t> axes;
  bool keep_dims;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("reduction_indices", &axes));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("keep_dims", false, &keep_dims));
  std::vector<bool> reduced;
  NPU_RETURN_IF_ERROR(ReducedAxes(def, axes, keep_dims, &reduced));
  ReduceFn fn = nullptr;
  switch (ComputeTypeOf(dtype)) {
    case ComputeType::kFloat: if constexpr ((Types & kFloats) != 0) fn = &Reduce<float, Op>; break;
    case ComputeType::kDouble: if constexpr ((Types & kDoubles) != 0) fn = &Reduce<double, Op>; break;
    case ComputeType::kInt64: if constexpr ((Types & (kInts | kBools)) != 0) fn = &Reduce<int64_t, Op>; break;
    case ComputeType::kComplex: if constexpr ((Types & kComplexes) != 0) fn = &Reduce<std::complex<float>, Op>; break;
  }
  *out = std::make_unique<ReduceKernel>(MakePlan(def.inputs[0].dims, reduced), dtype, dtype, fn);
  return Status::Ok();
}

// BiasAddGrad: the sum over every axis but the channel axis.
Status MakeBiasAddGrad(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const int dtype = def.inputs[0].dtype;
  if (!InTypeSet(kNumeric, dtype) || def.outputs[0].dtype != dtype)
    return Error("does not support ", DTypeName(dtype), " -> ", DTypeName(def.outputs[0].dtype),
                 "; supported: ", TypeSetNames(kNumeric), " (same dtype in and out)");
  std::string format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &format));
  if (format != "NHWC" && format != "NCHW")
    return Error("data_format '", format, "' is not supported; allowed: NHWC, NCHW");
  const Dims& in = def.inputs[0].dims;
  if (in.size() < 2) return Error("input must have rank >= 2, got ", ShapeString(in));
  const size_t channel = format == "NCHW" ? 1 : in.size() - 1;
  std::vector<bool> reduced(in.size(), true);
  reduced[channel] = false;
  if (def.outputs[0].dims != Dims{in[channel]})
    return Error("output has shape ", ShapeString(def.outputs[0].dims), "; expected [", in[channel], "]");
  ReduceFn fn = ComputeTypeOf(dtype) == ComputeType::kFloat    ? &Reduce<float, SumR>
                : ComputeTypeOf(dtype) == ComputeType::kDouble ? &Reduce<double, SumR>
                                                               : &Reduce<int64_t, SumR>;
  *out = std::make_unique<ReduceKernel>(MakePlan(in, reduced), dtype, dtype, fn);
  return Status::Ok();
}

// The most negative (kMax) or most positive finite value of a dtype, in compute type T: the
// start of TF's (Eigen's) ArgMax/ArgMin scan.
template <class T, bool kMax>
T ArgStart(int dtype) {
  double v;
  switch (dtype) {
    case kHalf: v = 65504.0; break;
    case kBFloat16: v = 3.38953138925153547590470800371487866880e38; break;
    case kFloat: v = std::numeric_limits<float>::max(); break;
    case kDouble: v = std::numeric_limits<double>::max(); break;
    default:
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  return static_cast<T>(kMax ? -v : v);
}

// ArgMax/ArgMin over one axis as TF computes it (Eigen's ArgMax/ArgMinTupleReducer): index 0
// holding the dtype's lowest (highest) finite value to start with, then every element strictly
// greater (smaller) takes over. So the first index of the extreme value; NaN never compares
// true, so it is skipped ([nan, 1, 2] -> 2), and a row of NaN, -inf or lowest gives 0.
template <class T, bool kMax>
void ArgReduce(const ReducePlan& p, int in_dtype, const void* in, int out_dtype, void* out) {
  if (p.outer == 0 || p.inner == 0) return;   // an empty output
  const T start = ArgStart<T, kMax>(in_dtype);
  const int in_size = DTypeSize(in_dtype), out_size = DTypeSize(out_dtype);
  const char* src = static_cast<const char*>(in);
  if (p.inner == 1) {   // the last axis (logits -> a class): a Load per row, not per element
    ParallelFor(p.outer, p.reduce, [&](int64_t o0, int64_t o1) {
      std::vector<T> row(p.reduce);
      for (int64_t o = o0; o < o1; ++o) {
        Load<T>(in_dtype, src + o * p.reduce * in_size, p.reduce, row.data());
        T best = start;
        int64_t arg = 0;
        for (int64_t r = 0; r < p.reduce; ++r)
          if (kMax ? row[r] > best : row[r] < best) {
            best = row[r];
            arg = r;
          }
        Store<int64_t>(out_dtype, &arg, 1, static_cast<char*>(out) + o * out_size);
      }
    });
    return;
  }
  const int64_t width = std::min(kWidth, p.inner), blocks = (p.inner + width - 1) / width;
  ParallelFor(p.outer * blocks, p.reduce * width, [&](int64_t j0, int64_t j1) {
    T best[kWidth], buf[kWidth];
    int64_t arg[kWidth];
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t o = j / blocks, c0 = j % blocks * width, w = std::min(width, p.inner - c0);
      std::fill(arg, arg + w, 0);
      std::fill(best, best + w, start);
      for (int64_t r = 0; r < p.reduce; ++r) {
        Load<T>(in_dtype, src + ((o * p.reduce + r) * p.inner + c0) * in_size, w, buf);
        for (int64_t i = 0; i < w; ++i)
          if (kMax ? buf[i] > best[i] : buf[i] < best[i]) {
            best[i] = buf[i];
            arg[i] = r;
          }
      }
      Store<int64_t>(out_dtype, arg, w, static_cast<char*>(out) + (o * p.inner + c0) * out_size);
    }
  });
}

template <bool kMax>
Status MakeArgReduce(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  const int dtype = def.inputs[0].dtype, out_dtype = def.outputs[0].dtype;
  if (!InTypeSet(kNumeric, dtype))
    return Error("does not support ", DTypeName(dtype), "; supported: ", TypeSetNames(kNumeric));
  int64_t output_type;
  NPU_RETURN_IF_ERROR(def.attrs.Int("output_type", out_dtype, &output_type));
  if ((out_dtype != kInt32 && out_dtype != kInt64) || output_type != out_dtype)
    return Error("output is ", DTypeName(out_dtype), " (output_type ", DTypeName(output_type),
                 "); expected int32 or int64");
  int64_t axis;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("dimension", &axis));
  std::vector<bool> reduced;
  NPU_RETURN_IF_ERROR(ReducedAxes(def, {axis}, false, &reduced));
  const Dims& in = def.inputs[0].dims;
  for (size_t a = 0; a < in.size(); ++a)
    if (reduced[a] && in[a] == 0)
      return Status::Error("Reduction axis " + std::to_string(a) + " is empty in shape " + ShapeString(in),
                           kCodeInvalidArgument);
  // One axis: in = [outer, reduce, inner] directly (no size-1 merging, the index matters).
  ReducePlan p;
  bool seen = false;
  for (size_t a = 0; a < in.size(); ++a) {
    if (reduced[a]) { p.reduce = in[a]; seen = true; }
    else (seen ? p.inner : p.outer) *= in[a];
  }
  ReduceFn fn = ComputeTypeOf(dtype) == ComputeType::kFloat    ? &ArgReduce<float, kMax>
                : ComputeTypeOf(dtype) == ComputeType::kDouble ? &ArgReduce<double, kMax>
                                                               : &ArgReduce<int64_t, kMax>;
  *out = std::make_unique<ReduceKernel>(p, dtype, out_dtype, fn);
  return Status::Ok();
}

void RegisterAll() {
  RegisterKernel("Sum", MakeReduce<SumR, kNumericComplex>);   // complex64: FFT gradients
  RegisterKernel("Mean", MakeReduce<MeanR, kNumeric>);
  RegisterKernel("Prod", MakeReduce<ProdR, kNumeric>);
  RegisterKernel("Max", MakeReduce<MaxR, kNumeric>);
  RegisterKernel("Min", MakeReduce<MinR, kNumeric>);
  RegisterKernel("All", MakeReduce<AllR, kBools>);
  RegisterKernel("Any", MakeReduce<AnyR, kBools>);
  RegisterKernel("ArgMax", MakeArgReduce<true>);
  RegisterKernel("ArgMin", MakeArgReduce<false>);
  RegisterKernel("BiasAddGrad", MakeBiasAddGrad);
}
StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
