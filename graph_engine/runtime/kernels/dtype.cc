#include "kernels/dtype.h"
#include "kernels/float_status.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>

namespace npu {
namespace kernels {
namespace {

struct DTypeInfo {
  int dtype;
  int size;
  const char* name;
};
constexpr DTypeInfo kDTypes[] = {
    {kFloat, 4, "float32"}, {kDouble, 8, "float64"}, {kInt32, 4, "int32"},
    {kUInt8, 1, "uint8"},   {kInt16, 2, "int16"},    {kInt8, 1, "int8"},
    {kInt64, 8, "int64"},   {kBool, 1, "bool"},      {kBFloat16, 2, "bfloat16"},
    {kHalf, 2, "float16"},  {kUInt64, 8, "uint64"},   {kComplex64, 8, "complex64"},
};

const DTypeInfo* Find(int dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return &d;
  return nullptr;
}

// Float to integer as TF's CPU Cast computes it on x86-64 (measured on TF 2.21; cvttss2si /
// cvttsd2si): truncation toward zero; NaN, +-inf and values out of range become the
// "integer indefinite" value, INT64_MIN for 64-bit results and INT32_MIN for narrower ones,
// which go through int32 and are then narrowed by keeping the low bits (float32 -> int8 of
// 300.0 is 44, of NaN 0; -> uint8 of -2.7 is 254).
template <class F>
int64_t TruncToInt64(F x) {
  // [-2^63, 2^63): the comparison is false for NaN.
  if (x >= F(-9223372036854775808.0) && x < F(9223372036854775808.0)) return static_cast<int64_t>(x);
  return std::numeric_limits<int64_t>::min();
}
template <class F>
int32_t TruncToInt32(F x) {
  // Truncates into [-2^31, 2^31): x in (-2^31 - 1, 2^31).
  if (x > F(-2147483649.0) && x < F(2147483648.0)) return static_cast<int32_t>(x);
  return std::numeric_limits<int32_t>::min();
}

template <class D, class S>
inline D Convert(S x) {
  if constexpr (std::is_same_v<D, bool>) {
    return x != S(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    if constexpr (std::is_same_v<D, uint64_t>) {   // [2^63, 2^64) is in range only here
      if (x >= S(9223372036854775808.0) && x < S(18446744073709551616.0))
        return static_cast<D>(x);
    }
    if constexpr (sizeof(D) == 8) return static_cast<D>(TruncToInt64(x));
    else return static_cast<D>(TruncToInt32(x));
  } else {
    return static_cast<D>(x);
  }
}

template <class S, class D>
void ConvertLoop(const void* src, int64_t n, D* dst) {
  if constexpr (std::is_same_v<S, D>) {
    std::memcpy(dst, src, n * sizeof(D));
    return;
  }
  const S* s = static_cast<const S*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Convert<D>(s[i]);
}

template <class S, class D>
void StoreLoop(const S* src, int64_t n, void* dst) {
  if constexpr (std::is_same_v<S, D>) {
    std::memcpy(dst, src, n * sizeof(D));
    return;
  }
  D* d = static_cast<D*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = Convert<D>(src[i]);
}

void HalfToFloatN(const uint16_t* s, int64_t n, float* d) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = HalfToFloat(s[i]);
}

void FloatToHalfN(const float* s, int64_t n, uint16_t* d) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = FloatToHalf(s[i]);
}

}  // namespace

float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
uint16_t FloatToHalf(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

float BFloat16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float LowestOf(int dtype) {
  if (dtype == kHalf) return -65504.0f;
  if (dtype == kBFloat16) return BFloat16ToFloat(0xFF7F);
  return std::numeric_limits<float>::lowest();
}

uint16_t FloatToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

bool IsSupportedDType(int dtype) { return Find(dtype) != nullptr; }
int DTypeSize(int dtype) { const DTypeInfo* d = Find(dtype); return d ? d->size : 0; }

std::string DTypeName(int dtype) {
  const DTypeInfo* d = Find(dtype);
  return d ? d->name : "DataType(" + std::to_string(dtype) + ")";
}

std::string SupportedDTypeNames() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

bool IsFloating(int dtype) {
  return dtype == kFloat || dtype == kHalf || dtype == kBFloat16 || dtype == kDouble;
}
bool IsInteger(int dtype) {
  return dtype == kInt32 || dtype == kInt64 || dtype == kInt16 || dtype == kInt8 ||
         dtype == kUInt8 || dtype == kUInt64;
}

ComputeType ComputeTypeOf(int dtype) {
  if (dtype == kDouble) return ComputeType::kDouble;
  if (dtype == kComplex64) return ComputeType::kComplex;
  if (dtype == kFloat || dtype == kHalf || dtype == kBFloat16) return ComputeType::kFloat;
  return ComputeType::kInt64;
}

template <class T>
bool IsNative(int dtype) {
  if constexpr (std::is_same_v<T, float>) return dtype == kFloat;
  if constexpr (std::is_same_v<T, double>) return dtype == kDouble;
  if constexpr (std::is_same_v<T, int64_t>) return dtype == kInt64;
  if constexpr (std::is_same_v<T, std::complex<float>>) return dtype == kComplex64;
  return false;
}

template <class T>
void Load(int dtype, const void* src, int64_t n, T* dst) {
  switch (dtype) {
    case kFloat: return ConvertLoop<float>(src, n, dst);
    case kDouble: return ConvertLoop<double>(src, n, dst);
    case kInt32: return ConvertLoop<int32_t>(src, n, dst);
    case kInt64: return ConvertLoop<int64_t>(src, n, dst);
    case kInt16: return ConvertLoop<int16_t>(src, n, dst);
    case kInt8: return ConvertLoop<int8_t>(src, n, dst);
    case kUInt8: return ConvertLoop<uint8_t>(src, n, dst);
    case kUInt64: return ConvertLoop<uint64_t>(src, n, dst);
    case kBool: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = T(s[i] != 0);
      return;
    }
    case kHalf: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      if constexpr (std::is_same_v<T, float>) return HalfToFloatN(s, n, dst);
      for (int64_t i = 0; i < n; ++i) dst[i] = Convert<T>(HalfToFloat(s[i]));
      return;
    }
    case kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Convert<T>(BFloat16ToFloat(s[i]));
      return;
    }
  }
}

template <class T>
void Store(int dtype, const T* src, int64_t n, void* dst) {
  switch (dtype) {
    case kFloat: return StoreLoop<T, float>(src, n, dst);
    case kDouble: return StoreLoop<T, double>(src, n, dst);
    case kInt32: return StoreLoop<T, int32_t>(src, n, dst);
    case kInt64: return StoreLoop<T, int64_t>(src, n, dst);
    case kInt16: return StoreLoop<T, int16_t>(src, n, dst);
    case kInt8: return StoreLoop<T, int8_t>(src, n, dst);
    case kUInt8: return StoreLoop<T, uint8_t>(src, n, dst);
    case kUInt64: return StoreLoop<T, uint64_t>(src, n, dst);
    case kBool: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] != T(0);
      return;
    }
    case kHalf: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      if constexpr (std::is_same_v<T, float>) FloatToHalfN(src, n, d);
      else for (int64_t i = 0; i < n; ++i) d[i] = FloatToHalf(static_cast<float>(src[i]));
      CheckHalfStore(d, n);  // float status flag + saturation (float_status.h)
      return;
    }
    case kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToBFloat16(static_cast<float>(src[i]));
      return;
    }
  }
}

// complex64 is stored as std::complex<float>; real dtypes go through float.
template <>
void Load<std::complex<float>>(int dtype, const void* src, int64_t n, std::complex<float>* dst) {
  if (dtype == kComplex64) {
    std::memcpy(dst, src, n * sizeof(std::complex<float>));
    return;
  }
  float buf[256];
  const int size = DTypeSize(dtype);
  for (int64_t s = 0; s < n; s += 256) {
    const int64_t m = std::min<int64_t>(256, n - s);
    Load<float>(dtype, static_cast<const char*>(src) + s * size, m, buf);
    for (int64_t i = 0; i < m; ++i) dst[s + i] = std::complex<float>(buf[i], 0.f);
  }
}

template <>
void Store<std::complex<float>>(int dtype, const std::complex<float>* src, int64_t n, void* dst) {
  if (dtype == kComplex64) {
    std::memcpy(dst, src, n * sizeof(std::complex<float>));
    return;
  }
  if (dtype == kBool) {
    uint8_t* d = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = src[i] != std::complex<float>(0.f, 0.f);
    return;
  }
  float buf[256];
  const int size = DTypeSize(dtype);
  for (int64_t s = 0; s < n; s += 256) {
    const int64_t m = std::min<int64_t>(256, n - s);
    for (int64_t i = 0; i < m; ++i) buf[i] = src[s + i].real();
    Store<float>(dtype, buf, m, static_cast<char*>(dst) + s * size);
  }
}

#define NPU_INSTANTIATE(T)                                                 \
  template bool IsNative<T>(int);                                          \
  template void Load<T>(int, const void*, int64_t, T*);                    \
  template void Store<T>(int, const T*, int64_t, void*);
NPU_INSTANTIATE(float)
NPU_INSTANTIATE(double)
NPU_INSTANTIATE(int64_t)
#undef NPU_INSTANTIATE
template bool IsNative<std::complex<float>>(int);

}  // namespace kernels
}  // namespace npu
