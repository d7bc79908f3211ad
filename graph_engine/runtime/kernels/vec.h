// Vectors of 8 (AVX2) and 16 (AVX-512) floats as GCC vector types: the kernels written once for
// both widths (conv_direct_impl.h, gemm_dot_impl.h, gemm_packed_impl.h) are templates on these,
// and each unit that includes them is compiled for the instruction set its width needs.
#ifndef NPU_KERNELS_VEC_H_
#define NPU_KERNELS_VEC_H_

namespace npu {
namespace kernels {

typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));

// x in every lane. Internal linkage, like the kernels that use it: each instruction set's unit
// compiles its own.
namespace {
template <class Vec>
Vec Broadcast(float x) {
  Vec v;
  for (int i = 0; i < static_cast<int>(sizeof(Vec) / sizeof(float)); ++i) v[i] = x;
  return v;
}
}  // namespace

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_VEC_H_
