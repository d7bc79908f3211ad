// Elementwise kernels: an op is a functor of elementwise_functors.h evaluated in its compute
// type (float, double or int64) over a broadcast StridedPlan whose operand 0 is the output. Stored elements are
// converted in blocks, so float16/bfloat16 storage costs one conversion per element and
// float32/float64/int64 storage is read in place.
#ifndef NPU_KERNELS_ELEMENTWISE_H_
#define NPU_KERNELS_ELEMENTWISE_H_

#include <complex>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/dtype.h"
#include "kernels/elementwise_functors.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {

// Element types an op accepts (bit set).
enum TypeSet : unsigned {
  kFloats = 1,     // float32, float16, bfloat16 (computed in float)
  kDoubles = 2,    // float64
  kInts = 4,       // int8..int64, uint8 (computed in int64)
  kBools = 8,      // bool (computed in int64 as 0/1)
  kReal = kFloats | kDoubles,
  kNumeric = kFloats | kDoubles | kInts,
  kAllTypes = kNumeric | kBools,
  kComplexes = 16,  // complex64 (computed as std::complex<float>): arithmetic of FFT gradients
  kRealComplex = kReal | kComplexes,
  kNumericComplex = kNumeric | kComplexes,
};
bool InTypeSet(unsigned types, int dtype);
std::string TypeSetNames(unsigned types);

// Per-element error a kernel must report instead of computing, with TF's message and class:
// integer division by zero (InvalidArgumentError "Integer division by zero"; TruncateDiv and
// TruncateMod give TF's InternalError instead), negative integer powers (InvalidArgumentError).
enum class IntCheck { kNone, kNonZeroRhs, kNonZeroRhsTruncate, kNonNegativeRhs };

// `param` is the op's attribute (LeakyRelu's alpha) for ops constructible from a double.
using EvalFn = void (*)(const StridedPlan& plan, const int* in_dtypes, const void* const* in,
                        int out_dtype, void* out, double param);

// A unary op with a Block (elementwise_functors.h) computes whole blocks at once; blocks hold
// at most kElementwiseBlock elements here.
constexpr int64_t kElementwiseBlock = 256;

template <class T, int N, class Op>
void EvalElementwise(const StridedPlan& plan, const int* in_dtypes, const void* const* in,
                     int out_dtype, void* out, double param) {
  const Op op = fn::Make<Op>(param);
  constexpr int64_t kBlock = kElementwiseBlock;
  const int out_size = DTypeSize(out_dtype);
  int in_size[N];
  for (int k = 0; k < N; ++k) in_size[k] = DTypeSize(in_dtypes[k]);
  ParallelFor(plan.size(), Op::kCost, [&](int64_t begin, int64_t end) {
    T buf[N][kBlock];
    T obuf[kBlock];
    plan.ForEachRun(begin, end, [&](const int64_t* off, int64_t n) {
      for (int64_t s = 0; s < n; s += kBlock) {
        const int64_t m = std::min(kBlock, n - s);
        const T* x[N];
        for (int k = 0; k < N; ++k) {
          const int64_t st = plan.inner_stride(k + 1);
          const char* base = static_cast<const char*>(in[k]) + (off[k + 1] + s * st) * in_size[k];
          if (st == 1 && IsNative<T>(in_dtypes[k])) {
            x[k] = reinterpret_cast<const T*>(base);
            continue;
          }
          if (st == 1) {
            Load<T>(in_dtypes[k], base, m, buf[k]);
          } else if (st == 0) {
            Load<T>(in_dtypes[k], base, 1, buf[k]);
            std::fill(buf[k] + 1, buf[k] + m, buf[k][0]);
          } else {
            for (int64_t i = 0; i < m; ++i)
              Load<T>(in_dtypes[k], base + i * st * in_size[k], 1, buf[k] + i);
          }
          x[k] = buf[k];
        }
        const bool direct = IsNative<T>(out_dtype);
        T* o = direct ? static_cast<T*>(out) + off[0] + s : obuf;
        if constexpr (N == 1 && fn::HasBlock<Op, T>::value) {
          Op::Block(x[0], o, m);
        } else if constexpr (N == 1) {
          for (int64_t i = 0; i < m; ++i) o[i] = op(x[0][i]);
        } else if constexpr (N == 2) {
          for (int64_t i = 0; i < m; ++i) o[i] = op(x[0][i], x[1][i]);
        } else {
          for (int64_t i = 0; i < m; ++i) o[i] = op(x[0][i], x[1][i], x[2][i]);
        }
        if (!direct) Store<T>(out_dtype, obuf, m, static_cast<char*>(out) + (off[0] + s) * out_size);
      }
    });
  });
}

// An elementwise node: its plan and the evaluator for its compute type.
class ElementwiseKernel : public Kernel {
 public:
  ElementwiseKernel(StridedPlan plan, std::vector<int> in_dtypes, int out_dtype, EvalFn eval,
                    IntCheck check, double param)
      : plan_(std::move(plan)), in_dtypes_(std::move(in_dtypes)), out_dtype_(out_dtype),
        eval_(eval), check_(check), param_(param) {}
  Status Compute(const KernelArgs& args) const override;
  void set_rhs_dims(Dims dims) { rhs_dims_ = std::move(dims); }   // for the IntCheck scan

 private:
  StridedPlan plan_;
  Dims rhs_dims_;
  std::vector<int> in_dtypes_;
  int out_dtype_;
  EvalFn eval_;
  IntCheck check_;
  double param_;
};

template <int N, class Op, unsigned Types>
EvalFn SelectEval(ComputeType ct) {
  if constexpr ((Types & kFloats) != 0) if (ct == ComputeType::kFloat) return &EvalElementwise<float, N, Op>;
  if constexpr ((Types & kDoubles) != 0) if (ct == ComputeType::kDouble) return &EvalElementwise<double, N, Op>;
  if constexpr ((Types & (kInts | kBools)) != 0) if (ct == ComputeType::kInt64) return &EvalElementwise<int64_t, N, Op>;
  if constexpr ((Types & kComplexes) != 0) if (ct == ComputeType::kComplex) return &EvalElementwise<std::complex<float>, N, Op>;
  return nullptr;
}

// How an elementwise node is checked and built.
struct ElementwiseSpec {
  int inputs;
  unsigned types;                        // dtypes the inputs may have (one dtype for all)
  bool bool_output = false;              // else the output has the inputs' dtype
  IntCheck check = IntCheck::kNone;
  const char* param_attr = nullptr;      // float attribute handed to the op
  double param_default = 0;
};

// Validates an elementwise node (inputs broadcasting to the output) and builds its kernel.
// `in_dims` overrides the inputs' shapes (BiasAdd reads its bias as [C,1,1] for NCHW).
Status MakeElementwise(const KernelDef& def, const ElementwiseSpec& spec, EvalFn (*select)(ComputeType),
                       std::unique_ptr<Kernel>* out, const std::vector<Dims>* in_dims = nullptr);

template <int N, class Op, unsigned Types>
void RegisterElementwise(const char* name, ElementwiseSpec spec) {
  spec.inputs = N;
  spec.types = Types;
  RegisterKernel(name, [spec](const KernelDef& def, std::unique_ptr<Kernel>* out) {
    return MakeElementwise(def, spec, &SelectEval<N, Op, Types>, out);
  });
}

template <class Op, unsigned Types, bool BoolOutput = false>
void RegisterUnary(const char* name) {
  RegisterElementwise<1, Op, Types>(name, {1, Types, BoolOutput});
}

template <class Op, unsigned Types, bool BoolOutput = false, IntCheck Check = IntCheck::kNone>
void RegisterBinary(const char* name) {
  RegisterElementwise<2, Op, Types>(name, {2, Types, BoolOutput, Check});
}

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_ELEMENTWISE_H_
