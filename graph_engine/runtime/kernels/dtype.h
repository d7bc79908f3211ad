// Element types of NPU values (TF DataType enum values) and conversions between their
// storage and the types kernels compute in: float for float32/float16/bfloat16, double for
// float64, int64 for integers and bool (uint64 wraps into int64 and back bit for bit), and
// std::complex<float> for complex64. Keeping to these compute types keeps the number of
// template instantiations (and the build time) small.
#ifndef NPU_KERNELS_DTYPE_H_
#define NPU_KERNELS_DTYPE_H_

#include <complex>
#include <cstdint>
#include <string>

namespace npu {
namespace kernels {

enum DType : int {
  kFloat = 1, kDouble = 2, kInt32 = 3, kUInt8 = 4, kInt16 = 5, kInt8 = 6,
  kInt64 = 9, kBool = 10, kBFloat16 = 14, kHalf = 19,
  kUInt64 = 23,   // the key/counter of TF's stateless random ops
  kComplex64 = 8, // std::complex<float> (FFTs, complex math), computed as itself
};

bool IsSupportedDType(int dtype);
int DTypeSize(int dtype);               // bytes per element; 0 for an unsupported dtype
std::string DTypeName(int dtype);       // "float32", ..., or "DataType(N)"
std::string SupportedDTypeNames();      // for messages
bool IsFloating(int dtype);             // float32, float16, bfloat16, float64
bool IsInteger(int dtype);              // signed and unsigned integers, not bool

// The type a kernel computes in for elements stored as `dtype` (kComplex: std::complex<float>,
// for complex64 only; kernels of ops that do not allow complex64 never see it).
enum class ComputeType { kFloat, kDouble, kInt64, kComplex };
ComputeType ComputeTypeOf(int dtype);

// Converts n stored elements to T (float, double, int64_t or std::complex<float>) and back.
// Stores follow TF's Cast: float to integer truncates toward zero (NaN and out-of-range values
// become INT64_MIN for 64-bit integers, INT32_MIN narrowed to the type for narrower ones, as TF
// on x86), to bool is != 0, integer narrowing wraps, float16/bfloat16 round to nearest even;
// real values become the real parts of complex ones, complex ones keep their real part.
template <class T> void Load(int dtype, const void* src, int64_t n, T* dst);
template <class T> void Store(int dtype, const T* src, int64_t n, void* dst);
template <> void Load(int dtype, const void* src, int64_t n, std::complex<float>* dst);
template <> void Store(int dtype, const std::complex<float>* src, int64_t n, void* dst);

// True when elements stored as `dtype` already are T (Load would be a copy).
template <class T> bool IsNative(int dtype);

// Scalar conversions (F16C for float16).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// The lowest finite value of a floating `dtype` (float16: -65504), as float.
float LowestOf(int dtype);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_DTYPE_H_
