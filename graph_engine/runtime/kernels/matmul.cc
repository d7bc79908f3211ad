// MatMul and BatchMatMul{,V2,V3}: float32 GEMM on float32/float16/bfloat16 storage, and an
// exact (wrapping) int64 product for int32/int64. NpuFusedMatMul / NpuFusedBatchMatMul add an
// epilogue (bias, residual, activation; epilogue.h) to each block of rows right after its GEMM.
#include <array>
#include <memory>
#include <mutex>

#include "kernels/complex.h"
#include "kernels/epilogue.h"
#include "kernels/float_io.h"
#include "kernels/gemm.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kRowBlock = 64;   // rows of C per epilogue block: stays in cache

struct MatMulShape {
  int64_t m, n, k;
  bool trans_a, trans_b;
};

// Reads [.., M, K] x [.., K, N] (each possibly transposed) from the last two axes.
Status InferMatMul(const Dims& a, const Dims& b, bool ta, bool tb, MatMulShape* s) {
  const size_t ra = a.size(), rb = b.size();
  const int64_t ak = ta ? a[ra - 2] : a[ra - 1], bk = tb ? b[rb - 1] : b[rb - 2];
  if (ak != bk)
    return Error("inner dimensions differ: ", ShapeString(a), (ta ? "^T" : ""), " x ",
                 ShapeString(b), (tb ? "^T" : ""));
  *s = {ta ? a[ra - 1] : a[ra - 2], tb ? b[rb - 2] : b[rb - 1], ak, ta, tb};
  return Status::Ok();
}

// C = op(A) * op(B) in int64, row by row (i-k-j order keeps the inner loop contiguous in B
// and C when B is not transposed).
void IntGemm(const MatMulShape& s, const int64_t* a, const int64_t* b, int64_t* c) {
  ParallelFor(s.m, 2 * s.n * s.k, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      int64_t* row = c + i * s.n;
      std::fill(row, row + s.n, 0);
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const uint64_t av = static_cast<uint64_t>(s.trans_a ? a[kk * s.m + i] : a[i * s.k + kk]);
        for (int64_t j = 0; j < s.n; ++j) {
          const uint64_t bv = static_cast<uint64_t>(s.trans_b ? b[j * s.k + kk] : b[kk * s.n + j]);
          row[j] = static_cast<int64_t>(static_cast<uint64_t>(row[j]) + av * bv);
        }
      }
    }
  });
}

class MatMulKernel : public Kernel {
 public:
  // `batches` holds, per output matrix, the matrix offsets of (out, a, b).
  MatMulKernel(MatMulShape s, std::vector<std::array<int64_t, 3>> batches, int64_t a_size,
               int64_t b_size, int dtype, Epilogue ep)
      : s_(s), batches_(std::move(batches)), a_size_(a_size), b_size_(b_size), dtype_(dtype), ep_(ep),
        packs_b_(IsFloatStorage(dtype) && !s.trans_a && PrefersPackedB(s.m, s.n, s.k)) {}

  bool KeepsFromInput(int i) const override { return i == 1 && packs_b_; }

  Status Compute(const KernelArgs& args) const override {
    if (!IsFloatStorage(dtype_)) {
      IntCompute(args);
      return Status::Ok();
    }
    const int64_t mn = s_.m * s_.n, mk = s_.m * s_.k, kn = s_.k * s_.n;
    FloatIn a(dtype_, args.in(0), a_size_);
    // A B that holds from run to run (a constant or unchanged weight) is kept packed for the
    // GEMM's tiles, so its products skip that copy (see PackedB); any other is read as stored.
    std::shared_ptr<const float[]> packed;
    if (packs_b_ && args.version(1) != 0) packed = PackedB(args.in(1), args.version(1));
    std::unique_ptr<FloatIn> b;
    if (!packed) b = std::make_unique<FloatIn>(dtype_, args.in(1), b_size_);
    const int64_t total = mn * static_cast<int64_t>(batches_.size());
    FloatOut c(dtype_, args.out(0), total);
    std::unique_ptr<FloatIn> bias, residual;
    if (ep_.has_bias) bias = std::make_unique<FloatIn>(dtype_, args.in(2), s_.n);
    if (ep_.has_residual) residual = std::make_unique<FloatIn>(dtype_, args.in(ep_.has_bias ? 3 : 2), total);
    // Output rows [r0, r1) of all matrices (row r starts at element r * n) are final.
    auto epilogue = [&](int64_t r0, int64_t r1) {
      ep_.ApplyRows(c.data() + r0 * s_.n, bias ? bias->data() : nullptr,
                    residual ? residual->data() + r0 * s_.n : nullptr, r1 - r0, s_.n);
    };
    const int64_t packed_size = packed ? PackedBFloats(s_.k, s_.n) : 0;
    auto product = [&](int64_t rows, const float* a_rows, int64_t b_index, float* c_rows) {
      if (packed)
        GemmPackedB(rows, s_.n, s_.k, a_rows, packed.get() + b_index * packed_size, c_rows);
      else
        Gemm(rows, s_.n, s_.k, a_rows, s_.trans_a, b->data() + b_index * kn, s_.trans_b, c_rows);
    };
    // Work units: blocks of rows of one product (rows of op(A) are contiguous unless trans_a),
    // each finished by the epilogue while in cache. Too few units for the threads: one GEMM
    // per product, parallel inside, then the epilogue in parallel over rows.
    const int64_t rows = ep_.empty() || s_.trans_a ? std::max<int64_t>(s_.m, 1) : kRowBlock;
    const int64_t row_blocks = (s_.m + rows - 1) / rows;
    const int64_t units = static_cast<int64_t>(batches_.size()) * row_blocks;
    if (units >= PlanThreads() || ep_.empty()) {
      ParallelFor(units, ProductCost(2 * rows * s_.n * s_.k), [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const auto& off = batches_[u / row_blocks];
          const int64_t r0 = u % row_blocks * rows, r1 = std::min(s_.m, r0 + rows);
          product(r1 - r0, a.data() + off[1] * mk + r0 * s_.k, off[2], c.data() + off[0] * mn + r0 * s_.n);
          epilogue(off[0] * s_.m + r0, off[0] * s_.m + r1);
        }
      });
    } else {
      for (const auto& off : batches_)
        product(s_.m, a.data() + off[1] * mk, off[2], c.data() + off[0] * mn);
      ParallelFor(total / std::max<int64_t>(s_.n, 1), 8 * s_.n, epilogue);
    }
    c.Finish();
    return Status::Ok();
  }

 private:
  // Every matrix of B in GemmPackedB's panels, kept while B's version holds: packed by the first
  // run of each version (once per weight update), read by the runs after it.
  std::shared_ptr<const float[]> PackedB(const void* stored, uint64_t version) const {
    {
      std::lock_guard<std::mutex> lock(packed_mu_);
      if (packed_version_ == version) return packed_;
    }
    const FloatIn in(dtype_, stored, b_size_);
    const float* b = in.data();
    const int64_t kn = s_.k * s_.n, matrices = b_size_ / std::max<int64_t>(kn, 1);
    const int64_t size = PackedBFloats(s_.k, s_.n);
    std::shared_ptr<float[]> packed(new float[std::max<int64_t>(1, matrices * size)]);
    ParallelFor(matrices, 2 * kn, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) PackB(s_.k, s_.n, b + i * kn, s_.trans_b, packed.get() + i * size);
    });
    std::lock_guard<std::mutex> lock(packed_mu_);
    packed_version_ = version;
    packed_ = packed;
    return packed;
  }

  void IntCompute(const KernelArgs& args) const {
    const int64_t mn = s_.m * s_.n;
    std::vector<int64_t> a(a_size_), b(b_size_), c(mn * batches_.size());
    Load<int64_t>(dtype_, args.in(0), a_size_, a.data());
    Load<int64_t>(dtype_, args.in(1), b_size_, b.data());
    for (size_t i = 0; i < batches_.size(); ++i) {
      const auto& off = batches_[i];
      IntGemm(s_, a.data() + off[1] * s_.m * s_.k, b.data() + off[2] * s_.k * s_.n, c.data() + off[0] * mn);
    }
    Store<int64_t>(dtype_, c.data(), static_cast<int64_t>(c.size()), args.out(0));
  }

  MatMulShape s_;
  std::vector<std::array<int64_t, 3>> batches_;
  int64_t a_size_, b_size_;
  int dtype_;
  Epilogue ep_;
  const bool packs_b_;                          // B is kept packed while its version holds
  mutable std::mutex packed_mu_;                // guards the two below (runs may overlap)
  mutable uint64_t packed_version_ = 0;
  mutable std::shared_ptr<const float[]> packed_;
};

// `fused`: NpuFusedMatMul / NpuFusedBatchMatMul (float only), with the epilogue attributes
// and inputs.
Status MakeMatMul(const KernelDef& def, bool batched, bool broadcast, std::unique_ptr<Kernel>* out,
                  bool fused = false) {
  Epilogue ep;
  if (fused) NPU_RETURN_IF_ERROR(ParseEpilogue(def.attrs, &ep));
  NPU_RETURN_IF_ERROR(CheckArity(def, 2 + ep.extra_inputs(), 1));
  const int dtype = def.outputs[0].dtype;
  if ((dtype == kInt32 || dtype == kInt64) && !fused) {
    if (def.inputs[0].dtype != dtype || def.inputs[1].dtype != dtype)
      return Error("inputs are ", DTypeName(def.inputs[0].dtype), " and ", DTypeName(def.inputs[1].dtype),
                   "; expected the output dtype ", DTypeName(dtype));
  } else {
    Status st = CheckFloatStorage(def);
    if (!st.ok()) return fused ? st : Error(st.message, ", int32, int64");
  }
  const Dims &a = def.inputs[0].dims, &b = def.inputs[1].dims, &o = def.outputs[0].dims;
  bool ta, tb;
  NPU_RETURN_IF_ERROR(def.attrs.Bool(batched ? "adj_x" : "transpose_a", false, &ta));
  NPU_RETURN_IF_ERROR(def.attrs.Bool(batched ? "adj_y" : "transpose_b", false, &tb));
  if (!batched && (a.size() != 2 || b.size() != 2))
    return Error("inputs must be matrices, got ", ShapeString(a), " and ", ShapeString(b));
  if (a.size() < 2 || b.size() < 2 || o.size() < 2)
    return Error("inputs and output need rank >= 2, got ", ShapeString(a), ", ", ShapeString(b),
                 " -> ", ShapeString(o));
  MatMulShape s;
  NPU_RETURN_IF_ERROR(InferMatMul(a, b, ta, tb, &s));
  // Batch axes: equal (BatchMatMul) or broadcast to the output's (V2, V3).
  const Dims out_batch(o.begin(), o.end() - 2), a_batch(a.begin(), a.end() - 2),
      b_batch(b.begin(), b.end() - 2);
  Dims want = out_batch;
  want.push_back(s.m);
  want.push_back(s.n);
  if (o != want || (!broadcast && (a_batch != out_batch || b_batch != out_batch)))
    return Error("output shape ", ShapeString(o), " does not match ", ShapeString(a), " x ",
                 ShapeString(b));
  std::vector<Dims> strides(3);
  strides[0] = RowMajorStrides(out_batch);
  NPU_RETURN_IF_ERROR(BroadcastStrides(a_batch, out_batch, &strides[1]));
  NPU_RETURN_IF_ERROR(BroadcastStrides(b_batch, out_batch, &strides[2]));
  const StridedPlan plan = StridedPlan::Make(out_batch, strides);
  std::vector<std::array<int64_t, 3>> batches;
  plan.ForEachRun(0, plan.size(), [&](const int64_t* off, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      batches.push_back({off[0] + i * plan.inner_stride(0), off[1] + i * plan.inner_stride(1),
                         off[2] + i * plan.inner_stride(2)});
  });
  if (fused) NPU_RETURN_IF_ERROR(CheckEpilogueInputs(def, ep, 2, s.n));
  *out = std::make_unique<MatMulKernel>(s, std::move(batches), NumElements(a), NumElements(b),
                                        def.outputs[0].dtype, ep);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("MatMul", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeMatMul(d, false, false, k);
});
NPU_REGISTER_KERNEL("NpuFusedMatMul", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeMatMul(d, false, false, k, true);
});
NPU_REGISTER_KERNEL("NpuFusedBatchMatMul", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeMatMul(d, true, true, k, true);
});
NPU_REGISTER_KERNEL("BatchMatMul", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeMatMul(d, true, false, k);
});
NPU_REGISTER_KERNEL("BatchMatMulV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  if (!d.outputs.empty() && d.outputs[0].dtype == kComplex64) return MakeComplexBatchMatMul(d, k);
  return MakeMatMul(d, true, true, k);
});
NPU_REGISTER_KERNEL("BatchMatMulV3", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeMatMul(d, true, true, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
