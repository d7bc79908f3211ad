// NpuElementwise: a fused chain of elementwise ops (graph_engine/ops/fused_elementwise.py has
// the attrs and the numpy reference) evaluated in one pass over memory.
//
// The output index space is cut into tiles of kTile elements; per tile every input is loaded
// (broadcast) into a float register, the program runs register to register, and the outputs are
// stored, so intermediates never touch memory. Each instruction uses the same float formula (and
// the same SIMD math, vector_math.h) as the op's own kernel, and float16/bfloat16/bool results
// are rounded as that kernel would store them, so results match the unfused graph. A tile is
// loaded completely before anything is stored, so an output may share an input's buffer.
// When every input and output has the output's dims and format, storage is processed as flat
// elements, so the kernel also runs on padded NPU formats (NC1HWC0).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"
#include "kernels/vector_math.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kTile = 256;
constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;

enum class Op {
  kNeg, kAbs, kSquare, kSign, kExp, kLog, kLog1p, kExpm1, kSqrt, kRsqrt, kReciprocal, kFloor,
  kCeil, kRound, kRelu, kRelu6, kSigmoid, kTanh, kSoftsign, kElu, kSelu, kSoftplus, kCast,
  kLogicalNot, kAdd, kSub, kMul, kDiv, kDivNoNan, kMaximum, kMinimum, kSquaredDifference, kPow,
  kEqual, kNotEqual, kGreater, kGreaterEqual, kLess, kLessEqual, kLogicalAnd, kLogicalOr,
  kReluGrad, kRelu6Grad, kSigmoidGrad, kTanhGrad, kEluGrad, kSeluGrad, kSoftplusGrad,
  kReciprocalGrad, kRsqrtGrad, kSqrtGrad, kSelect, kAddN,
};

struct OpInfo {
  Op op;
  int arity;  // -1: any (AddN)
};

const std::map<std::string, OpInfo>& OpTable() {
  static const auto* table = new std::map<std::string, OpInfo>{
      {"Neg", {Op::kNeg, 1}}, {"Abs", {Op::kAbs, 1}}, {"Square", {Op::kSquare, 1}},
      {"Sign", {Op::kSign, 1}}, {"Exp", {Op::kExp, 1}}, {"Log", {Op::kLog, 1}},
      {"Log1p", {Op::kLog1p, 1}}, {"Expm1", {Op::kExpm1, 1}}, {"Sqrt", {Op::kSqrt, 1}},
      {"Rsqrt", {Op::kRsqrt, 1}}, {"Reciprocal", {Op::kReciprocal, 1}}, {"Inv", {Op::kReciprocal, 1}},
      {"Floor", {Op::kFloor, 1}}, {"Ceil", {Op::kCeil, 1}}, {"Round", {Op::kRound, 1}},
      {"Relu", {Op::kRelu, 1}}, {"Relu6", {Op::kRelu6, 1}}, {"Sigmoid", {Op::kSigmoid, 1}},
      {"Tanh", {Op::kTanh, 1}}, {"Softsign", {Op::kSoftsign, 1}}, {"Elu", {Op::kElu, 1}},
      {"Selu", {Op::kSelu, 1}}, {"Softplus", {Op::kSoftplus, 1}}, {"Cast", {Op::kCast, 1}},
      {"LogicalNot", {Op::kLogicalNot, 1}}, {"Add", {Op::kAdd, 2}}, {"AddV2", {Op::kAdd, 2}},
      {"BiasAdd", {Op::kAdd, 2}}, {"Sub", {Op::kSub, 2}}, {"Mul", {Op::kMul, 2}},
      {"RealDiv", {Op::kDiv, 2}}, {"Div", {Op::kDiv, 2}}, {"DivNoNan", {Op::kDivNoNan, 2}},
      {"Maximum", {Op::kMaximum, 2}}, {"Minimum", {Op::kMinimum, 2}},
      {"SquaredDifference", {Op::kSquaredDifference, 2}}, {"Pow", {Op::kPow, 2}},
      {"Equal", {Op::kEqual, 2}}, {"NotEqual", {Op::kNotEqual, 2}}, {"Greater", {Op::kGreater, 2}},
      {"GreaterEqual", {Op::kGreaterEqual, 2}}, {"Less", {Op::kLess, 2}},
      {"LessEqual", {Op::kLessEqual, 2}}, {"LogicalAnd", {Op::kLogicalAnd, 2}},
      {"LogicalOr", {Op::kLogicalOr, 2}}, {"ReluGrad", {Op::kReluGrad, 2}},
      {"Relu6Grad", {Op::kRelu6Grad, 2}}, {"SigmoidGrad", {Op::kSigmoidGrad, 2}},
      {"TanhGrad", {Op::kTanhGrad, 2}}, {"EluGrad", {Op::kEluGrad, 2}},
      {"SeluGrad", {Op::kSeluGrad, 2}}, {"SoftplusGrad", {Op::kSoftplusGrad, 2}},
      {"ReciprocalGrad", {Op::kReciprocalGrad, 2}}, {"RsqrtGrad", {Op::kRsqrtGrad, 2}},
      {"SqrtGrad", {Op::kSqrtGrad, 2}}, {"Select", {Op::kSelect, 3}}, {"SelectV2", {Op::kSelect, 3}},
      {"AddN", {Op::kAddN, -1}},
  };
  return *table;
}

struct Instr {
  Op op;
  int dtype;                  // of the result: float16/bfloat16 round, bool is 0/1
  std::vector<int> operands;  // >= 0: register; < 0: constant -1 - index
};

// y = f(a[, b[, c]]) over one tile, with the formulas of the ops' own kernels.
void Eval(const Instr& in, const float* const* a, float* y, int64_t m) {
  const float* x = a[0];
  const float* b = in.operands.size() > 1 ? a[1] : nullptr;
  auto map1 = [&](auto f) { for (int64_t i = 0; i < m; ++i) y[i] = f(x[i]); };
  auto map2 = [&](auto f) { for (int64_t i = 0; i < m; ++i) y[i] = f(x[i], b[i]); };
  switch (in.op) {
    case Op::kNeg: return map1([](float v) { return -v; });
    case Op::kAbs: return map1([](float v) { return std::abs(v); });
    case Op::kSquare: return map1([](float v) { return v * v; });
    case Op::kSign: return map1([](float v) { return v != v ? v : float((v > 0) - (v < 0)); });
    case Op::kExp: return VecMath(VecFn::kExp, x, y, m);
    case Op::kLog: return VecMath(VecFn::kLog, x, y, m);
    case Op::kLog1p: return VecMath(VecFn::kLog1p, x, y, m);
    case Op::kExpm1: return map1([](float v) { return std::expm1(v); });  // as math_extra.cc
    case Op::kSqrt: return VecMath(VecFn::kSqrt, x, y, m);
    case Op::kRsqrt: return VecMath(VecFn::kRsqrt, x, y, m);
    case Op::kSigmoid: return VecMath(VecFn::kSigmoid, x, y, m);
    case Op::kTanh: return VecMath(VecFn::kTanh, x, y, m);
    case Op::kReciprocal: return map1([](float v) { return 1.0f / v; });
    case Op::kFloor: return map1([](float v) { return std::floor(v); });
    case Op::kCeil: return map1([](float v) { return std::ceil(v); });
    case Op::kRound: return map1([](float v) { return float(std::nearbyint(v)); });
    case Op::kRelu: return map1([](float v) { return v > 0 ? v : 0.0f; });
    case Op::kRelu6: return map1([](float v) { return v > 0 ? (v < 6 ? v : 6.0f) : 0.0f; });
    case Op::kSoftsign: return map1([](float v) { return v / (1.0f + std::abs(v)); });
    case Op::kElu:
    case Op::kSelu: {
      float e[kTile];
      VecMath(VecFn::kExpm1, x, e, m);
      const bool selu = in.op == Op::kSelu;
      const float pos = selu ? float(kSeluScale) : 1.0f, neg = selu ? float(kSeluScale * kSeluAlpha) : 1.0f;
      for (int64_t i = 0; i < m; ++i) y[i] = x[i] > 0 ? pos * x[i] : neg * e[i];
      return;
    }
    case Op::kSoftplus: {
      float t[kTile];
      for (int64_t i = 0; i < m; ++i) t[i] = -std::abs(x[i]);
      VecMath(VecFn::kExp, t, t, m);
      VecMath(VecFn::kLog1p, t, t, m);
      for (int64_t i = 0; i < m; ++i) y[i] = (x[i] > 0 ? x[i] : 0.0f) + t[i];
      return;
    }
    case Op::kCast: return map1([](float v) { return v; });  // rounding follows from dtype
    case Op::kLogicalNot: return map1([](float v) { return float(!v); });
    case Op::kAdd: return map2([](float p, float q) { return p + q; });
    case Op::kSub: return map2([](float p, float q) { return p - q; });
    case Op::kMul: return map2([](float p, float q) { return p * q; });
    case Op::kDiv: return map2([](float p, float q) { return p / q; });
    case Op::kDivNoNan: return map2([](float p, float q) { return q == 0 ? 0.0f : p / q; });
    case Op::kMaximum: return map2([](float p, float q) { return (p > q || p != p) ? p : q; });
    case Op::kMinimum: return map2([](float p, float q) { return (p < q || p != p) ? p : q; });
    case Op::kSquaredDifference: return map2([](float p, float q) { return (p - q) * (p - q); });
    case Op::kPow: return map2([](float p, float q) { return std::pow(p, q); });
    case Op::kEqual: return map2([](float p, float q) { return float(p == q); });
    case Op::kNotEqual: return map2([](float p, float q) { return float(p != q); });
    case Op::kGreater: return map2([](float p, float q) { return float(p > q); });
    case Op::kGreaterEqual: return map2([](float p, float q) { return float(p >= q); });
    case Op::kLess: return map2([](float p, float q) { return float(p < q); });
    case Op::kLessEqual: return map2([](float p, float q) { return float(p <= q); });
    case Op::kLogicalAnd: return map2([](float p, float q) { return float(p && q); });
    case Op::kLogicalOr: return map2([](float p, float q) { return float(p || q); });
    case Op::kReluGrad: return map2([](float g, float f) { return f > 0 ? g : 0.0f; });
    case Op::kRelu6Grad: return map2([](float g, float f) { return (f > 0 && f < 6) ? g : 0.0f; });
    case Op::kSigmoidGrad: return map2([](float v, float dy) { return dy * v * (1.0f - v); });
    case Op::kTanhGrad: return map2([](float v, float dy) { return dy * (1.0f - v * v); });
    case Op::kEluGrad: return map2([](float g, float v) { return v > 0 ? g : g * (v + 1.0f); });
    case Op::kSeluGrad:
      return map2([](float g, float v) {
        return v > 0 ? g * float(kSeluScale) : g * (v + float(kSeluScale * kSeluAlpha));
      });
    case Op::kSoftplusGrad: return map2([](float g, float f) { return g / (1.0f + std::exp(-f)); });
    case Op::kReciprocalGrad: return map2([](float v, float dy) { return -dy * v * v; });
    case Op::kRsqrtGrad: return map2([](float v, float dy) { return -0.5f * (v * v * v) * dy; });
    case Op::kSqrtGrad: return map2([](float v, float dy) { return 0.5f * dy / v; });
    case Op::kSelect:
      for (int64_t i = 0; i < m; ++i) y[i] = x[i] != 0 ? b[i] : a[2][i];
      return;
    case Op::kAddN:
      std::memcpy(y, x, m * sizeof(float));
      for (size_t k = 1; k < in.operands.size(); ++k)
        for (int64_t i = 0; i < m; ++i) y[i] += a[k][i];
      return;
  }
}

// Rounds a tile to what storing it as `dtype` keeps.
void RoundTo(int dtype, float* y, int64_t m) {
  if (dtype == kHalf || dtype == kBFloat16) {
    uint16_t tmp[kTile];
    Store<float>(dtype, y, m, tmp);
    Load<float>(dtype, tmp, m, y);
  } else if (dtype == kBool) {
    for (int64_t i = 0; i < m; ++i) y[i] = y[i] != 0 ? 1.0f : 0.0f;
  }
}

class FusedElementwise : public Kernel {
 public:
  Status Init(const KernelDef& def);
  Status Compute(const KernelArgs& args) const override;

 private:
  // Per-thread tiles: one register per input and instruction, constants splatted once.
  struct Scratch {
    std::vector<float> regs, consts;
    std::vector<const float*> args;
  };
  void Tile(const KernelArgs& args, const int64_t* in_off, int64_t out_off, int64_t m,
            Scratch* scratch) const;
  size_t max_operands_ = 1;

  std::vector<Instr> program_;
  std::vector<float> constants_;
  std::vector<int> outputs_;          // register per output
  std::vector<int> in_dtypes_, out_dtypes_;
  Dims dims_;                         // iteration space (merged axes)
  std::vector<Dims> strides_;         // [input][axis], 0 on broadcast axes
  int64_t size_ = 0;
};

bool IsValueDType(int dtype) {
  return dtype == kFloat || dtype == kHalf || dtype == kBFloat16 || dtype == kBool;
}

Status FusedElementwise::Init(const KernelDef& def) {
  if (def.outputs.empty()) return Error("needs at least one output");
  std::string program;
  NPU_RETURN_IF_ERROR(def.attrs.String("program", &program));
  std::vector<int64_t> dtypes, outputs;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("dtypes", &dtypes));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("results", &outputs));
  if (def.attrs.Has("constants")) {
    const AttrValue& c = def.attrs.values.at("constants");
    if (c.type == AttrValue::kFloatList) {
      for (double v : c.floats) constants_.push_back(float(v));
    } else if (c.type == AttrValue::kIntList) {
      for (int64_t v : c.ints) constants_.push_back(float(v));
    } else {
      return Error("attribute 'constants' must be a float list");
    }
  }
  const int n_in = static_cast<int>(def.inputs.size());
  for (const TensorDesc& d : def.inputs) {
    if (!IsValueDType(d.dtype) && d.dtype != kInt32 && d.dtype != kInt64)
      return Error("input dtype ", DTypeName(d.dtype), " is not supported; supported: float32, float16, bfloat16, bool, "
                   "and int32/int64 for a Cast to float32");
    in_dtypes_.push_back(d.dtype);
  }
  // Parse "Op rN kM;Op ..." into instructions.
  std::stringstream all(program);
  std::string text;
  while (std::getline(all, text, ';')) {
    std::stringstream words(text);
    std::string name, operand;
    words >> name;
    auto it = OpTable().find(name);
    if (it == OpTable().end()) return Error("program: unknown instruction '", name, "'");
    const int index = static_cast<int>(program_.size());
    if (index >= static_cast<int>(dtypes.size())) return Error("attribute 'dtypes' names fewer dtypes than the program has instructions");
    Instr in{it->second.op, static_cast<int>(dtypes[index]), {}};
    if (!IsValueDType(in.dtype)) return Error("instruction ", index, ": dtype ", DTypeName(in.dtype), " is not supported");
    while (words >> operand) {
      int64_t k = -1;
      try {
        k = std::stoll(operand.substr(1));
      } catch (const std::exception&) {
      }
      if (operand[0] == 'r' && k >= 0 && k < n_in + index) in.operands.push_back(static_cast<int>(k));
      else if (operand[0] == 'k' && k >= 0 && k < static_cast<int64_t>(constants_.size())) in.operands.push_back(static_cast<int>(-1 - k));
      else return Error("program: bad operand '", operand, "' in '", text, "' (rN: an input or earlier result, kN: a constant)");
    }
    const int arity = it->second.arity;
    if ((arity >= 0 && static_cast<int>(in.operands.size()) != arity) || in.operands.empty())
      return Error("program: '", text, "' has ", in.operands.size(), " operands; ", name, " takes ", arity);
    for (int id : in.operands)  // integer inputs are exact in float32 only through a Cast
      if (id >= 0 && id < n_in && (in_dtypes_[id] == kInt32 || in_dtypes_[id] == kInt64) &&
          (in.op != Op::kCast || in.dtype != kFloat))
        return Error("program: '", text, "' reads integer input r", id, "; integers may only be Cast to float32");
    max_operands_ = std::max(max_operands_, in.operands.size());
    program_.push_back(std::move(in));
  }
  if (program_.size() != dtypes.size()) return Error("attribute 'dtypes' must name one dtype per instruction");
  if (outputs.size() != def.outputs.size())
    return Error("attribute 'results' names ", outputs.size(), " registers for ", def.outputs.size(), " outputs");
  const Dims& out_dims = def.outputs[0].dims;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const TensorDesc& o = def.outputs[j];
    if (outputs[j] < n_in || outputs[j] >= n_in + static_cast<int64_t>(program_.size()))
      return Error("output ", j, " names register ", outputs[j], ", which no instruction writes");
    if (o.dims != out_dims || o.format != def.outputs[0].format)
      return Error("output ", j, " has shape ", ShapeString(o.dims), "; all outputs must have shape ", ShapeString(out_dims), " and one format");
    if (o.dtype != program_[outputs[j] - n_in].dtype)
      return Error("output ", j, " is ", DTypeName(o.dtype), " but its instruction computes ", DTypeName(program_[outputs[j] - n_in].dtype));
    outputs_.push_back(static_cast<int>(outputs[j]));
    out_dtypes_.push_back(o.dtype);
  }
  if (HasPaddedFormat(def)) {
    // Padded storage is only read as flat elements: every value must be laid out alike.
    for (const TensorDesc& d : def.inputs)
      if (d.dims != out_dims || d.format != def.outputs[0].format)
        return Error("with storage format ", FormatName(def.outputs[0].format), " every input must have the output's shape ",
                     ShapeString(out_dims), " and format; got ", ShapeString(d.dims), " in ", FormatName(d.format));
    size_ = NumElements(StorageDims(def.outputs[0]));
    dims_ = {size_};
    strides_.assign(n_in, Dims{1});
    return Status::Ok();
  }
  // Broadcast strides, then merge adjacent axes that every operand walks alike.
  size_ = NumElements(out_dims);
  std::vector<Dims> strides(n_in);
  for (int k = 0; k < n_in; ++k) {
    Status st = BroadcastStrides(def.inputs[k].dims, out_dims, &strides[k]);
    if (!st.ok()) return Error("input ", k, ": ", st.message);
  }
  Dims dims;
  std::vector<Dims> merged(n_in);
  for (size_t a = 0; a < out_dims.size(); ++a) {
    if (out_dims[a] == 1) continue;
    bool merge = !dims.empty();
    for (int k = 0; k < n_in && merge; ++k)
      merge = merged[k].back() == strides[k][a] * out_dims[a];
    if (merge) {
      dims.back() *= out_dims[a];
      for (int k = 0; k < n_in; ++k) merged[k].back() = strides[k][a];
    } else {
      dims.push_back(out_dims[a]);
      for (int k = 0; k < n_in; ++k) merged[k].push_back(strides[k][a]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (auto& s : merged) s.push_back(0);
  }
  dims_ = std::move(dims);
  strides_ = std::move(merged);
  return Status::Ok();
}

void FusedElementwise::Tile(const KernelArgs& args, const int64_t* in_off, int64_t out_off, int64_t m,
                            Scratch* scratch) const {
  const size_t n_in = in_dtypes_.size();
  float* reg = scratch->regs.data();
  const int rank = static_cast<int>(dims_.size());
  for (size_t k = 0; k < n_in; ++k) {
    const int size = DTypeSize(in_dtypes_[k]);
    const char* base = args.in<char>(static_cast<int>(k)) + in_off[k] * size;
    const int64_t st = strides_[k][rank - 1];
    float* r = reg + k * kTile;
    if (st == 1) {
      Load<float>(in_dtypes_[k], base, m, r);
    } else if (st == 0) {
      Load<float>(in_dtypes_[k], base, 1, r);
      std::fill(r + 1, r + m, r[0]);
    } else {
      for (int64_t i = 0; i < m; ++i) Load<float>(in_dtypes_[k], base + i * st * size, 1, r + i);
    }
  }
  for (size_t j = 0; j < program_.size(); ++j) {
    const Instr& in = program_[j];
    for (size_t o = 0; o < in.operands.size(); ++o) {
      const int id = in.operands[o];
      scratch->args[o] = id >= 0 ? reg + id * kTile : scratch->consts.data() + (-1 - id) * kTile;
    }
    float* y = reg + (n_in + j) * kTile;
    Eval(in, scratch->args.data(), y, m);
    RoundTo(in.dtype, y, m);
  }
  for (size_t j = 0; j < outputs_.size(); ++j) {
    const int size = DTypeSize(out_dtypes_[j]);
    Store<float>(out_dtypes_[j], reg + outputs_[j] * kTile, m, args.out<char>(static_cast<int>(j)) + out_off * size);
  }
}

Status FusedElementwise::Compute(const KernelArgs& args) const {
  const int rank = static_cast<int>(dims_.size());
  const size_t n_in = in_dtypes_.size();
  const int64_t cost = 2 * static_cast<int64_t>(program_.size() + n_in);
  ParallelFor(size_, cost, [&](int64_t begin, int64_t end) {
    // Walk [begin, end) in runs along the innermost axis, each cut into tiles.
    std::vector<int64_t> index(rank), off(n_in, 0);
    int64_t rest = begin;
    for (int a = rank - 1; a >= 0; --a) {
      index[a] = rest % dims_[a];
      rest /= dims_[a];
      for (size_t k = 0; k < n_in; ++k) off[k] += index[a] * strides_[k][a];
    }
    std::vector<int64_t> tile_off(n_in);
    Scratch scratch;
    scratch.regs.resize((n_in + program_.size()) * kTile);
    scratch.args.resize(max_operands_);
    for (float c : constants_) scratch.consts.insert(scratch.consts.end(), kTile, c);
    int64_t pos = begin;
    while (pos < end) {
      const int64_t run = std::min(dims_[rank - 1] - index[rank - 1], end - pos);
      for (int64_t s = 0; s < run; s += kTile) {
        const int64_t m = std::min(kTile, run - s);
        for (size_t k = 0; k < n_in; ++k) tile_off[k] = off[k] + s * strides_[k][rank - 1];
        Tile(args, tile_off.data(), pos + s, m, &scratch);
      }
      pos += run;
      for (size_t k = 0; k < n_in; ++k) off[k] += run * strides_[k][rank - 1];
      index[rank - 1] += run;
      for (int a = rank - 1; a > 0 && index[a] == dims_[a]; --a) {  // carry
        for (size_t k = 0; k < n_in; ++k) off[k] += strides_[k][a - 1] - dims_[a] * strides_[k][a];
        index[a] = 0;
        ++index[a - 1];
      }
    }
  });
  return Status::Ok();
}

Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  auto kernel = std::make_unique<FusedElementwise>();
  NPU_RETURN_IF_ERROR(kernel->Init(def));
  *out = std::move(kernel);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("NpuElementwise", Make);
NPU_REGISTER_FORMAT_KERNEL("NpuElementwise", Make);

}  // namespace
}  // namespace kernels
}  // namespace npu
