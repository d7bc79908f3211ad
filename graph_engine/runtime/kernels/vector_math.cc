#include "kernels/vector_math.h"

#include <Eigen/Core>

namespace npu {
namespace kernels {

template <class T>
void VecMath(VecFn fn, const T* x, T* y, int64_t n) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Array> in(x, n);
  Eigen::Map<Array> out(y, n);
  switch (fn) {
    case VecFn::kExp: out = in.exp(); break;
    case VecFn::kLog: out = in.log(); break;
    case VecFn::kLog1p: out = in.log1p(); break;
    case VecFn::kExpm1: out = in.expm1(); break;
    case VecFn::kTanh: out = in.tanh(); break;
    case VecFn::kSigmoid: out = in.logistic(); break;
    case VecFn::kSqrt: out = in.sqrt(); break;
    case VecFn::kRsqrt: out = in.rsqrt(); break;
  }
}

float VecSum(const float* x, int64_t n) { return Eigen::Map<const Eigen::ArrayXf>(x, n).sum(); }
float VecMax(const float* x, int64_t n) { return Eigen::Map<const Eigen::ArrayXf>(x, n).maxCoeff(); }

template void VecMath<float>(VecFn, const float*, float*, int64_t);
template void VecMath<double>(VecFn, const double*, double*, int64_t);

}  // namespace kernels
}  // namespace npu
