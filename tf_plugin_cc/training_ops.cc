// NPU kernels for TF's optimizer updates of resource variables: ResourceApply{GradientDescent,
// ProximalGradientDescent, Momentum, KerasMomentum, Adam, AdamWithAmsgrad, AdaMax, Adagrad,
// AdagradV2, AdagradDA, ProximalAdagrad, Adadelta, RMSProp, CenteredRMSProp, Ftrl, FtrlV2,
// AddSign, PowerSign} and the ResourceSparseApply* forms (an IndexedSlices gradient: the rows
// `indices` of the variable and of its slots are updated, duplicate indices in order).
//
// Variables live on the NPU, so the updates TF's optimizers (tf.compat.v1.train.*) emit for them
// need NPU kernels, or the placer cannot colocate them with the variable. Like the sparse
// variable kernels (resource_ops.cc) they write the variables in place and are never clustered:
// they are plugin kernels, not graph-engine ops.
//
// Every one of these updates is elementwise: each element of the variable and its slots changes
// as a function of itself, the gradient's element and the op's scalars. So an optimizer here is
// one small functor of one element (the formulas of TF's CPU kernels,
// tensorflow/core/kernels/training_ops.cc), and one kernel template runs it over all elements
// (dense) or over the elements of the indexed rows (sparse). float16 and bfloat16 are storage
// types on the NPU: computed in float32 and rounded once on store, as the graph engine does.
//
// What the kernels share with TF's: the dtypes of TF's CPU kernels, the attrs (use_nesterov,
// update_slots, multiply_linear_by_lr), the checks and their InvalidArgumentError messages,
// variables locked in address order (TF's MaybeLockVariableInputMutexesInOrder), copy-on-read
// mode before a sparse update, and copy-on-write of a buffer a reader still shares (accounted as
// variable memory, variable_access.h). Beyond TF's CPU kernels: the indices are all checked
// before any row is written (an out-of-range index leaves the variables unchanged instead of half
// updated), and a gradient of the wrong rank, a slot of the wrong shape (AdamWithAmsgrad's vhat)
// or a variable of another dtype is an InvalidArgumentError rather than out-of-bounds access.
//
// Device memory of the simulated NPU is host memory: each kernel waits for the work queued on its
// NPU stream and then computes on the host; a real NPU would launch the update on the stream.
#define EIGEN_USE_THREADS

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model_runner.h"
#include "registration.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/util/util.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "variable_access.h"

namespace npu_tf {
namespace {

using tensorflow::DataType;
using tensorflow::DataTypeToEnum;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShapeUtils;
using tensorflow::Var;
using CPUDevice = Eigen::ThreadPoolDevice;

// The type an element is computed in.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Eigen::half> {
  using type = float;
};
template <>
struct ComputeType<Eigen::bfloat16> {
  using type = float;
};

struct Attrs {
  bool use_nesterov = false;
  bool update_slots = true;
  bool multiply_linear_by_lr = false;
};

template <typename C>
C Sign(C x) {
  return x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
}

// ---------------------------------------------------------------------------------------------
// The updates of one element. x[0] is the variable's element, x[1...] its slots' (in the op's
// input order); s are the op's scalar inputs in the order of its OpSpec (below); g the gradient.

template <typename C>
struct GradientDescent {
  static constexpr int kVars = 1;
  GradientDescent(const C* s, const Attrs&) : lr(s[0]) {}
  void operator()(C* x, C g) const { x[0] -= g * lr; }
  C lr;
};

// FOBOS: the proximal step of the l1/l2 regularizer after a gradient step `prox` taken with
// learning rate `lr`.
template <typename C>
C Proximal(C prox, C lr, C l1, C l2) {
  if (l1 > C(0)) {
    return Sign(prox) * std::max(std::abs(prox) - lr * l1, C(0)) / (C(1) + l2 * lr);
  }
  return prox / (C(1) + l2 * lr);
}

template <typename C>
struct ProximalGradientDescent {
  static constexpr int kVars = 1;
  ProximalGradientDescent(const C* s, const Attrs&) : lr(s[0]), l1(s[1]), l2(s[2]) {}
  void operator()(C* x, C g) const { x[0] = Proximal(x[0] - g * lr, lr, l1, l2); }
  C lr, l1, l2;
};

template <typename C>
struct ProximalAdagrad {
  static constexpr int kVars = 2;  // var, accum
  ProximalAdagrad(const C* s, const Attrs&) : lr(s[0]), l1(s[1]), l2(s[2]) {}
  void operator()(C* x, C g) const {
    x[1] += g * g;
    const C rate = lr / std::sqrt(x[1]);
    x[0] = Proximal(x[0] - g * rate, rate, l1, l2);
  }
  C lr, l1, l2;
};

template <typename C>
struct Momentum {
  static constexpr int kVars = 2;  // var, accum
  Momentum(const C* s, const Attrs& a) : lr(s[0]), momentum(s[1]), nesterov(a.use_nesterov) {}
  void operator()(C* x, C g) const {
    x[1] = x[1] * momentum + g;
    x[0] -= nesterov ? g * lr + x[1] * momentum * lr : x[1] * lr;
  }
  C lr, momentum;
  bool nesterov;
};

template <typename C>
struct KerasMomentum {
  static constexpr int kVars = 2;  // var, accum
  KerasMomentum(const C* s, const Attrs& a)
      : lr(s[0]), momentum(s[1]), nesterov(a.use_nesterov) {}
  void operator()(C* x, C g) const {
    x[1] = x[1] * momentum - g * lr;
    x[0] += nesterov ? x[1] * momentum - g * lr : x[1];
  }
  C lr, momentum;
  bool nesterov;
};

// Scalars of the Adam family: beta1_power, beta2_power, lr, beta1, beta2, epsilon.
template <typename C>
C AdamStep(const C* s) {
  return s[2] * std::sqrt(C(1) - s[1]) / (C(1) - s[0]);
}

template <typename C>
struct Adam {
  static constexpr int kVars = 3;  // var, m, v
  Adam(const C* s, const Attrs& a)
      : alpha(AdamStep(s)), beta1(s[3]), beta2(s[4]), epsilon(s[5]), nesterov(a.use_nesterov) {}
  void operator()(C* x, C g) const {
    x[1] += (g - x[1]) * (C(1) - beta1);
    x[2] += (g * g - x[2]) * (C(1) - beta2);
    const C m = nesterov ? g * (C(1) - beta1) + beta1 * x[1] : x[1];
    x[0] -= m * alpha / (std::sqrt(x[2]) + epsilon);
  }
  C alpha, beta1, beta2, epsilon;
  bool nesterov;
};

template <typename C>
struct AdamWithAmsgrad {
  static constexpr int kVars = 4;  // var, m, v, vhat
  AdamWithAmsgrad(const C* s, const Attrs&)
      : alpha(AdamStep(s)), beta1(s[3]), beta2(s[4]), epsilon(s[5]) {}
  void operator()(C* x, C g) const {
    x[1] += (g - x[1]) * (C(1) - beta1);
    x[2] += (g * g - x[2]) * (C(1) - beta2);
    x[3] = std::max(x[3], x[2]);
    x[0] -= x[1] * alpha / (std::sqrt(x[3]) + epsilon);
  }
  C alpha, beta1, beta2, epsilon;
};

template <typename C>
struct AdaMax {
  static constexpr int kVars = 3;  // var, m, v
  // Scalars: beta1_power, lr, beta1, beta2, epsilon.
  AdaMax(const C* s, const Attrs&)
      : rate(s[1] / (C(1) - s[0])), beta1(s[2]), beta2(s[3]), epsilon(s[4]) {}
  void operator()(C* x, C g) const {
    x[1] += (g - x[1]) * (C(1) - beta1);
    x[2] = std::max(beta2 * x[2], std::abs(g));
    x[0] -= rate * (x[1] / (x[2] + epsilon));
  }
  C rate, beta1, beta2, epsilon;
};

template <typename C>
struct Adagrad {
  static constexpr int kVars = 2;  // var, accum
  Adagrad(const C* s, const Attrs& a) : lr(s[0]), update_slots(a.update_slots) {}
  void operator()(C* x, C g) const {
    if (update_slots) x[1] += g * g;
    x[0] -= g * lr / std::sqrt(x[1]);
  }
  C lr;
  bool update_slots;
};

template <typename C>
struct AdagradV2 {
  static constexpr int kVars = 2;  // var, accum
  AdagradV2(const C* s, const Attrs& a) : lr(s[0]), epsilon(s[1]), update_slots(a.update_slots) {}
  void operator()(C* x, C g) const {
    if (update_slots) x[1] += g * g;
    x[0] -= g * lr / (std::sqrt(x[1]) + epsilon);
  }
  C lr, epsilon;
  bool update_slots;
};

// The variable is recomputed from the accumulated gradients:
// var = -lr * sign(ga) * max(|ga| - step * l1, 0) / (l2 * step * lr + sqrt(gga)).
template <typename C>
struct AdagradDA {
  static constexpr int kVars = 3;  // var, gradient_accumulator, gradient_squared_accumulator
  // Scalars: lr, l1, l2, global_step.
  AdagradDA(const C* s, const Attrs&)
      : lr(s[0]), l1(s[1]), step_l1(s[3] * s[1]), step_l2_lr(s[2] * s[3] * s[0]) {}
  void operator()(C* x, C g) const {
    x[1] += g;
    x[2] += g * g;
    const C denominator = step_l2_lr + std::sqrt(x[2]);
    x[0] = l1 > C(0) ? -lr * Sign(x[1]) * std::max(std::abs(x[1]) - step_l1, C(0)) / denominator
                     : -lr * x[1] / denominator;
  }
  C lr, l1, step_l1, step_l2_lr;
};

template <typename C>
struct Adadelta {
  static constexpr int kVars = 3;  // var, accum, accum_update
  Adadelta(const C* s, const Attrs&) : lr(s[0]), rho(s[1]), epsilon(s[2]) {}
  void operator()(C* x, C g) const {
    x[1] = x[1] * rho + g * g * (C(1) - rho);
    const C update = std::sqrt(x[2] + epsilon) / std::sqrt(x[1] + epsilon) * g;
    x[0] -= update * lr;
    x[2] = x[2] * rho + update * update * (C(1) - rho);
  }
  C lr, rho, epsilon;
};

template <typename C>
struct RMSProp {
  static constexpr int kVars = 3;  // var, ms, mom
  RMSProp(const C* s, const Attrs&) : lr(s[0]), rho(s[1]), momentum(s[2]), epsilon(s[3]) {}
  void operator()(C* x, C g) const {
    x[1] += (g * g - x[1]) * (C(1) - rho);
    x[2] = x[2] * momentum + g * lr / std::sqrt(x[1] + epsilon);
    x[0] -= x[2];
  }
  C lr, rho, momentum, epsilon;
};

template <typename C>
struct CenteredRMSProp {
  static constexpr int kVars = 4;  // var, mg, ms, mom
  CenteredRMSProp(const C* s, const Attrs&)
      : lr(s[0]), rho(s[1]), momentum(s[2]), epsilon(s[3]) {}
  void operator()(C* x, C g) const {
    x[2] += (g * g - x[2]) * (C(1) - rho);
    x[1] += (g - x[1]) * (C(1) - rho);
    x[3] = x[3] * momentum + g * lr / std::sqrt(x[2] - x[1] * x[1] + epsilon);
    x[0] -= x[3];
  }
  C lr, rho, momentum, epsilon;
};

// Scalars: lr, l1, l2, [l2_shrinkage,] lr_power. With multiply_linear_by_lr the linear slot
// holds lr times the usual one.
template <typename C, bool kShrinkage>
struct FtrlUpdate {
  static constexpr int kVars = 3;  // var, accum, linear
  FtrlUpdate(const C* s, const Attrs& a)
      : lr(s[0]),
        l1(s[1]),
        l2(s[2]),
        shrinkage(kShrinkage ? s[3] : C(0)),
        lr_power(s[kShrinkage ? 4 : 3]),
        by_lr(a.multiply_linear_by_lr) {}
  C Power(C accum) const {
    return lr_power == C(-0.5) ? std::sqrt(accum) : std::pow(accum, -lr_power);
  }
  void operator()(C* x, C g) const {
    const C shrunk = kShrinkage ? g + C(2) * shrinkage * x[0] : g;
    const C accum = x[1] + g * g;
    const C sigma = Power(accum) - Power(x[1]);
    x[2] += by_lr ? shrunk * lr - sigma * x[0] : shrunk - sigma / lr * x[0];
    const C l1_t = by_lr ? l1 * lr : l1;
    const C quadratic = by_lr ? Power(accum) + C(2) * l2 * lr : Power(accum) / lr + C(2) * l2;
    x[0] = std::abs(x[2]) > l1_t ? (l1_t * Sign(x[2]) - x[2]) / quadratic : C(0);
    x[1] = accum;
  }
  C lr, l1, l2, shrinkage, lr_power;
  bool by_lr;
};
template <typename C>
using Ftrl = FtrlUpdate<C, false>;
template <typename C>
using FtrlV2 = FtrlUpdate<C, true>;

// Scalars of AddSign: lr, alpha, sign_decay, beta.
template <typename C>
struct AddSign {
  static constexpr int kVars = 2;  // var, m
  AddSign(const C* s, const Attrs&) : lr(s[0]), alpha(s[1]), sign_decay(s[2]), beta(s[3]) {}
  void operator()(C* x, C g) const {
    x[1] = x[1] * beta + g * (C(1) - beta);
    x[0] -= lr * (alpha + sign_decay * Sign(g) * Sign(x[1])) * g;
  }
  C lr, alpha, sign_decay, beta;
};

// Scalars of PowerSign: lr, logbase, sign_decay, beta.
template <typename C>
struct PowerSign {
  static constexpr int kVars = 2;  // var, m
  PowerSign(const C* s, const Attrs&) : lr(s[0]), logbase(s[1]), sign_decay(s[2]), beta(s[3]) {}
  void operator()(C* x, C g) const {
    x[1] = x[1] * beta + g * (C(1) - beta);
    x[0] -= lr * std::exp(logbase * sign_decay * Sign(g) * Sign(x[1])) * g;
  }
  C lr, logbase, sign_decay, beta;
};

// ---------------------------------------------------------------------------------------------
// The ops: their inputs, checks and messages (TF's), dtypes.

enum class Bound { kAny, kPositive, kNonNegative, kNonPositive };

struct ScalarArg {
  const char* input;
  const char* what;            // how TF's messages name it
  Bound bound = Bound::kAny;   // what TF's CPU kernel requires of the value
  const char* tail = ": ";     // between "is not a ... scalar" and the shape, as TF writes it
};

struct VarArg {
  const char* input;
  const char* what = nullptr;  // how TF's shape messages name it, when not by the input's name
};

// TF's CPU dtypes of each op, of those the NPU holds (complex types aside).
enum class Types { kFloat, kNoBfloat16, kSingleDouble };

struct OpSpec {
  const char* op;
  Types types;
  std::vector<VarArg> vars;         // the variable, then its slots
  std::vector<ScalarArg> scalars;   // in the order the update reads them
  const char* grad = "grad";
  bool check_inner_dim = false;     // sparse: TF refuses rows of no elements
  bool slice_index_message = false; // sparse: "indices[i] = x is not in [0, n)"
};

constexpr int kMaxScalars = 6;

const ScalarArg kLr{"lr", "lr"};
const ScalarArg kLrSpaced{"lr", "lr", Bound::kAny, " : "};
const ScalarArg kLrPositive{"lr", "lr", Bound::kPositive};
const ScalarArg kL1{"l1", "l1 regularization strength"};
const ScalarArg kL2{"l2", "l2 regularization strength"};
const ScalarArg kL1NonNegative{"l1", "l1 regularization strength", Bound::kNonNegative};
const ScalarArg kL2NonNegative{"l2", "l2 regularization strength", Bound::kNonNegative};
const ScalarArg kRho{"rho", "rho"};
const ScalarArg kMomentum{"momentum", "momentum"};
const ScalarArg kEpsilon{"epsilon", "epsilon"};
const ScalarArg kGlobalStep{"global_step", "global_step"};
const std::vector<ScalarArg> kAdamScalars{{"beta1_power", "beta1_power"},
                                          {"beta2_power", "beta2_power"},
                                          kLrSpaced,
                                          {"beta1", "beta1"},
                                          {"beta2", "beta2"},
                                          kEpsilon};
const std::vector<VarArg> kDaVars{
    {"var"}, {"gradient_accumulator", "accum"}, {"gradient_squared_accumulator", "accum"}};
const std::vector<VarArg> kFtrlVars{{"var"}, {"accum"}, {"linear"}};

const std::vector<OpSpec>& Specs() {
  static const auto* specs = new std::vector<OpSpec>{
      {"ResourceApplyGradientDescent", Types::kFloat, {{"var"}}, {{"alpha", "alpha"}}, "delta"},
      {"ResourceApplyProximalGradientDescent", Types::kSingleDouble, {{"var"}},
       {{"alpha", "alpha"}, kL1, kL2}, "delta"},
      {"ResourceApplyMomentum", Types::kFloat, {{"var"}, {"accum"}}, {kLr, kMomentum}},
      {"ResourceApplyKerasMomentum", Types::kFloat, {{"var"}, {"accum"}}, {kLr, kMomentum}},
      {"ResourceApplyAdam", Types::kFloat, {{"var"}, {"m"}, {"v"}}, kAdamScalars},
      {"ResourceApplyAdamWithAmsgrad", Types::kFloat, {{"var"}, {"m"}, {"v"}, {"vhat"}},
       kAdamScalars},
      {"ResourceApplyAdaMax", Types::kNoBfloat16, {{"var"}, {"m"}, {"v"}},
       {{"beta1_power", "beta1_power"}, kLrSpaced, {"beta1", "beta1"}, {"beta2", "beta2"},
        kEpsilon}},
      {"ResourceApplyAdagrad", Types::kFloat, {{"var"}, {"accum"}}, {kLr}},
      {"ResourceApplyAdagradV2", Types::kFloat, {{"var"}, {"accum"}}, {kLr, kEpsilon}},
      {"ResourceApplyAdagradDA", Types::kSingleDouble, kDaVars, {kLr, kL1, kL2, kGlobalStep}},
      {"ResourceApplyProximalAdagrad", Types::kSingleDouble, {{"var"}, {"accum"}},
       {kLrPositive, kL1NonNegative, kL2NonNegative}},
      {"ResourceApplyAdadelta", Types::kFloat, {{"var"}, {"accum"}, {"accum_update"}},
       {kLr, kRho, kEpsilon}},
      {"ResourceApplyRMSProp", Types::kFloat, {{"var"}, {"ms"}, {"mom"}},
       {kLrSpaced, kRho, kMomentum, kEpsilon}},
      {"ResourceApplyCenteredRMSProp", Types::kFloat, {{"var"}, {"mg"}, {"ms"}, {"mom"}},
       {kLrSpaced, kRho, kMomentum, kEpsilon}},
      {"ResourceApplyFtrl", Types::kFloat, kFtrlVars,
       {kLr, kL1, kL2, {"lr_power", "lr_power", Bound::kAny, ""}}},
      {"ResourceApplyFtrlV2", Types::kFloat, kFtrlVars,
       {kLr, kL1, kL2, {"l2_shrinkage", "l2 shrinkage regularization strength"},
        {"lr_power", "lr_power", Bound::kAny, ""}}},
      {"ResourceApplyAddSign", Types::kFloat, {{"var"}, {"m"}},
       {kLr, {"alpha", "alpha"}, {"sign_decay", "sign_decay"}, {"beta", "beta"}}},
      {"ResourceApplyPowerSign", Types::kFloat, {{"var"}, {"m"}},
       {kLr, {"logbase", "logbase"}, {"sign_decay", "sign_decay"}, {"beta", "beta"}}},
      // IndexedSlices gradients.
      {"ResourceSparseApplyAdadelta", Types::kFloat,
       {{"var"}, {"accum", "accum_grad"}, {"accum_update"}}, {kLr, kRho, kEpsilon}},
      {"ResourceSparseApplyAdagrad", Types::kFloat, {{"var"}, {"accum"}}, {kLr}, "grad", true},
      {"ResourceSparseApplyAdagradV2", Types::kFloat, {{"var"}, {"accum"}}, {kLr, kEpsilon},
       "grad", true},
      {"ResourceSparseApplyAdagradDA", Types::kSingleDouble, kDaVars,
       {kLr, kL1, kL2, kGlobalStep}, "grad", true},
      {"ResourceSparseApplyCenteredRMSProp", Types::kNoBfloat16,
       {{"var"}, {"mg"}, {"ms"}, {"mom"}}, {kLr, kRho, kMomentum, kEpsilon}},
      {"ResourceSparseApplyFtrl", Types::kFloat, kFtrlVars,
       {kLrPositive, kL1NonNegative, kL2NonNegative,
        {"lr_power", "lr_power", Bound::kNonPositive}},
       "grad", true},
      {"ResourceSparseApplyFtrlV2", Types::kFloat, kFtrlVars,
       {kLrPositive, kL1NonNegative, kL2NonNegative,
        {"l2_shrinkage", "l2 shrinkage regularization strength", Bound::kNonNegative},
        {"lr_power", "lr_power", Bound::kNonPositive}},
       "grad", true},
      {"ResourceSparseApplyMomentum", Types::kFloat, {{"var"}, {"accum"}},
       {kLrSpaced, kMomentum}},
      {"ResourceSparseApplyKerasMomentum", Types::kFloat, {{"var"}, {"accum"}},
       {kLrSpaced, kMomentum}, "grad", false, true},
      {"ResourceSparseApplyProximalAdagrad", Types::kSingleDouble, {{"var"}, {"accum"}},
       {kLrPositive, kL1NonNegative, kL2NonNegative}, "grad", true},
      {"ResourceSparseApplyProximalGradientDescent", Types::kSingleDouble, {{"var"}},
       {{"alpha", "lr"}, kL1, kL2}, "grad", true},
      {"ResourceSparseApplyRMSProp", Types::kNoBfloat16, {{"var"}, {"ms"}, {"mom"}},
       {kLr, kRho, kMomentum, kEpsilon}},
  };
  return *specs;
}

const OpSpec* FindSpec(const std::string& op) {
  for (const OpSpec& spec : Specs()) {
    if (op == spec.op) return &spec;
  }
  return nullptr;
}

const char* BoundWords(Bound bound) {
  switch (bound) {
    case Bound::kPositive: return "positive ";
    case Bound::kNonNegative: return "non-negative ";
    case Bound::kNonPositive: return "non-positive ";
    default: return "";
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel: one for every op, dtype and index type.

template <typename T, typename Index, template <typename> class Update, bool kSparse>
class TrainingOp : public OpKernel {
  using C = typename ComputeType<T>::type;
  static constexpr int kVars = Update<C>::kVars;

 public:
  explicit TrainingOp(OpKernelConstruction* c) : OpKernel(c), spec_(FindSpec(c->def().op())) {
    OP_REQUIRES(c, spec_ != nullptr && static_cast<int>(spec_->vars.size()) == kVars &&
                       spec_->scalars.size() <= kMaxScalars,
                absl::InternalError(absl::StrCat("no NPU training kernel for ", c->def().op())));
    for (auto [name, value] : {std::pair{"use_nesterov", &attrs_.use_nesterov},
                               std::pair{"update_slots", &attrs_.update_slots},
                               std::pair{"multiply_linear_by_lr", &attrs_.multiply_linear_by_lr}}) {
      if (c->HasAttr(name)) OP_REQUIRES_OK(c, c->GetAttr(name, value));
    }
    for (const VarArg& v : spec_->vars) vars_.push_back(InputIndex(c, v.input));
    for (const ScalarArg& s : spec_->scalars) scalars_.push_back(InputIndex(c, s.input));
    grad_ = InputIndex(c, spec_->grad);
    if (kSparse) indices_ = InputIndex(c, "indices");
  }

  void Compute(OpKernelContext* ctx) override TF_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<tensorflow::core::RefCountPtr<Var>> vars(kVars);
    for (int i = 0; i < kVars; ++i) {
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, vars_[i]), &vars[i]));
      if (kSparse) OP_REQUIRES_OK(ctx, EnsureSparseVariableAccess(ctx, vars[i].get(), vars_[i]));
    }
    // Always exclusive (TF takes a shared lock for sparse updates without use_locking): a
    // buffer a reader still shares is replaced by a copy before it is written, which needs the
    // exclusive lock; the results are the same.
    const std::vector<tsl::mutex_lock> locks = LockVariablesInOrder(vars);

    // The scalars and indices are read on the host below.
    OP_REQUIRES_OK(ctx, SyncComputeStream(ctx));
    OP_REQUIRES_OK(ctx, CheckVariables(ctx, vars));
    C s[kMaxScalars];
    OP_REQUIRES_OK(ctx, ReadScalars(ctx, s));
    const Tensor& var = *vars[0]->tensor();
    const Tensor& grad = ctx->input(grad_);
    if (kSparse) {
      OP_REQUIRES_OK(ctx, CheckSparseGrad(ctx, var, grad));
    } else {
      OP_REQUIRES(ctx, var.shape().IsSameSize(grad.shape()),
                  absl::InvalidArgumentError(absl::StrCat(
                      "var and ", spec_->grad, " do not have the same shape",
                      var.shape().DebugString(), " ", grad.shape().DebugString())));
    }

    for (int i = 0; i < kVars; ++i) {
      OP_REQUIRES_OK(ctx, PrepareToUpdateVariable(ctx, vars[i].get(), vars_[i]));
    }
    // A real NPU would launch the update on the stream from here on.
    T* data[kVars];
    for (int i = 0; i < kVars; ++i) data[i] = vars[i]->tensor()->template flat<T>().data();
    const T* g = grad.flat<T>().data();
    const Update<C> update(s, attrs_);
    if (kSparse) {
      ApplyRows(update, data, g, ctx->input(indices_), *vars[0]->tensor());
    } else {
      const Eigen::TensorOpCost cost(sizeof(T) * (kVars + 1), sizeof(T) * kVars, 10 * kVars);
      ctx->eigen_device<CPUDevice>().parallelFor(
          vars[0]->tensor()->NumElements(), cost, [&](Eigen::Index begin, Eigen::Index end) {
            for (Eigen::Index i = begin; i < end; ++i) Step(update, data, i, g[i]);
          });
    }
  }

 private:
  int InputIndex(OpKernelConstruction* c, const char* name) {
    int start = 0, stop = 0;
    const absl::Status s = InputRange(name, &start, &stop);
    if (!s.ok()) c->CtxFailure(__FILE__, __LINE__, s);
    return start;
  }

  static void Step(const Update<C>& update, T* const* data, int64_t at, T g) {
    C x[kVars];
    for (int i = 0; i < kVars; ++i) x[i] = static_cast<C>(data[i][at]);
    update(x, static_cast<C>(g));
    for (int i = 0; i < kVars; ++i) data[i][at] = static_cast<T>(x[i]);
  }

  // The rows of the variable and its slots at `indices`, in order (so a repeated index is
  // updated again from the row the previous update left).
  static void ApplyRows(const Update<C>& update, T* const* data, const T* g,
                        const Tensor& indices, const Tensor& var) {
    int64_t inner = 1;
    for (int d = 1; d < var.dims(); ++d) inner *= var.dim_size(d);
    const auto rows = indices.vec<Index>();
    for (int64_t j = 0; j < rows.size(); ++j) {
      const int64_t base = static_cast<int64_t>(rows(j)) * inner;
      for (int64_t e = 0; e < inner; ++e) Step(update, data, base + e, g[j * inner + e]);
    }
  }

  absl::Status CheckVariables(OpKernelContext* ctx,
                              const std::vector<tensorflow::core::RefCountPtr<Var>>& vars) {
    for (int i = 0; i < kVars; ++i) {
      const Tensor& t = *vars[i]->tensor();
      if (!vars[i]->is_initialized || !t.IsInitialized()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Attempting to use uninitialized variables: ", requested_input(vars_[i])));
      }
      TF_RETURN_IF_ERROR(CheckVariableDtype(t, DataTypeToEnum<T>::v()));
    }
    const Tensor& var = *vars[0]->tensor();
    for (int i = 1; i < kVars; ++i) {
      const Tensor& slot = *vars[i]->tensor();
      const VarArg& arg = spec_->vars[i];
      if (!var.shape().IsSameSize(slot.shape())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "var and ", arg.what ? arg.what : arg.input, " do not have the same shape",
            var.shape().DebugString(), " ", slot.shape().DebugString()));
      }
    }
    if (kSparse && !TensorShapeUtils::IsVectorOrHigher(var.shape())) {
      return absl::InvalidArgumentError("var must be at least 1 dimensional");
    }
    return absl::OkStatus();
  }

  absl::Status ReadScalars(OpKernelContext* ctx, C* s) {
    for (size_t i = 0; i < scalars_.size(); ++i) {
      const ScalarArg& arg = spec_->scalars[i];
      const Tensor& t = ctx->input(scalars_[i]);
      bool ok = TensorShapeUtils::IsScalar(t.shape());
      if (ok) {
        s[i] = t.dtype() == tensorflow::DT_INT64 ? static_cast<C>(t.scalar<int64_t>()())
                                                 : static_cast<C>(t.scalar<T>()());
        ok = arg.bound == Bound::kAny || (arg.bound == Bound::kPositive && s[i] > C(0)) ||
             (arg.bound == Bound::kNonNegative && s[i] >= C(0)) ||
             (arg.bound == Bound::kNonPositive && s[i] <= C(0));
      }
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(arg.what, " is not a ",
                                                       BoundWords(arg.bound), "scalar", arg.tail,
                                                       t.shape().DebugString()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckSparseGrad(OpKernelContext* ctx, const Tensor& var, const Tensor& grad) {
    const Tensor& indices = ctx->input(indices_);
    if (!TensorShapeUtils::IsVector(indices.shape())) {
      return absl::InvalidArgumentError("indices must be one-dimensional");
    }
    // TF's kernel reads grad's dimensions as if it had var's rank (its shape function checks
    // that in graphs only).
    if (grad.dims() != var.dims()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "var and grad must have the same rank, got var.shape ", var.shape().DebugString(),
          " and grad.shape ", grad.shape().DebugString()));
    }
    int64_t inner = 1;
    for (int d = 1; d < var.dims(); ++d) {
      if (var.dim_size(d) != grad.dim_size(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("var and grad must match in dimension ", d));
      }
      inner *= grad.dim_size(d);
    }
    const int64_t n = indices.dim_size(0);
    if (grad.dim_size(0) != n) {
      return absl::InvalidArgumentError(
          "grad must be the same size as indices in the first dimension.");
    }
    if (spec_->check_inner_dim && inner <= 0) {
      return absl::InvalidArgumentError("Inner dimension should be greater than zero.");
    }
    const auto rows = indices.vec<Index>();
    const int64_t limit = var.dim_size(0);
    for (int64_t i = 0; i < n; ++i) {
      const Index row = rows(i);
      if (row >= 0 && static_cast<int64_t>(row) < limit) continue;
      if (spec_->slice_index_message) {
        return absl::InvalidArgumentError(absl::StrCat(
            "indices", tensorflow::SliceDebugString(indices.shape(), i), " = ", row,
            " is not in [0, ", limit, ")"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("Index ", row, " at offset ", i, " in indices is out of range"));
    }
    return absl::OkStatus();
  }

  const OpSpec* spec_;
  Attrs attrs_;
  std::vector<int> vars_, scalars_;
  int grad_ = 0, indices_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Registration.

template <template <typename> class Update, bool kSparse, typename T, typename Index>
void RegisterKernel(const OpSpec& spec) {
  tensorflow::KernelDefBuilder builder(spec.op);
  builder.Device(kNpuDeviceType);
  // Resource handles live in host memory; values, scalars and indices in device memory, like
  // TF's GPU registrations.
  for (const VarArg& v : spec.vars) builder.HostMemory(v.input);
  builder.TypeConstraint<T>("T");
  if (kSparse) builder.TypeConstraint<Index>("Tindices");
  tensorflow::kernel_factory::OpKernelRegistrar(
      builder.Build(), "NpuTrainingOp", [](OpKernelConstruction* c) -> OpKernel* {
        return new TrainingOp<T, Index, Update, kSparse>(c);
      });
}

template <template <typename> class Update, bool kSparse, typename T>
void RegisterType(const OpSpec& spec) {
  RegisterKernel<Update, kSparse, T, tensorflow::int32>(spec);
  if (kSparse) RegisterKernel<Update, kSparse, T, tensorflow::int64>(spec);
}

template <template <typename> class Update, bool kSparse = false>
void Register(const char* op) {
  const OpSpec& spec = *FindSpec(op);
  RegisterType<Update, kSparse, float>(spec);
  RegisterType<Update, kSparse, double>(spec);
  if (spec.types != Types::kSingleDouble) RegisterType<Update, kSparse, Eigen::half>(spec);
  if (spec.types == Types::kFloat) RegisterType<Update, kSparse, Eigen::bfloat16>(spec);
}

}  // namespace

absl::Status RegisterTrainingKernels(int* registered) {
  *registered = 0;
  std::vector<const char*> ops;
  for (const OpSpec& spec : Specs()) ops.push_back(spec.op);
  absl::Status status = CheckNoNpuKernels(ops);
  if (!status.ok()) return status;
  Register<GradientDescent>("ResourceApplyGradientDescent");
  Register<ProximalGradientDescent>("ResourceApplyProximalGradientDescent");
  Register<Momentum>("ResourceApplyMomentum");
  Register<KerasMomentum>("ResourceApplyKerasMomentum");
  Register<Adam>("ResourceApplyAdam");
  Register<AdamWithAmsgrad>("ResourceApplyAdamWithAmsgrad");
  Register<AdaMax>("ResourceApplyAdaMax");
  Register<Adagrad>("ResourceApplyAdagrad");
  Register<AdagradV2>("ResourceApplyAdagradV2");
  Register<AdagradDA>("ResourceApplyAdagradDA");
  Register<ProximalAdagrad>("ResourceApplyProximalAdagrad");
  Register<Adadelta>("ResourceApplyAdadelta");
  Register<RMSProp>("ResourceApplyRMSProp");
  Register<CenteredRMSProp>("ResourceApplyCenteredRMSProp");
  Register<Ftrl>("ResourceApplyFtrl");
  Register<FtrlV2>("ResourceApplyFtrlV2");
  Register<AddSign>("ResourceApplyAddSign");
  Register<PowerSign>("ResourceApplyPowerSign");
  Register<Adadelta, true>("ResourceSparseApplyAdadelta");
  Register<Adagrad, true>("ResourceSparseApplyAdagrad");
  Register<AdagradV2, true>("ResourceSparseApplyAdagradV2");
  Register<AdagradDA, true>("ResourceSparseApplyAdagradDA");
  Register<CenteredRMSProp, true>("ResourceSparseApplyCenteredRMSProp");
  Register<Ftrl, true>("ResourceSparseApplyFtrl");
  Register<FtrlV2, true>("ResourceSparseApplyFtrlV2");
  Register<Momentum, true>("ResourceSparseApplyMomentum");
  Register<KerasMomentum, true>("ResourceSparseApplyKerasMomentum");
  Register<ProximalAdagrad, true>("ResourceSparseApplyProximalAdagrad");
  Register<ProximalGradientDescent, true>("ResourceSparseApplyProximalGradientDescent");
  Register<RMSProp, true>("ResourceSparseApplyRMSProp");
  *registered = static_cast<int>(ops.size());
  return absl::OkStatus();
}

}  // namespace npu_tf
