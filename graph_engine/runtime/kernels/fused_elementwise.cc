// NpuElementwise: a fused chain of elementwise ops (graph_engine/ops/fused_elementwise.py has
// the attrs and the numpy reference) evaluated in one pass over memory.
//
// The output index space is cut into tiles of kTile elements; per tile every input is had as a
// float register (float32 contiguous inputs in place, others converted or gathered), the program
// runs register to register in one tight loop per instruction, and the outputs are stored, so
// intermediates never touch memory. Registers that are the same everywhere (scalar inputs,
// constants and instructions on them only) are computed once per run; per-channel inputs are
// expanded to a repeated row once per run, so tiles need not stop at row ends. Each instruction
// calls the functor of the op's own kernel (elementwise_functors.h; the ops are
// graph_engine/ops/op_traits.inc's NPU_FUSIBLE), so the same formula and SIMD math, and
// float16/bfloat16/bool results are rounded as that kernel would store them: results match
// the unfused graph. Integer math (an optimizer's step counter) runs exactly in int64, on
// single elements only, once per run. A float32 output that shares no bytes with an input is
// written by its instruction directly; otherwise a tile is computed completely before anything
// is stored, so an output may share an input's buffer. When every input and output has the
// output's dims and format, storage is processed as flat elements, so the kernel also runs on
// padded NPU formats.
//
// The element loops must vectorize to be worth fusing: CMakeLists.txt builds this file with -O3
// (-O2 vectorizes only loops without remainder; no fast-math, so IEEE results stay).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/elementwise_functors.h"
#include "kernels/format.h"
#include "kernels/kernel.h"
#include "kernels/scratch.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kTile = 1024;

// An instruction's op, from graph_engine/ops/op_traits.inc (NPU_FUSIBLE): its functor
// (elementwise_functors.h) over a float tile, and for the ops marked integer over int64.
using TileFn = void (*)(const float* const* a, size_t n_operands, float* y, int64_t m);
using IntFn = int64_t (*)(const int64_t* a);

// y = f(a[0][, a[1][, a[2]]]) over one tile in one tight loop (vectorized: -O3), or f's Block;
// AddN (arity -1) adds its operands in order.
template <class F, int kArity>
void EvalTile(const float* const* a, size_t n_operands, float* y, int64_t m) {
  const F f{};
  const float* x = a[0];
  if constexpr (kArity < 0) {
    std::memcpy(y, x, m * sizeof(float));
    for (size_t k = 1; k < n_operands; ++k) {
      const float* b = a[k];
      for (int64_t i = 0; i < m; ++i) y[i] = f(y[i], b[i]);
    }
  } else if constexpr (kArity == 1 && fn::HasBlock<F, float>::value) {
    F::Block(x, y, m);
  } else if constexpr (kArity == 1) {
    for (int64_t i = 0; i < m; ++i) y[i] = f(x[i]);
  } else if constexpr (kArity == 2) {
    const float* b = a[1];
    for (int64_t i = 0; i < m; ++i) y[i] = f(x[i], b[i]);
  } else {
    static_assert(kArity == 3);
    const float *b = a[1], *c = a[2];
    for (int64_t i = 0; i < m; ++i) y[i] = f(x[i], b[i], c[i]);
  }
}

template <class F, int kArity, int kInteger>
constexpr IntFn IntEval() {
  if constexpr (kInteger == 0) {
    return nullptr;
  } else {
    static_assert(kArity == 1 || kArity == 2);
    return [](const int64_t* a) -> int64_t {
      if constexpr (kArity == 1) return F{}(a[0]);
      else return F{}(a[0], a[1]);
    };
  }
}

struct OpInfo {
  const char* name;
  int arity;       // -1: any (AddN)
  bool integer;    // also exact int64 math (single elements only)
  bool cast;       // Cast: the value unchanged, rounded to the result dtype
  TileFn eval;
  IntFn eval_int;  // nullptr unless integer
};

constexpr OpInfo kOps[] = {
#define NPU_FUSIBLE(tf_op, functor, arity, integer)                                          \
  {tf_op, arity, (integer) != 0, std::is_same_v<fn::functor, fn::Cast>, &EvalTile<fn::functor, arity>, \
   IntEval<fn::functor, arity, integer>()},
#include "ops/op_traits.inc"
};

const OpInfo* FindOp(const std::string& name) {
  for (const OpInfo& op : kOps)
    if (name == op.name) return &op;
  return nullptr;
}

struct Instr {
  const OpInfo* op;
  int dtype;                  // of the result: float16/bfloat16 round, bool is 0/1
  std::vector<int> operands;  // >= 0: register; < 0: constant -1 - index
  bool integer = false;       // integer math on integer registers (single elements only)
};

bool IsInt(int dtype) { return dtype == kInt32 || dtype == kInt64; }

// Integer math as TF's kernels do it (the functors' two's complement wrap-around), in int64,
// then narrowed to the result dtype; comparisons give 0/1. Only ops marked integer get here.
int64_t EvalInt(const Instr& in, const int64_t* a) {
  const int64_t r = in.op->eval_int(a);
  return in.dtype == kInt32 ? static_cast<int32_t>(static_cast<uint32_t>(r)) : r;
}

// y = f(a[, b[, c]]) over one tile, with the functors of the ops' own kernels.
void Eval(const Instr& in, const float* const* a, float* y, int64_t m) {
  in.op->eval(a, in.operands.size(), y, m);
}

// Rounds a tile to what storing it as `dtype` keeps.
void RoundTo(int dtype, float* y, int64_t m) {
  if (dtype == kHalf) {
    // F16C round trip in registers; a tile holding an infinity or NaN then goes through
    // Store/Load too, which raise the float status and saturate (float_status.h) as the op's
    // own kernel's store does (rounding again changes nothing).
    __m128i special = _mm_setzero_si128();
    const __m128i exponent = _mm_set1_epi16(0x7C00);
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(y + i), _MM_FROUND_TO_NEAREST_INT);
      special = _mm_or_si128(special, _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent));
      _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    bool any = !_mm_testz_si128(special, special);
    for (; i < m; ++i) {
      const uint16_t h = FloatToHalf(y[i]);
      any |= (h & 0x7C00) == 0x7C00;
      y[i] = HalfToFloat(h);
    }
    if (!any) return;
  }
  if (dtype == kHalf || dtype == kBFloat16) {
    uint16_t tmp[kTile];
    Store<float>(dtype, y, m, tmp);
    Load<float>(dtype, tmp, m, y);
  } else if (dtype == kBool) {
    for (int64_t i = 0; i < m; ++i) y[i] = y[i] != 0 ? 1.0f : 0.0f;
  }
}

// r[i] = float(base[i * stride]) for i < m, with the dtype switch outside the loop; the same
// conversions as Load<float>.
void Gather(int dtype, const char* base, int64_t stride, int64_t m, float* r) {
  auto loop = [&](auto* p, auto convert) {
    for (int64_t i = 0; i < m; ++i) r[i] = convert(p[i * stride]);
  };
  auto as_float = [](auto v) { return static_cast<float>(v); };
  switch (dtype) {
    case kFloat: return loop(reinterpret_cast<const float*>(base), as_float);
    case kHalf: return loop(reinterpret_cast<const uint16_t*>(base), HalfToFloat);
    case kBFloat16: return loop(reinterpret_cast<const uint16_t*>(base), BFloat16ToFloat);
    case kBool: return loop(reinterpret_cast<const uint8_t*>(base), [](uint8_t v) { return float(v != 0); });
    case kInt32: return loop(reinterpret_cast<const int32_t*>(base), as_float);
    case kInt64: return loop(reinterpret_cast<const int64_t*>(base), as_float);
  }
}

// How a tile of an input is had, chosen at Init from its broadcast strides.
enum class Access {
  kContiguous,  // the tile is elements [pos, pos + m): float32 is read in place, others converted
  kUniform,     // one element for every position: loaded once per run
  kRow,         // varies along the innermost axis only (a per-channel vector): the row repeated
                // once per run, so tiles may span rows and each tile is a pointer into it
  kStrided,     // anything else: walked along the innermost axis, one run of it at a time
};

struct Input {
  int dtype;
  int size;       // bytes per element
  int64_t bytes;  // storage bytes, for the in-place check
  Access access;
};

class FusedElementwise : public Kernel {
 public:
  Status Init(const KernelDef& def);
  Status Compute(const KernelArgs& args) const override;

 private:
  // What one run shares among its threads: per register the data of registers that are the
  // same for every tile (uniform ones splat to a tile, rows expanded; nullptr otherwise), and
  // per instruction the output it writes straight into (float32 output not overlapping an
  // input; nullptr otherwise).
  struct Run {
    std::vector<const float*> fixed;
    std::vector<float*> direct;
  };
  void Tile(const KernelArgs& args, const Run& run, const int64_t* in_off, int64_t pos, int64_t m,
            float* regs, const float** ptr, const float** a) const;
  // Elements [pos, pos + m) of strided input k into r, one row (innermost run) at a time.
  void LoadRows(const KernelArgs& args, size_t k, int64_t pos, int64_t m, float* r) const;
  Status Classify();

  std::vector<Instr> program_;
  std::vector<bool> uniform_;         // per register: the same value at every position
  std::vector<int> slot_;             // per register: its tile in the per-thread scratch
  int slots_ = 0;
  std::vector<float> constants_;      // each splat to kTile floats
  std::vector<int> outputs_;          // register per output
  std::vector<Input> inputs_;
  std::vector<int> out_dtypes_;
  Dims dims_;                         // iteration space (merged axes)
  std::vector<Dims> strides_;         // [input][axis], 0 on broadcast axes
  int64_t size_ = 0;
  bool flat_ = false;                 // tiles run over flat positions (no strided input, or
                                      // rows shorter than a tile: LoadRows)
  size_t max_operands_ = 1;
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
  std::vector<float> constants;
  if (def.attrs.Has("constants")) {
    const AttrValue& c = def.attrs.values.at("constants");
    if (c.type == AttrValue::kFloatList) {
      for (double v : c.floats) constants.push_back(float(v));
    } else if (c.type == AttrValue::kIntList) {
      for (int64_t v : c.ints) constants.push_back(float(v));
    } else {
      return Error("attribute 'constants' must be a float list");
    }
  }
  for (float c : constants) constants_.insert(constants_.end(), kTile, c);
  const int n_in = static_cast<int>(def.inputs.size());
  for (const TensorDesc& d : def.inputs) {
    if (!IsValueDType(d.dtype) && d.dtype != kInt32 && d.dtype != kInt64)
      return Error("input dtype ", DTypeName(d.dtype), " is not supported; supported: float32, float16, bfloat16, bool, "
                   "int32, int64");
    inputs_.push_back({d.dtype, DTypeSize(d.dtype), NumElements(StorageDims(d)) * DTypeSize(d.dtype), Access::kStrided});
  }
  // Parse "Op rN kM;Op ..." into instructions.
  std::stringstream all(program);
  std::string text;
  while (std::getline(all, text, ';')) {
    std::stringstream words(text);
    std::string name, operand;
    words >> name;
    const OpInfo* op = FindOp(name);
    if (op == nullptr) return Error("program: unknown instruction '", name, "'");
    const int index = static_cast<int>(program_.size());
    if (index >= static_cast<int>(dtypes.size())) return Error("attribute 'dtypes' names fewer dtypes than the program has instructions");
    Instr in{op, static_cast<int>(dtypes[index]), {}};
    if (!IsValueDType(in.dtype) && !IsInt(in.dtype))
      return Error("instruction ", index, ": dtype ", DTypeName(in.dtype), " is not supported; supported: float32, float16, "
                   "bfloat16, bool, int32, int64");
    while (words >> operand) {
      int64_t k = -1;
      try {
        k = std::stoll(operand.substr(1));
      } catch (const std::exception&) {
      }
      if (operand[0] == 'r' && k >= 0 && k < n_in + index) in.operands.push_back(static_cast<int>(k));
      else if (operand[0] == 'k' && k >= 0 && k < static_cast<int64_t>(constants.size())) in.operands.push_back(static_cast<int>(-1 - k));
      else return Error("program: bad operand '", operand, "' in '", text, "' (rN: an input or earlier result, kN: a constant)");
    }
    const int arity = op->arity;
    if ((arity >= 0 && static_cast<int>(in.operands.size()) != arity) || in.operands.empty())
      return Error("program: '", text, "' has ", in.operands.size(), " operands; ", name, " takes ", arity);
    // Integers are exact in float32 registers only through a Cast to float32; anything else on
    // them is integer math, all of whose operands must be integers.
    auto int_reg = [&](int id) {
      return id >= 0 && (id < n_in ? IsInt(inputs_[id].dtype) : program_[id - n_in].integer && IsInt(program_[id - n_in].dtype));
    };
    const bool int_operands = std::all_of(in.operands.begin(), in.operands.end(), int_reg);
    const bool to_float = op->cast && in.dtype == kFloat;
    in.integer = int_operands && !to_float && op->integer && (IsInt(in.dtype) || (in.dtype == kBool && !op->cast));
    constexpr const char* kIntOps = "integer instructions: Neg, Add, AddV2, Sub, Mul, Maximum, Minimum, comparisons, Cast to int32/int64";
    if (IsInt(in.dtype) && !in.integer)
      return Error("program: '", text, "' computes ", DTypeName(in.dtype), "; ", kIntOps, ", on integer registers only");
    for (int id : in.operands)
      if (int_reg(id) && !in.integer && !to_float)
        return Error("program: '", text, "' reads integer register r", id,
                     "; integers may only be Cast to float32 or read by ", kIntOps);
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
    return Classify();
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
  return Classify();
}

// Picks each input's access and marks the registers that are uniform (so is an instruction
// all of whose operands are: it runs once per run, not per tile).
Status FusedElementwise::Classify() {
  const int rank = static_cast<int>(dims_.size());
  Dims dense(rank, 1);
  for (int a = rank - 2; a >= 0; --a) dense[a] = dense[a + 1] * dims_[a + 1];
  // Rows shorter than a tile: tiles span rows and strided inputs are gathered row by row into
  // them (LoadRows), else each short run would pay the whole program.
  flat_ = dims_.back() < kTile;
  bool strided = false;
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const Dims& s = strides_[k];
    const bool inner_only = std::all_of(s.begin(), s.end() - 1, [](int64_t v) { return v == 0; });
    Access& access = inputs_[k].access;
    if (inner_only && s.back() == 0) access = Access::kUniform;
    else if (s == dense) access = Access::kContiguous;
    else if (inner_only && s.back() == 1) access = Access::kRow;
    else access = Access::kStrided;
    strided = strided || access == Access::kStrided;
  }
  flat_ = flat_ || !strided;
  if (!flat_)  // rows are then walked run by run like the strided inputs
    for (Input& in : inputs_)
      if (in.access == Access::kRow) in.access = Access::kStrided;
  for (const Input& in : inputs_) uniform_.push_back(in.access == Access::kUniform);
  for (size_t j = 0; j < program_.size(); ++j) {
    const Instr& in = program_[j];
    uniform_.push_back(std::all_of(in.operands.begin(), in.operands.end(), [&](int id) { return id < 0 || uniform_[id]; }));
    if (in.integer && !uniform_.back())  // per-element integer math would need its own registers
      return Error("instruction ", j, ": integer math needs single-element operands (an optimizer's step counter)");
  }
  // Scratch tiles by liveness, so long programs stay in L1: an instruction's tile is free after
  // its last reader (outputs are stored at the tile's end); a result never shares its operands'
  // tiles (AddN writes its result before reading its later operands).
  const int n_in = static_cast<int>(inputs_.size());
  std::vector<int> last(uniform_.size(), -1);
  for (size_t j = 0; j < program_.size(); ++j)
    for (int id : program_[j].operands)
      if (id >= 0) last[id] = static_cast<int>(j);
  for (int reg : outputs_) last[reg] = static_cast<int>(program_.size());
  slot_.assign(uniform_.size(), -1);
  std::vector<int> free_slots;
  slots_ = n_in;
  for (int k = 0; k < n_in; ++k) slot_[k] = k;
  for (size_t j = 0; j < program_.size(); ++j) {
    const int reg = n_in + static_cast<int>(j);
    if (uniform_[reg]) continue;
    if (free_slots.empty()) free_slots.push_back(slots_++);
    slot_[reg] = free_slots.back();
    free_slots.pop_back();
    if (last[reg] < 0) free_slots.push_back(slot_[reg]);  // read by nothing
    for (int id : program_[j].operands)
      if (id >= n_in && last[id] == static_cast<int>(j) && slot_[id] >= 0 &&
          std::find(free_slots.begin(), free_slots.end(), slot_[id]) == free_slots.end())
        free_slots.push_back(slot_[id]);
  }
  return Status::Ok();
}

void FusedElementwise::Tile(const KernelArgs& args, const Run& run, const int64_t* in_off, int64_t pos,
                            int64_t m, float* regs, const float** ptr, const float** a) const {
  const size_t n_in = inputs_.size();
  const int rank = static_cast<int>(dims_.size());
  for (size_t k = 0; k < n_in; ++k) {
    const Input& in = inputs_[k];
    float* r = regs + slot_[k] * kTile;
    if (in.access == Access::kUniform) continue;
    if (in.access == Access::kRow) {
      ptr[k] = run.fixed[k] + pos % dims_[rank - 1];
      continue;
    }
    if (in.access == Access::kStrided && flat_) {
      LoadRows(args, k, pos, m, r);
      ptr[k] = r;
      continue;
    }
    const char* base = args.in<char>(static_cast<int>(k)) + in_off[k] * in.size;
    const int64_t st = in.access == Access::kContiguous ? 1 : strides_[k][rank - 1];
    if (st == 1 && in.dtype == kFloat) {
      ptr[k] = reinterpret_cast<const float*>(base);
      continue;
    }
    if (st == 1) {
      Load<float>(in.dtype, base, m, r);
    } else if (st == 0) {
      Load<float>(in.dtype, base, 1, r);
      std::fill(r + 1, r + m, r[0]);
    } else {
      Gather(in.dtype, base, st, m, r);
    }
    ptr[k] = r;
  }
  for (size_t j = 0; j < program_.size(); ++j) {
    const size_t reg = n_in + j;
    if (uniform_[reg]) continue;
    const Instr& in = program_[j];
    for (size_t o = 0; o < in.operands.size(); ++o) {
      const int id = in.operands[o];
      a[o] = id >= 0 ? ptr[id] : constants_.data() + (-1 - id) * kTile;
    }
    float* y = run.direct[j] ? run.direct[j] + pos : regs + slot_[reg] * kTile;
    Eval(in, a, y, m);
    RoundTo(in.dtype, y, m);
    ptr[reg] = y;
  }
  for (size_t j = 0; j < outputs_.size(); ++j) {
    const int reg = outputs_[j];
    if (run.direct[reg - n_in] == args.out<float>(static_cast<int>(j)) || IsInt(out_dtypes_[j])) continue;  // written
    const int size = DTypeSize(out_dtypes_[j]);
    Store<float>(out_dtypes_[j], ptr[reg], m, args.out<char>(static_cast<int>(j)) + pos * size);
  }
}

void FusedElementwise::LoadRows(const KernelArgs& args, size_t k, int64_t pos, int64_t m,
                                float* r) const {
  const Input& in = inputs_[k];
  const Dims& strides = strides_[k];
  const int rank = static_cast<int>(dims_.size());
  const int64_t inner = dims_[rank - 1], step = strides[rank - 1];
  for (int64_t done = 0; done < m;) {
    int64_t rest = pos + done, off = 0;
    for (int a = rank - 1; a >= 0; --a) {
      off += rest % dims_[a] * strides[a];
      rest /= dims_[a];
    }
    const int64_t len = std::min(inner - (pos + done) % inner, m - done);
    const char* base = args.in<char>(static_cast<int>(k)) + off * in.size;
    if (step == 1) {
      Load<float>(in.dtype, base, len, r + done);
    } else if (step == 0) {
      Load<float>(in.dtype, base, 1, r + done);
      std::fill(r + done + 1, r + done + len, r[done]);
    } else {
      Gather(in.dtype, base, step, len, r + done);
    }
    done += len;
  }
}

Status FusedElementwise::Compute(const KernelArgs& args) const {
  if (size_ == 0) return Status::Ok();
  const int rank = static_cast<int>(dims_.size());
  const size_t n_in = inputs_.size(), n_regs = uniform_.size();
  // Uniform registers once (a tile of copies each), rows expanded to row + kTile elements.
  Run run;
  run.fixed.assign(n_regs, nullptr);
  run.direct.assign(program_.size(), nullptr);
  std::vector<std::vector<float>> shared;
  std::vector<int64_t> ival(n_regs, 0);   // integer registers (all uniform)
  auto splat = [&](int reg, float* first) {
    std::fill(first + 1, first + kTile, first[0]);
    run.fixed[reg] = first;
  };
  for (size_t k = 0; k < n_in; ++k) {
    const Input& in = inputs_[k];
    if (in.access == Access::kUniform) {
      shared.emplace_back(kTile);
      Load<float>(in.dtype, args.in(static_cast<int>(k)), 1, shared.back().data());
      if (IsInt(in.dtype)) Load<int64_t>(in.dtype, args.in(static_cast<int>(k)), 1, &ival[k]);
      splat(static_cast<int>(k), shared.back().data());
    } else if (in.access == Access::kRow) {
      const int64_t len = dims_[rank - 1];
      shared.emplace_back(len + kTile);
      float* row = shared.back().data();
      Load<float>(in.dtype, args.in(static_cast<int>(k)), len, row);
      for (int64_t i = len; i < len + kTile; ++i) row[i] = row[i - len];
      run.fixed[k] = row;
    }
  }
  std::vector<const float*> a(max_operands_);
  for (size_t j = 0; j < program_.size(); ++j) {
    if (!uniform_[n_in + j]) continue;
    const Instr& in = program_[j];
    for (size_t o = 0; o < in.operands.size(); ++o) {
      const int id = in.operands[o];
      a[o] = id >= 0 ? run.fixed[id] : constants_.data() + (-1 - id) * kTile;
    }
    shared.emplace_back(kTile);
    if (in.integer) {  // the float view is what a Cast to float32 reads
      int64_t operands[2];
      for (size_t o = 0; o < in.operands.size(); ++o) operands[o] = ival[in.operands[o]];
      ival[n_in + j] = EvalInt(in, operands);
      shared.back()[0] = static_cast<float>(ival[n_in + j]);
    } else {
      Eval(in, a.data(), shared.back().data(), 1);
      RoundTo(in.dtype, shared.back().data(), 1);
    }
    splat(static_cast<int>(n_in + j), shared.back().data());
  }
  for (size_t j = 0; j < outputs_.size(); ++j) {  // integer outputs are uniform: fill them now
    if (!IsInt(out_dtypes_[j])) continue;
    std::vector<int64_t> value(size_, ival[outputs_[j]]);
    Store<int64_t>(out_dtypes_[j], value.data(), size_, args.out(static_cast<int>(j)));
  }
  // A float32 output that shares no byte with an input is written by its instruction directly.
  for (size_t j = 0; j < outputs_.size(); ++j) {
    const int reg = outputs_[j];
    float* out = args.out<float>(static_cast<int>(j));
    if (out_dtypes_[j] != kFloat || uniform_[reg] || run.direct[reg - n_in]) continue;
    const char* lo = reinterpret_cast<const char*>(out);
    const char* hi = lo + size_ * sizeof(float);
    bool overlap = false;
    for (size_t k = 0; k < n_in && !overlap; ++k) {
      const char* in = args.in<char>(static_cast<int>(k));
      overlap = in < hi && lo < in + inputs_[k].bytes;
    }
    if (!overlap) run.direct[reg - n_in] = out;
  }
  // One unit per register and element: the instructions run vectorized over whole tiles (an
  // LSTM cell's gradient, 36 registers over 1024 elements, took longer on two threads).
  const int64_t cost = static_cast<int64_t>(n_regs);
  ParallelFor(size_, cost, [&](int64_t begin, int64_t end) {
    float* regs = Scratch(kScratchTiles, slots_ * kTile);   // no zero fill per call
    std::vector<const float*> ptr = run.fixed, operands(max_operands_);
    std::vector<int64_t> off(n_in, 0), tile_off(n_in);
    if (flat_) {
      for (int64_t pos = begin; pos < end; pos += kTile) {
        std::fill(tile_off.begin(), tile_off.end(), pos);
        Tile(args, run, tile_off.data(), pos, std::min(kTile, end - pos), regs, ptr.data(),
             operands.data());
      }
      return;
    }
    // Walk [begin, end) in runs along the innermost axis, each cut into tiles.
    std::vector<int64_t> index(rank);
    int64_t rest = begin;
    for (int a = rank - 1; a >= 0; --a) {
      index[a] = rest % dims_[a];
      rest /= dims_[a];
      for (size_t k = 0; k < n_in; ++k) off[k] += index[a] * strides_[k][a];
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t len = std::min(dims_[rank - 1] - index[rank - 1], end - pos);
      for (int64_t s = 0; s < len; s += kTile) {
        for (size_t k = 0; k < n_in; ++k) tile_off[k] = off[k] + s * strides_[k][rank - 1];
        Tile(args, run, tile_off.data(), pos + s, std::min(kTile, len - s), regs, ptr.data(),
             operands.data());
      }
      pos += len;
      for (size_t k = 0; k < n_in; ++k) off[k] += len * strides_[k][rank - 1];
      index[rank - 1] += len;
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
