// NPU storage formats (docs/layouts.md): NC1HWC0 activations, FRACTAL_Z and FILTER_KN filters,
// and the registry through which kernels opt in to reading and writing them.
//
// A value keeps its logical (TF) dims; its format says how the elements are stored.
//   NC1HWC0:   logical NHWC (rank < 4 right-aligned), storage [N, C1, H, W, C0]
//   FRACTAL_Z: logical HWIO [KH, KW, Cin, Cout], storage [C1*KH*KW, N1, N0=16, C0]
//   FILTER_KN: logical HWIO, storage [KH*KW*Cin, N1*N0]: row (c1, kh, kw, c0) over the real
//              input channels of each C0 block (FilterKnRow), column the output channel
// C0 is 16 for 2- and 4-byte types, 32 for 1-byte types. Padding lanes hold unspecified
// values; kernels never let them reach a real output.
#ifndef NPU_KERNELS_FORMAT_H_
#define NPU_KERNELS_FORMAT_H_

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {

enum Format : int {
  kND = 0, kNCHW = 1, kNHWC = 2, kNC1HWC0 = 3, kFractalZ = 4, kFractalNZ = 5, kFilterKN = 6,
  kLastFormat = kFilterKN
};
constexpr int64_t kN0 = 16;

inline bool IsPaddedFormat(int format) { return format >= kNC1HWC0; }
inline int64_t C0Of(int dtype) { return DTypeSize(dtype) == 1 ? 32 : 16; }
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
// FILTER_KN's row of HWIO element (kh, kw, ci, *), tap = kh * KW + kw of `taps`: blocks before
// ci's are full (C0 * taps rows).
inline int64_t FilterKnRow(int64_t tap, int64_t ci, int64_t taps, int64_t cin, int64_t c0) {
  const int64_t c1 = ci / c0, real = std::min(c0, cin - c1 * c0);
  return c1 * c0 * taps + tap * real + ci % c0;
}
std::string FormatName(int format);

// One float NC1HWC0 pixel's C0 = 16 lanes are two vectors of 8 (the AVX2 width; GCC/Clang
// vector types), so per-pixel lane arithmetic compiles to vector instructions whatever the
// auto-vectorizer decides (wider generic vectors got split into scalars).
constexpr int64_t kFloatC0 = 16;                 // C0 of every float storage type
constexpr int64_t kLanes = 8;                    // floats per Lanes vector
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
inline Lanes LoadLanes(const float* p) { Lanes v; std::memcpy(&v, p, sizeof v); return v; }
inline void StoreLanes(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }

// Copies n floats with fixed-size moves: im2col copies runs of a few channels (an RGB window
// row is 9 floats), where a call to memmove per run cost more than the copy.
inline void CopyFloats(float* dst, const float* src, int64_t n) {
  if (n >= kLanes) {
    for (int64_t i = 0; i + kLanes <= n; i += kLanes) StoreLanes(dst + i, LoadLanes(src + i));
    if (n % kLanes) StoreLanes(dst + n - kLanes, LoadLanes(src + n - kLanes));   // overlaps
    return;
  }
  if (n & 4) { std::memcpy(dst, src, 4 * sizeof(float)); dst += 4; src += 4; }
  if (n & 2) { std::memcpy(dst, src, 2 * sizeof(float)); dst += 2; src += 2; }
  if (n & 1) *dst = *src;
}

// The NC1HWC0 geometry of a value (its logical dims right-aligned to NHWC).
struct Nc1hwc0 {
  int64_t n = 1, h = 1, w = 1, c = 1, c1 = 1, c0 = 16;
  static Status Of(const TensorDesc& d, Nc1hwc0* out);
  int64_t pixels() const { return n * h * w; }
  int64_t size() const { return n * c1 * h * w * c0; }      // storage elements
  int64_t plane() const { return h * w * c0; }              // one (n, c1) block
  int64_t valid(int64_t block) const {                      // real channels in block c1
    return c - block * c0 < c0 ? c - block * c0 : c0;
  }
};

// Storage dims of a value in its format (the logical dims for ND/NCHW/NHWC).
Dims StorageDims(const TensorDesc& d);

// True when any input or output of the node is stored in a padded format.
bool HasPaddedFormat(const KernelDef& def);

// Registers the factory for nodes whose values use padded formats; nodes with only ND values
// keep going to the kernel registered with RegisterKernel under the same name.
void RegisterFormatKernel(const std::string& name, KernelFactory factory);
const KernelFactory* FindNdKernel(const std::string& name);   // nullptr when none

#define NPU_REGISTER_FORMAT_KERNEL(name, factory)                                    \
  static ::npu::kernels::StaticInit NPU_KERNEL_CONCAT(npu_format_kernel_, __COUNTER__)( \
      [] { ::npu::kernels::RegisterFormatKernel(name, factory); })

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_FORMAT_H_
