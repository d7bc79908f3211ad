// TF's stateless random ops, bit-exact with TF's CPU kernels (the reference and the algorithm
// are described in graph_engine/ops/random.py): Philox4x32-10, TF's seed scrambling, TF's
// uint32 -> float conversions, and Box-Muller in float with the same libm calls (logf, sqrtf,
// sincosf), so NPU dropout masks and initializer values equal the CPU's.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

using U32x4 = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

U32x4 Philox(U32x4 c, Key k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  return c;
}

// The 128-bit counter advanced by n (TF's PhiloxRandom::Skip).
U32x4 Advance(const U32x4& c, uint64_t n) {
  const uint64_t lo = (uint64_t{c[1]} << 32 | c[0]), hi = (uint64_t{c[3]} << 32 | c[2]);
  const uint64_t new_lo = lo + n, new_hi = hi + (new_lo < lo ? 1 : 0);
  return {static_cast<uint32_t>(new_lo), static_cast<uint32_t>(new_lo >> 32),
          static_cast<uint32_t>(new_hi), static_cast<uint32_t>(new_hi >> 32)};
}

// TF's StatelessRandomGetKeyCounter: the seed (sign-extended to 64 bits) through one Philox call.
void KeyCounterFromSeed(uint64_t s0, uint64_t s1, Key* key, U32x4* counter) {
  const U32x4 mix = Philox({static_cast<uint32_t>(s0), static_cast<uint32_t>(s0 >> 32),
                            static_cast<uint32_t>(s1), static_cast<uint32_t>(s1 >> 32)},
                           {0x3EC8F720u, 0x02461E29u});
  *key = {mix[0], mix[1]};
  *counter = {0, 0, mix[2], mix[3]};
}

float BitsToFloat(uint32_t x) {        // [0, 1) from 23 random mantissa bits
  const uint32_t v = (127u << 23) | (x & 0x7fffffu);
  float f;
  std::memcpy(&f, &v, 4);
  return f - 1.0f;
}

void BoxMuller(uint32_t x0, uint32_t x1, float* f0, float* f1) {
  float u1 = BitsToFloat(x0);
  if (u1 < 1.0e-7f) u1 = 1.0e-7f;      // keeps log finite, as TF does
  const float v1 = 2.0f * M_PI * BitsToFloat(x1);   // a double product rounded, as in TF
  const float u2 = std::sqrt(-2.0f * std::log(u1));
  sincosf(v1, f0, f1);
  *f0 *= u2;
  *f1 *= u2;
}

enum class Dist { kUniform, kNormal, kTruncatedNormal };

// Four values of output group g (TF's FillPhiloxRandomTask). Uniform keeps only the mantissa
// bits the output dtype holds, so the float value rounds exactly into float16/bfloat16.
void Group(Dist dist, int dtype, const Key& key, const U32x4& counter, int64_t g, float out[4]) {
  if (dist != Dist::kTruncatedNormal) {
    const U32x4 r = Philox(Advance(counter, static_cast<uint64_t>(g)), key);
    if (dist == Dist::kNormal) {
      BoxMuller(r[0], r[1], &out[0], &out[1]);
      BoxMuller(r[2], r[3], &out[2], &out[3]);
    } else if (dtype == kHalf) {
      for (int i = 0; i < 4; ++i) out[i] = static_cast<float>(r[i] & 0x3ffu) * (1.0f / 1024);
    } else if (dtype == kBFloat16) {
      for (int i = 0; i < 4; ++i) out[i] = static_cast<float>(r[i] & 0x7fu) * (1.0f / 128);
    } else {
      for (int i = 0; i < 4; ++i) out[i] = BitsToFloat(r[i]);
    }
    return;
  }
  // Truncated normal: pairs of draws until four values lie within (-2, 2); each group owns
  // 256 Philox calls of the counter space.
  U32x4 c = Advance(counter, static_cast<uint64_t>(g) * 256);
  U32x4 block{};
  int used = 4, kept = 0;
  auto next = [&]() {
    if (used == 4) {
      block = Philox(c, key);
      c = Advance(c, 1);
      used = 0;
    }
    return block[used++];
  };
  while (kept < 4) {
    const uint32_t x0 = next(), x1 = next();
    float f[2];
    BoxMuller(x0, x1, &f[0], &f[1]);
    for (float v : f)
      if (kept < 4 && std::fabs(v) < 2.0f) out[kept++] = v;
  }
}

class RandomKernel : public Kernel {
 public:
  // v2: inputs key, counter (uint64); otherwise input seed [2] (int32/int64).
  static Status Make(const KernelDef& def, Dist dist, bool v2, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, v2 ? 2 : 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<RandomKernel>();
    k->dist_ = dist;
    k->v2_ = v2;
    k->dtype_ = def.outputs[0].dtype;
    k->n_ = NumElements(def.outputs[0].dims);
    if (k->dtype_ != kFloat && k->dtype_ != kHalf && k->dtype_ != kBFloat16)
      return Error("output dtype ", DTypeName(k->dtype_), " not supported (allowed: float32, float16, bfloat16)");
    if (v2) {
      int64_t alg = 0;
      NPU_RETURN_IF_ERROR(def.attrs.Scalar("alg", &alg));
      if (alg != 1 && alg != 3)
        return Error("RNG algorithm ", alg, " not supported; allowed: 1 (Philox), 3 (auto-select)");
      if (def.inputs[0].dtype != kUInt64 || def.inputs[1].dtype != kUInt64 ||
          NumElements(def.inputs[0].dims) != 1 || NumElements(def.inputs[1].dims) < 2)
        return Error("key must be uint64 [1] and counter uint64 [2], got ", DTypeName(def.inputs[0].dtype),
                     ShapeString(def.inputs[0].dims), " and ", DTypeName(def.inputs[1].dtype),
                     ShapeString(def.inputs[1].dims));
    } else {
      NPU_RETURN_IF_ERROR(CheckSeed(def.inputs[0]));
      k->seed_dtype_ = def.inputs[0].dtype;
    }
    *out = std::move(k);
    return Status::Ok();
  }

  static Status CheckSeed(const TensorDesc& seed) {
    if ((seed.dtype != kInt32 && seed.dtype != kInt64) || NumElements(seed.dims) != 2)
      return Error("seed must be int32/int64 with 2 elements, got ", DTypeName(seed.dtype),
                   ShapeString(seed.dims));
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    Key key;
    U32x4 counter;
    if (v2_) {
      const uint64_t k = args.in<uint64_t>(0)[0];
      const uint64_t* c = args.in<uint64_t>(1);
      key = {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
      counter = {static_cast<uint32_t>(c[0]), static_cast<uint32_t>(c[0] >> 32),
                 static_cast<uint32_t>(c[1]), static_cast<uint32_t>(c[1] >> 32)};
    } else {
      int64_t seed[2];
      Load<int64_t>(seed_dtype_, args.in(0), 2, seed);
      KeyCounterFromSeed(static_cast<uint64_t>(seed[0]), static_cast<uint64_t>(seed[1]), &key, &counter);
    }
    const int64_t groups = (n_ + 3) / 4;
    const int size = DTypeSize(dtype_);
    char* dst = args.out<char>(0);
    ParallelFor(groups, 256, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        float v[4];
        Group(dist_, dtype_, key, counter, g, v);
        const int64_t first = 4 * g, count = std::min<int64_t>(4, n_ - first);
        Store<float>(dtype_, v, count, dst + first * size);
      }
    });
    return Status::Ok();
  }

 private:
  Dist dist_ = Dist::kUniform;
  bool v2_ = true;
  int dtype_ = kFloat, seed_dtype_ = kInt64;
  int64_t n_ = 0;
};

class KeyCounterKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 2));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    NPU_RETURN_IF_ERROR(RandomKernel::CheckSeed(def.inputs[0]));
    if (def.outputs[0].dtype != kUInt64 || def.outputs[1].dtype != kUInt64 ||
        NumElements(def.outputs[0].dims) != 1 || NumElements(def.outputs[1].dims) != 2)
      return Error("outputs must be key uint64 [1] and counter uint64 [2]");
    auto k = std::make_unique<KeyCounterKernel>();
    k->seed_dtype_ = def.inputs[0].dtype;
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    int64_t seed[2];
    Load<int64_t>(seed_dtype_, args.in(0), 2, seed);
    Key key;
    U32x4 c;
    KeyCounterFromSeed(static_cast<uint64_t>(seed[0]), static_cast<uint64_t>(seed[1]), &key, &c);
    args.out<uint64_t>(0)[0] = uint64_t{key[1]} << 32 | key[0];
    args.out<uint64_t>(1)[0] = uint64_t{c[1]} << 32 | c[0];
    args.out<uint64_t>(1)[1] = uint64_t{c[3]} << 32 | c[2];
    return Status::Ok();
  }

 private:
  int seed_dtype_ = kInt64;
};

void RegisterRandomKernels() {
  RegisterKernel("StatelessRandomGetKeyCounter", KeyCounterKernel::Make);
  const struct { const char* name; Dist dist; } kOps[] = {
      {"StatelessRandomUniform", Dist::kUniform},
      {"StatelessRandomNormal", Dist::kNormal},
      {"StatelessTruncatedNormal", Dist::kTruncatedNormal},
  };
  for (const auto& op : kOps) {
    const Dist dist = op.dist;
    RegisterKernel(op.name, [dist](const KernelDef& d, std::unique_ptr<Kernel>* k) {
      return RandomKernel::Make(d, dist, false, k);
    });
    RegisterKernel(std::string(op.name) + "V2", [dist](const KernelDef& d, std::unique_ptr<Kernel>* k) {
      return RandomKernel::Make(d, dist, true, k);
    });
  }
}
const StaticInit kInit(RegisterRandomKernels);

}  // namespace
}  // namespace kernels
}  // namespace npu
