// The epilogue of the fused contraction kernels (NpuFusedConv2D, NpuFusedDepthwiseConv2D,
// NpuFusedMatMul, NpuFusedBatchMatMul and the 5HD convolutions): out = act(acc + bias +
// residual), in float32, applied to each output block while it is still in cache, before the
// store (docs/fusion.md). Attributes: has_bias, has_residual (bool), activation (string, ""
// for none), alpha (float, LeakyRelu's slope). The activations are op_traits.inc's
// NPU_EPILOGUE_ACTIVATION list, their math elementwise_functors.h's.
#ifndef NPU_KERNELS_EPILOGUE_H_
#define NPU_KERNELS_EPILOGUE_H_

#include <string>

#include "kernels/elementwise_functors.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {

struct Epilogue {
  // kNone, then one per NPU_EPILOGUE_ACTIVATION of graph_engine/ops/op_traits.inc, named after
  // its functor (elementwise_functors.h): kRelu, kGeluTanh ...
  enum class Act {
    kNone,
#define NPU_EPILOGUE_ACTIVATION(name, functor) k##functor,
#include "ops/op_traits.inc"
  };

  bool has_bias = false, has_residual = false;
  Act act = Act::kNone;
  float alpha = 0.2f;

  // Nothing to do after the contraction (a fused op that fused nothing; plain kernels).
  bool empty() const { return !has_bias && !has_residual && act == Act::kNone; }
  // Number of inputs the epilogue adds after the contraction's own.
  int extra_inputs() const { return (has_bias ? 1 : 0) + (has_residual ? 1 : 0); }

  // y[i] = act(y[i]) for n elements, as ApplyRun computes it.
  void ActivateRun(float* y, int64_t n) const {
    switch (act) {
      case Act::kNone: return;
#define NPU_EPILOGUE_ACTIVATION(name, functor) \
      case Act::k##functor: return Run(fn::Make<fn::functor>(alpha), y, n);
#include "ops/op_traits.inc"
    }
  }

  float Activate(float v) const {
    ActivateRun(&v, 1);
    return v;
  }

  // One output element: `bias` and `residual` are ignored (pass 0) when absent.
  float Apply(float acc, float bias, float residual) const {
    return Activate(acc + (has_bias ? bias : 0.0f) + (has_residual ? residual : 0.0f));
  }

  // A contiguous run of n outputs y (updated in place) whose channels are contiguous too:
  // bias[i] and residual[i] belong to y[i] (nullptr when absent).
  void ApplyRun(float* y, const float* bias, const float* residual, int64_t n) const {
    if (has_bias)
      for (int64_t i = 0; i < n; ++i) y[i] += bias[i];
    if (has_residual)
      for (int64_t i = 0; i < n; ++i) y[i] += residual[i];
    ActivateRun(y, n);
  }

  // A row-major [rows, channels] block y with channels innermost; the residual block has
  // the same layout (nullptr when absent), the bias has `channels` elements.
  void ApplyRows(float* y, const float* bias, const float* residual, int64_t rows, int64_t channels) const {
    if (empty()) return;
    for (int64_t r = 0; r < rows; ++r)
      ApplyRun(y + r * channels, bias, residual ? residual + r * channels : nullptr, channels);
  }

 private:
  // An activation's scalar form where it has one (Elu keeps std::expm1 here), else its
  // vectorized Block (Sigmoid, Tanh, Swish: vector_math.h).
  template <class F>
  static void Run(const F& f, float* y, int64_t n) {
    if constexpr (fn::HasScalar<F, float>::value) {
      // Fixed-length chunks: the compiler vectorizes these (at -O2 only loops of a known trip
      // count), where the plain loop kept a branch per element (Relu's NaN test) that
      // mispredicts on real data.
      constexpr int64_t kChunk = 16;
      int64_t i = 0;
      for (; i + kChunk <= n; i += kChunk)
        for (int64_t j = 0; j < kChunk; ++j) y[i + j] = f(y[i + j]);
      for (; i < n; ++i) y[i] = f(y[i]);
    } else {
      F::Block(y, y, n);
    }
  }
};

// Parses the epilogue attributes; an unknown activation is an error listing the allowed ones
// ("" for none, then op_traits.inc's NPU_EPILOGUE_ACTIVATION names).
inline Status ParseEpilogue(const Attrs& attrs, Epilogue* out) {
  static const struct { const char* name; Epilogue::Act act; } kActs[] = {
      {"", Epilogue::Act::kNone},
#define NPU_EPILOGUE_ACTIVATION(name, functor) {name, Epilogue::Act::k##functor},
#include "ops/op_traits.inc"
  };
  Epilogue e;
  NPU_RETURN_IF_ERROR(attrs.Bool("has_bias", false, &e.has_bias));
  NPU_RETURN_IF_ERROR(attrs.Bool("has_residual", false, &e.has_residual));
  std::string act;
  NPU_RETURN_IF_ERROR(attrs.String("activation", "", &act));
  double alpha;
  NPU_RETURN_IF_ERROR(attrs.Float("alpha", 0.2, &alpha));
  e.alpha = static_cast<float>(alpha);
  bool found = false;
  std::string allowed;
  for (const auto& a : kActs) {
    if (act == a.name) { e.act = a.act; found = true; }
    allowed += std::string(allowed.empty() ? "\"" : ", \"") + a.name + "\"";
  }
  if (!found) return Error("unknown activation \"", act, "\"; allowed: ", allowed);
  *out = e;
  return Status::Ok();
}

// Checks the epilogue's extra inputs, which follow the contraction's `n_contraction` inputs:
// a 1-D bias of `channels` elements and a residual shaped like the output, both of the
// output's dtype.
inline Status CheckEpilogueInputs(const KernelDef& def, const Epilogue& e, int n_contraction,
                                  int64_t channels) {
  if (static_cast<int>(def.inputs.size()) != n_contraction + e.extra_inputs())
    return Error("expects ", n_contraction + e.extra_inputs(), " inputs (has_bias=", e.has_bias,
                 ", has_residual=", e.has_residual, "), got ", def.inputs.size());
  int i = n_contraction;
  if (e.has_bias) {
    const TensorDesc& b = def.inputs[i++];
    if (b.dims.size() != 1 || b.dims[0] != channels)
      return Error("bias must have shape [", channels, "], got ", ShapeString(b.dims));
    if (b.dtype != def.outputs[0].dtype) return Error("bias dtype differs from the output's");
  }
  if (e.has_residual) {
    const TensorDesc& r = def.inputs[i];
    if (r.dims != def.outputs[0].dims)
      return Error("residual must have the output's shape ", ShapeString(def.outputs[0].dims), ", got ",
                   ShapeString(r.dims));
    if (r.dtype != def.outputs[0].dtype) return Error("residual dtype differs from the output's");
  }
  return Status::Ok();
}

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_EPILOGUE_H_
