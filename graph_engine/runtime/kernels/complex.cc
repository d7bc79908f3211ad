// complex64 <-> float32 ops: Complex (real + i*imag, broadcasting like a binary op), its parts
// Real, Imag, ComplexAbs (|z|, std::abs: hypot, so no overflow for large parts) and Angle
// (atan2(imag, real)), and Conj. complex64 is std::complex<float> storage (interleaved real,
// imag). Also BatchMatMulV2's complex64 kernel (complex.h): RFFT2D's gradient multiplies by
// a matrix of twiddle factors.
#include <cmath>
#include <complex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/complex.h"
#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

using Cf = std::complex<float>;

Status CheckDTypes(const KernelDef& def, int in_dtype, int out_dtype) {
  for (const auto& t : def.inputs)
    if (t.dtype != in_dtype)
      return Error(def.kernel, ": input dtype ", DTypeName(t.dtype), " not supported (allowed: ",
                   DTypeName(in_dtype), ")");
  if (def.outputs[0].dtype != out_dtype)
    return Error(def.kernel, ": output dtype ", DTypeName(def.outputs[0].dtype),
                 " not supported (allowed: ", DTypeName(out_dtype), ")");
  return Status::Ok();
}

class ComplexKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    NPU_RETURN_IF_ERROR(CheckDTypes(def, kFloat, kComplex64));
    const Dims& o = def.outputs[0].dims;
    std::vector<Dims> strides{RowMajorStrides(o), {}, {}};
    for (int i = 0; i < 2; ++i)
      NPU_RETURN_IF_ERROR(BroadcastStrides(def.inputs[i].dims, o, &strides[i + 1]));
    auto k = std::make_unique<ComplexKernel>();
    k->plan_ = StridedPlan::Make(o, strides);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const float* re = args.in<float>(0);
    const float* im = args.in<float>(1);
    Cf* out = args.out<Cf>(0);
    ParallelFor(plan_.size(), 2, [&](int64_t begin, int64_t end) {
      plan_.ForEachRun(begin, end, [&](const int64_t* off, int64_t n) {
        const int64_t sr = plan_.inner_stride(1), si = plan_.inner_stride(2);
        for (int64_t i = 0; i < n; ++i) out[off[0] + i] = Cf(re[off[1] + i * sr], im[off[2] + i * si]);
      });
    });
    return Status::Ok();
  }

 private:
  StridedPlan plan_;
};

// An elementwise map from complex64 to Out (float32 or complex64).
template <class Out, Out (*F)(Cf)>
class ComplexUnaryKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    NPU_RETURN_IF_ERROR(CheckDTypes(def, kComplex64, std::is_same_v<Out, Cf> ? kComplex64 : kFloat));
    if (def.inputs[0].dims != def.outputs[0].dims)
      return Error(def.kernel, ": output shape ", ShapeString(def.outputs[0].dims),
                   " differs from the input's ", ShapeString(def.inputs[0].dims));
    auto k = std::make_unique<ComplexUnaryKernel>();
    k->n_ = NumElements(def.inputs[0].dims);
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const Cf* x = args.in<Cf>(0);
    Out* y = args.out<Out>(0);
    ParallelFor(n_, 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = F(x[i]);
    });
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
};

// Row-major complex matrix products, one per output batch index; a and b are read through
// their (broadcast) batch offsets, conjugate-transposed where adj_x/adj_y say.
class ComplexMatMulKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    NPU_RETURN_IF_ERROR(CheckDTypes(def, kComplex64, kComplex64));
    const Dims &a = def.inputs[0].dims, &b = def.inputs[1].dims, &o = def.outputs[0].dims;
    auto k = std::make_unique<ComplexMatMulKernel>();
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adj_x", false, &k->adj_a_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adj_y", false, &k->adj_b_));
    if (a.size() < 2 || b.size() < 2 || o.size() < 2)
      return Error("inputs and output need rank >= 2, got ", ShapeString(a), ", ", ShapeString(b),
                   " -> ", ShapeString(o));
    const size_t ra = a.size(), rb = b.size();
    k->m_ = k->adj_a_ ? a[ra - 1] : a[ra - 2];
    k->k_ = k->adj_a_ ? a[ra - 2] : a[ra - 1];
    k->n_ = k->adj_b_ ? b[rb - 2] : b[rb - 1];
    const int64_t kb = k->adj_b_ ? b[rb - 1] : b[rb - 2];
    if (kb != k->k_)
      return InvalidArgument("Matrix size-incompatible: In[0]: ", ShapeString(a), ", In[1]: ", ShapeString(b));
    const Dims out_batch(o.begin(), o.end() - 2);
    Dims want = out_batch;
    want.push_back(k->m_);
    want.push_back(k->n_);
    if (o != want)
      return Error("output shape ", ShapeString(o), " does not match ", ShapeString(a), " x ", ShapeString(b));
    std::vector<Dims> strides{RowMajorStrides(out_batch), {}, {}};
    NPU_RETURN_IF_ERROR(BroadcastStrides(Dims(a.begin(), a.end() - 2), out_batch, &strides[1]));
    NPU_RETURN_IF_ERROR(BroadcastStrides(Dims(b.begin(), b.end() - 2), out_batch, &strides[2]));
    const StridedPlan plan = StridedPlan::Make(out_batch, strides);
    plan.ForEachRun(0, plan.size(), [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        k->batches_.push_back({off[1] + i * plan.inner_stride(1), off[2] + i * plan.inner_stride(2)});
    });
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const Cf* a = args.in<Cf>(0);
    const Cf* b = args.in<Cf>(1);
    Cf* out = args.out<Cf>(0);
    const int64_t m = m_, n = n_, kk = k_;
    ParallelFor(static_cast<int64_t>(batches_.size()) * m, n * kk * 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const Cf* A = a + batches_[r / m].first * m * kk;
        const Cf* B = b + batches_[r / m].second * kk * n;
        const int64_t i = r % m;
        for (int64_t j = 0; j < n; ++j) {
          float re = 0, im = 0;
          for (int64_t p = 0; p < kk; ++p) {
            const Cf x = adj_a_ ? std::conj(A[p * m + i]) : A[i * kk + p];
            const Cf y = adj_b_ ? std::conj(B[j * kk + p]) : B[p * n + j];
            re += x.real() * y.real() - x.imag() * y.imag();
            im += x.real() * y.imag() + x.imag() * y.real();
          }
          out[r * n + j] = Cf(re, im);
        }
      }
    });
    return Status::Ok();
  }

 private:
  bool adj_a_ = false, adj_b_ = false;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::vector<std::pair<int64_t, int64_t>> batches_;   // per output matrix: a's, b's matrix index
};

float RealOf(Cf z) { return z.real(); }
float ImagOf(Cf z) { return z.imag(); }
float AbsOf(Cf z) { return std::abs(z); }
float AngleOf(Cf z) { return std::arg(z); }
Cf ConjOf(Cf z) { return std::conj(z); }

NPU_REGISTER_KERNEL("Complex", ComplexKernel::Make);
NPU_REGISTER_KERNEL("Real", (ComplexUnaryKernel<float, RealOf>::Make));
NPU_REGISTER_KERNEL("Imag", (ComplexUnaryKernel<float, ImagOf>::Make));
NPU_REGISTER_KERNEL("ComplexAbs", (ComplexUnaryKernel<float, AbsOf>::Make));
NPU_REGISTER_KERNEL("Angle", (ComplexUnaryKernel<float, AngleOf>::Make));
NPU_REGISTER_KERNEL("Conj", (ComplexUnaryKernel<Cf, ConjOf>::Make));

}  // namespace

Status MakeComplexBatchMatMul(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return ComplexMatMulKernel::Make(def, out);
}

}  // namespace kernels
}  // namespace npu
