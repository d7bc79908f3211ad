// The elementwise kernels: every op the registry marks elementwise_kernel (from the generated
// graph_engine/ops/op_traits.inc), the ones with a parameter, and the multi-input ones built on
// the same machinery (AddN, Select, BiasAdd). Their math is elementwise_functors.h's.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace npu {
namespace kernels {

bool InTypeSet(unsigned types, int dtype) {
  if (dtype == kBool) return types & kBools;
  if (dtype == kComplex64) return types & kComplexes;
  if (dtype == kDouble) return types & kDoubles;
  if (dtype == kFloat || dtype == kHalf || dtype == kBFloat16) return types & kFloats;
  return IsInteger(dtype) && (types & kInts);
}

std::string TypeSetNames(unsigned types) {
  std::string s;
  for (int dt : {kFloat, kHalf, kBFloat16, kDouble, kInt8, kInt16, kInt32, kInt64, kUInt8, kBool, kComplex64})
    if (InTypeSet(types, dt)) s += (s.empty() ? "" : ", ") + DTypeName(dt);
  return s;
}

Status ElementwiseKernel::Compute(const KernelArgs& args) const {
  if (check_ != IntCheck::kNone && ComputeTypeOf(in_dtypes_[1]) == ComputeType::kInt64) {
    // Integer division by zero and negative integer powers have no result: TF refuses them.
    const int64_t n = NumElements(rhs_dims_);
    const int size = DTypeSize(in_dtypes_[1]);
    int64_t buf[256];
    for (int64_t s = 0; s < n; s += 256) {
      const int64_t m = std::min<int64_t>(256, n - s);
      Load<int64_t>(in_dtypes_[1], args.in<char>(1) + s * size, m, buf);
      for (int64_t i = 0; i < m; ++i) {
        if (check_ == IntCheck::kNonZeroRhs && buf[i] == 0)
          return Status::Error("integer division by zero", kCodeInvalidArgument);   // TF: "Integer division by zero"
        if (check_ == IntCheck::kNonZeroRhsTruncate && buf[i] == 0)
          return Status::Error("Unexpected error in binary operator (only integer div and mod should have "
                               "errors): integer division by zero", kCodeInternal);
        if (check_ == IntCheck::kNonNegativeRhs && buf[i] < 0)
          return Status::Error("Integers to negative integer powers are not allowed", kCodeInvalidArgument);
      }
    }
  }
  eval_(plan_, in_dtypes_.data(), args.inputs, out_dtype_, args.outputs[0], param_);
  return Status::Ok();
}

Status MakeElementwise(const KernelDef& def, const ElementwiseSpec& spec, EvalFn (*select)(ComputeType),
                       std::unique_ptr<Kernel>* out, const std::vector<Dims>* in_dims) {
  const int n_inputs = spec.inputs;
  NPU_RETURN_IF_ERROR(CheckArity(def, n_inputs, 1));
  const int dtype = def.inputs[0].dtype;
  for (int k = 1; k < n_inputs; ++k)
    if (def.inputs[k].dtype != dtype)
      return Error("inputs have different dtypes: ", DTypeName(dtype), " and ",
                   DTypeName(def.inputs[k].dtype));
  if (!InTypeSet(spec.types, dtype))
    return Error("does not support ", DTypeName(dtype), "; supported: ", TypeSetNames(spec.types));
  const int out_dtype = def.outputs[0].dtype;
  const int want = spec.bool_output ? kBool : dtype;
  if (out_dtype != want)
    return Error("output dtype is ", DTypeName(out_dtype), "; expected ", DTypeName(want));
  const Dims& out_dims = def.outputs[0].dims;
  std::vector<Dims> strides{RowMajorStrides(out_dims)};
  for (int k = 0; k < n_inputs; ++k) {
    Dims s;
    const Dims& dims = in_dims ? (*in_dims)[k] : def.inputs[k].dims;
    Status st = BroadcastStrides(dims, out_dims, &s);
    if (!st.ok()) return Error("input ", k, ": ", st.message);
    strides.push_back(s);
  }
  double param = spec.param_default;
  if (spec.param_attr) NPU_RETURN_IF_ERROR(def.attrs.Float(spec.param_attr, param, &param));
  std::vector<int> dtypes(n_inputs, dtype);
  auto kernel = std::make_unique<ElementwiseKernel>(StridedPlan::Make(out_dims, strides), dtypes, out_dtype,
                                                    select(ComputeTypeOf(dtype)), spec.check, param);
  if (n_inputs > 1) kernel->set_rhs_dims(def.inputs[1].dims);
  *out = std::move(kernel);
  return Status::Ok();
}

namespace {

// AddN: the sum of N same-shaped inputs, accumulated in the compute type and rounded once.
template <class T>
void AddNEval(int64_t n, int dtype, const std::vector<const void*>& in, void* out) {
  // float32 straight from the inputs into the output, no staging (gradient accumulators); an
  // output that reuses an input past the first two buffers takes the staged path.
  if (std::is_same_v<T, float> && dtype == kFloat && in.size() >= 2 &&
      std::find(in.begin() + 2, in.end(), out) == in.end()) {
    ParallelFor(n, static_cast<int64_t>(in.size()), [&](int64_t begin, int64_t end) {
      float* o = static_cast<float*>(out);
      const float* a = static_cast<const float*>(in[0]);
      const float* b = static_cast<const float*>(in[1]);
      for (int64_t i = begin; i < end; ++i) o[i] = a[i] + b[i];
      for (size_t k = 2; k < in.size(); ++k) {
        const float* c = static_cast<const float*>(in[k]);
        for (int64_t i = begin; i < end; ++i) o[i] += c[i];
      }
    });
    return;
  }
  const int size = DTypeSize(dtype);
  ParallelFor(n, static_cast<int64_t>(in.size()), [&](int64_t begin, int64_t end) {
    T acc[256], buf[256];
    for (int64_t s = begin; s < end; s += 256) {
      const int64_t m = std::min<int64_t>(256, end - s);
      Load<T>(dtype, static_cast<const char*>(in[0]) + s * size, m, acc);
      for (size_t k = 1; k < in.size(); ++k) {
        Load<T>(dtype, static_cast<const char*>(in[k]) + s * size, m, buf);
        for (int64_t i = 0; i < m; ++i) acc[i] = fn::AddN()(acc[i], buf[i]);
      }
      Store<T>(dtype, acc, m, static_cast<char*>(out) + s * size);
    }
  });
}

class AddNKernel : public Kernel {
 public:
  AddNKernel(int64_t n, int dtype, int inputs) : n_(n), dtype_(dtype), inputs_(inputs) {}
  Status Compute(const KernelArgs& args) const override {
    std::vector<const void*> in(args.inputs, args.inputs + inputs_);
    switch (ComputeTypeOf(dtype_)) {
      case ComputeType::kFloat: AddNEval<float>(n_, dtype_, in, args.out(0)); break;
      case ComputeType::kDouble: AddNEval<double>(n_, dtype_, in, args.out(0)); break;
      case ComputeType::kInt64: AddNEval<int64_t>(n_, dtype_, in, args.out(0)); break;
      case ComputeType::kComplex: AddNEval<std::complex<float>>(n_, dtype_, in, args.out(0)); break;
    }
    return Status::Ok();
  }

 private:
  int64_t n_;
  int dtype_, inputs_;
};

Status MakeAddN(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  if (def.inputs.empty()) return Error("expects at least one input");
  NPU_RETURN_IF_ERROR(CheckArity(def, -1, 1));
  const TensorDesc& o = def.outputs[0];
  if (!InTypeSet(kNumericComplex, o.dtype))   // complex64: gradients summed in FFT graphs
    return Error("does not support ", DTypeName(o.dtype), "; supported: ", TypeSetNames(kNumericComplex));
  for (size_t k = 0; k < def.inputs.size(); ++k)
    if (def.inputs[k].dtype != o.dtype || def.inputs[k].dims != o.dims)
      return Error("input ", k, " is ", DTypeName(def.inputs[k].dtype),
                   ShapeString(def.inputs[k].dims), "; every input must match the output ",
                   DTypeName(o.dtype), ShapeString(o.dims));
  *out = std::make_unique<AddNKernel>(NumElements(o.dims), o.dtype,
                                      static_cast<int>(def.inputs.size()));
  return Status::Ok();
}

// Select/SelectV2: out = cond ? then : else, elementwise with broadcasting, on raw elements.
class SelectKernel : public Kernel {
 public:
  SelectKernel(StridedPlan plan, int elem_size) : plan_(std::move(plan)), size_(elem_size) {}
  Status Compute(const KernelArgs& args) const override {
    switch (size_) {
      case 1: Run<uint8_t>(args); break;
      case 2: Run<uint16_t>(args); break;
      case 4: Run<uint32_t>(args); break;
      case 8: Run<uint64_t>(args); break;
    }
    return Status::Ok();
  }

 private:
  template <class E>
  void Run(const KernelArgs& args) const {
    const uint8_t* c = args.in<uint8_t>(0);
    const E* t = args.in<E>(1);
    const E* e = args.in<E>(2);
    E* o = args.out<E>(0);
    const int64_t cs = plan_.inner_stride(1), ts = plan_.inner_stride(2), es = plan_.inner_stride(3);
    ParallelFor(plan_.size(), 1, [&](int64_t begin, int64_t end) {
      plan_.ForEachRun(begin, end, [&](const int64_t* off, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          o[off[0] + i] = c[off[1] + i * cs] ? t[off[2] + i * ts] : e[off[3] + i * es];
      });
    });
  }

  StridedPlan plan_;
  int size_;
};

Status MakeSelect(const KernelDef& def, bool v2, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 3, 1));
  const TensorDesc& o = def.outputs[0];
  if (def.inputs[0].dtype != kBool)
    return Error("condition is ", DTypeName(def.inputs[0].dtype), "; expected bool");
  if (def.inputs[1].dtype != o.dtype || def.inputs[2].dtype != o.dtype)
    return Error("then/else are ", DTypeName(def.inputs[1].dtype), "/",
                 DTypeName(def.inputs[2].dtype), "; expected the output dtype ", DTypeName(o.dtype));
  Dims cond = def.inputs[0].dims;
  if (!v2 && cond.size() == 1 && o.dims.size() > 1) {
    // Select (v1) with a vector condition picks whole rows: read it as [N, 1, ..., 1].
    cond.resize(o.dims.size(), 1);
  }
  std::vector<Dims> strides{RowMajorStrides(o.dims)};
  const Dims* dims[] = {&cond, &def.inputs[1].dims, &def.inputs[2].dims};
  for (int k = 0; k < 3; ++k) {
    Dims s;
    Status st = BroadcastStrides(*dims[k], o.dims, &s);
    if (!st.ok()) return Error("input ", k, ": ", st.message);
    strides.push_back(s);
  }
  *out = std::make_unique<SelectKernel>(StridedPlan::Make(o.dims, strides), DTypeSize(o.dtype));
  return Status::Ok();
}

// BiasAdd: value + bias along the channel axis (last for NHWC, 1 for NCHW).
Status MakeBiasAdd(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  std::string format;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NHWC", &format));
  const Dims& value = def.inputs[0].dims;
  if (value.size() < 2) return Error("value must have rank >= 2, got ", ShapeString(value));
  if (format != "NHWC" && format != "NCHW")
    return Error("data_format '", format, "' is not supported; allowed: NHWC, NCHW");
  const size_t channel = format == "NCHW" ? 1 : value.size() - 1;
  if (def.inputs[1].dims != Dims{value[channel]})
    return Error("bias has shape ", ShapeString(def.inputs[1].dims), "; expected [",
                 value[channel], "] for value ", ShapeString(value), " in ", format);
  Dims bias(value.size() - channel, 1);
  bias[0] = value[channel];
  std::vector<Dims> dims{value, bias};
  return MakeElementwise(def, {2, kNumeric}, &SelectEval<2, fn::Add, kNumeric>, out, &dims);
}

void RegisterAll() {
  // Every op whose kernel is its functor applied elementwise (trait elementwise_kernel in
  // graph_engine/ops): registered from the generated table.
#define NPU_ELEMENTWISE_KERNEL(tf_op, functor, arity, types, bool_output, int_check) \
  RegisterElementwise<arity, fn::functor, types>(tf_op, {arity, types, bool_output, IntCheck::int_check});
#include "ops/op_traits.inc"

  // Elementwise ops with an attribute parameter.
  RegisterElementwise<1, fn::LeakyRelu, kReal>("LeakyRelu", {1, kReal, false, IntCheck::kNone, "alpha", 0.2});
  RegisterElementwise<2, fn::LeakyReluGrad, kReal>("LeakyReluGrad", {2, kReal, false, IntCheck::kNone, "alpha", 0.2});
  RegisterElementwise<2, fn::ApproximateEqual, kReal>(
      "ApproximateEqual", {2, kReal, true, IntCheck::kNone, "tolerance", 1e-5});

  RegisterKernel("AddN", MakeAddN);
  RegisterKernel("Select", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeSelect(d, false, k); });
  RegisterKernel("SelectV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) { return MakeSelect(d, true, k); });
  RegisterKernel("BiasAdd", MakeBiasAdd);
}
StaticInit init(RegisterAll);

}  // namespace
}  // namespace kernels
}  // namespace npu
