// Single-precision matrix product on the thread pool, in the widest instruction set the CPU has
// (AVX-512 or the build's AVX2+FMA baseline): Eigen's GEMM on ranges of rows or columns of C,
// or, for plain products of up to 512 columns (whole vectors of them), the direct convolution's
// strips (conv_direct.h), for A^T * B with few rows or columns the same unit's filter-gradient
// chunks, and for A * B^T with few rows of A, dot products along K (gemm_dot_impl.h): none of
// them packs A, and only the strips copy B, a channel group's panel at a time. A B that holds
// over many products (a constant weight) can be packed once instead (PackB, GemmPackedB:
// gemm_packed_impl.h's register tiles, 28 accumulators with AVX-512).
#ifndef NPU_KERNELS_GEMM_H_
#define NPU_KERNELS_GEMM_H_

#include <cstdint>

namespace npu {
namespace kernels {

// C[M,N] = op(A) * op(B), or C += op(A) * op(B) when `accumulate`. All matrices are dense
// row-major: A is [M,K] ([K,M] when trans_a), B is [K,N] ([N,K] when trans_b), C is [M,N].
void Gemm(int64_t m, int64_t n, int64_t k, const float* a, bool trans_a, const float* b,
          bool trans_b, float* c, bool accumulate = false);

// A B used for many products (a model constant: a weight) packed once for GemmPackedB:
// PackedBFloats(k, n) floats that PackB fills from op(B) [k,n] (B's storage [n,k] when trans_b).
int64_t PackedBFloats(int64_t k, int64_t n);
void PackB(int64_t k, int64_t n, const float* b, bool trans_b, float* packed);

// C[M,N] = A * op(B), A [M,K] row-major, B as PackB packed it: what remains of a product once B
// is in the kernel's panels, faster than Gemm where PrefersPackedB.
void GemmPackedB(int64_t m, int64_t n, int64_t k, const float* a, const float* packed_b, float* c);
bool PrefersPackedB(int64_t m, int64_t n, int64_t k);

// ParallelFor's cost (scalar operations) of a product's `flops`: its vectorized multiply-adds
// cost a fraction of a scalar operation each, so a quarter. Products under ~256k flops (2-3 us
// on one core: a recurrent cell's 16x96x32) then stay on the calling thread, where handing
// half to a pool thread cost more than it saved (gemm_bench 16x96x32 2.0 -> 1.3 us; GRU
// training, whose loop runs beside TF's threads, 2.5-2.8 -> 2.2-2.4 ms a step).
inline int64_t ProductCost(int64_t flops) { return flops / 4; }

// The instruction set Gemm runs: "avx512" or "avx2" (the build's baseline; forced by
// NPU_KERNEL_ISA=avx2).
const char* GemmIsa();

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_GEMM_H_
