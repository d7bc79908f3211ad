// TF's stateless random ops, bit-exact with TF's CPU kernels (the reference and the algorithm
// are described in graph_engine/ops/random.py): Philox4x32-10, TF's seed scrambling, TF's
// uint32 -> float conversions, and Box-Muller in float with the same libm calls (logf, sqrtf,
// sincosf), so NPU dropout masks and initializer values equal the CPU's; TF's integer mappings
// (stateless_uniform with an integer dtype); and StatelessMultinomial with the row blocks TF's
// CPU thread pool gives it.
#include <sched.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
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

// The uint32 stream of (key, counter) from Philox call `calls` on, skipping `words` more words:
// word i is word i % 4 of Philox(counter + i / 4).
class Stream {
 public:
  Stream(const Key& key, const U32x4& counter, uint64_t calls, uint64_t words = 0)
      : key_(key), c_(Advance(counter, calls + words / 4)), block_(Philox(c_, key_)),
        used_(static_cast<int>(words % 4)) {}

  uint32_t Next() {
    if (used_ == 4) {
      c_ = Advance(c_, 1);
      block_ = Philox(c_, key_);
      used_ = 0;
    }
    return block_[used_++];
  }

 private:
  Key key_;
  U32x4 c_, block_;
  int used_;
};

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
  Stream stream(key, counter, static_cast<uint64_t>(g) * 256);
  int kept = 0;
  while (kept < 4) {
    const uint32_t x0 = stream.Next(), x1 = stream.Next();
    float f[2];
    BoxMuller(x0, x1, &f[0], &f[1]);
    for (float v : f)
      if (kept < 4 && std::fabs(v) < 2.0f) out[kept++] = v;
  }
}

Status CheckSeed(const TensorDesc& seed) {
  if ((seed.dtype != kInt32 && seed.dtype != kInt64) || NumElements(seed.dims) != 2)
    return Error("seed must be int32/int64 with 2 elements, got ", DTypeName(seed.dtype),
                 ShapeString(seed.dims));
  return Status::Ok();
}

// Where a random op's stream comes from: key and counter inputs (the V2 ops, with an `alg`
// attr), or a seed input scrambled as TF does; they are inputs `first` (and first + 1).
struct StreamSource {
  bool v2 = true;
  int first = 0;
  int seed_dtype = kInt64;

  static Status Make(const KernelDef& def, bool v2, int first, StreamSource* src) {
    src->v2 = v2;
    src->first = first;
    if (!v2) {
      NPU_RETURN_IF_ERROR(CheckSeed(def.inputs[first]));
      src->seed_dtype = def.inputs[first].dtype;
      return Status::Ok();
    }
    int64_t alg = 0;
    NPU_RETURN_IF_ERROR(def.attrs.Scalar("alg", &alg));
    if (alg != 1 && alg != 3)
      return Error("RNG algorithm ", alg, " not supported; allowed: 1 (Philox), 3 (auto-select)");
    const TensorDesc &k = def.inputs[first], &c = def.inputs[first + 1];
    if (k.dtype != kUInt64 || c.dtype != kUInt64 || NumElements(k.dims) != 1 || NumElements(c.dims) < 2)
      return Error("key must be uint64 [1] and counter uint64 [2], got ", DTypeName(k.dtype),
                   ShapeString(k.dims), " and ", DTypeName(c.dtype), ShapeString(c.dims));
    return Status::Ok();
  }

  void Read(const KernelArgs& args, Key* key, U32x4* counter) const {
    if (v2) {
      const uint64_t k = args.in<uint64_t>(first)[0];
      const uint64_t* c = args.in<uint64_t>(first + 1);
      *key = {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
      *counter = {static_cast<uint32_t>(c[0]), static_cast<uint32_t>(c[0] >> 32),
                  static_cast<uint32_t>(c[1]), static_cast<uint32_t>(c[1] >> 32)};
      return;
    }
    int64_t seed[2];
    Load<int64_t>(seed_dtype, args.in(first), 2, seed);
    KeyCounterFromSeed(static_cast<uint64_t>(seed[0]), static_cast<uint64_t>(seed[1]), key, counter);
  }
};

class RandomKernel : public Kernel {
 public:
  // v2: inputs key, counter (uint64); otherwise input seed [2] (int32/int64).
  static Status Make(const KernelDef& def, Dist dist, bool v2, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, v2 ? 2 : 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<RandomKernel>();
    k->dist_ = dist;
    k->dtype_ = def.outputs[0].dtype;
    k->n_ = NumElements(def.outputs[0].dims);
    if (k->dtype_ != kFloat && k->dtype_ != kHalf && k->dtype_ != kBFloat16)
      return Error("output dtype ", DTypeName(k->dtype_), " not supported (allowed: float32, float16, bfloat16)");
    NPU_RETURN_IF_ERROR(StreamSource::Make(def, v2, 0, &k->source_));
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    Key key;
    U32x4 counter;
    source_.Read(args, &key, &counter);
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
  StreamSource source_;
  int dtype_ = kFloat;
  int64_t n_ = 0;
};

// StatelessRandomUniform(Full)Int(V2): TF's UniformFullIntDistribution (the raw bits) or, with
// minval < maxval, its UniformDistribution: minval + bits % (maxval - minval), the range and the
// sum in unsigned arithmetic. 32-bit values take one word each, 64-bit values two (low first).
class IntKernel : public Kernel {
 public:
  // Inputs: the stream's (key, counter or seed), then minval and maxval when `ranged`.
  static Status Make(const KernelDef& def, bool v2, bool ranged, std::unique_ptr<Kernel>* out) {
    const int stream_inputs = v2 ? 2 : 1;
    NPU_RETURN_IF_ERROR(CheckArity(def, stream_inputs + (ranged ? 2 : 0), 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<IntKernel>();
    k->ranged_ = ranged;
    k->dtype_ = def.outputs[0].dtype;
    k->n_ = NumElements(def.outputs[0].dims);
    const bool full_types = k->dtype_ == kUInt64 && !ranged;
    if (k->dtype_ != kInt32 && k->dtype_ != kInt64 && !full_types)
      return Error("output dtype ", DTypeName(k->dtype_), " not supported (allowed: int32, int64",
                   ranged ? ")" : ", uint64)");
    NPU_RETURN_IF_ERROR(StreamSource::Make(def, v2, 0, &k->source_));
    if (ranged) {
      k->bounds_ = stream_inputs;
      for (int i = 0; i < 2; ++i) {
        const TensorDesc& b = def.inputs[stream_inputs + i];
        if (b.dtype != k->dtype_)
          return Error(i ? "maxval" : "minval", " must be ", DTypeName(k->dtype_), ", got ", DTypeName(b.dtype));
        if (k->n_ > 0 && !b.dims.empty())   // TF checks them only for a non-empty result
          return InvalidArgument(i ? "maxval" : "minval", " must be 0-D, got shape ", ShapeString(b.dims));
      }
    }
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    if (n_ == 0) return Status::Ok();     // TF checks minval < maxval only for a non-empty result
    Key key;
    U32x4 counter;
    source_.Read(args, &key, &counter);
    if (DTypeSize(dtype_) == 4) return Fill<uint32_t>(args, key, counter);
    return Fill<uint64_t>(args, key, counter);
  }

 private:
  // U: the unsigned type of the output's width (TF's bits and range).
  template <class U>
  Status Fill(const KernelArgs& args, const Key& key, const U32x4& counter) const {
    U lo = 0, range = 0;
    if (ranged_) {
      U hi;
      std::memcpy(&lo, args.in(bounds_), sizeof(U));
      std::memcpy(&hi, args.in(bounds_ + 1), sizeof(U));
      using S = std::make_signed_t<U>;
      if (!(static_cast<S>(lo) < static_cast<S>(hi)))
        return InvalidArgument("Need minval < maxval, got ", static_cast<S>(lo), " >= ", static_cast<S>(hi));
      range = hi - lo;
    }
    constexpr int kPerCall = sizeof(U) == 4 ? 4 : 2;    // values per Philox call
    U* dst = args.out<U>(0);
    ParallelFor((n_ + kPerCall - 1) / kPerCall, 64, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g) {
        const U32x4 r = Philox(Advance(counter, static_cast<uint64_t>(g)), key);
        for (int j = 0; j < kPerCall && g * kPerCall + j < n_; ++j) {
          U bits = r[j];
          if constexpr (sizeof(U) == 8) bits = uint64_t{r[2 * j]} | uint64_t{r[2 * j + 1]} << 32;
          dst[g * kPerCall + j] = ranged_ ? static_cast<U>(lo + bits % range) : bits;
        }
      }
    });
    return Status::Ok();
  }

  StreamSource source_;
  bool ranged_ = true;
  int bounds_ = 0;          // input index of minval
  int dtype_ = kInt64;
  int64_t n_ = 0;
};

// The size of TF's CPU intra-op thread pool as TF sizes it unless told otherwise (the reference,
// graph_engine/ops/random.py's tf_intra_op_threads, explains): $TF_NUM_INTRAOP_THREADS, else the
// CPUs this process may run on.
int TfIntraOpThreads() {
  if (const char* env = std::getenv("TF_NUM_INTRAOP_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n <= (1 << 30)) return static_cast<int>(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

// The rows per block TF's CPU StatelessMultinomial is cut into (its work sharder, then Eigen's
// ThreadPoolDevice::parallelFor with TF's cost estimate per row); blocks start at multiples of
// it. Mirrors multinomial_row_blocks in graph_engine/ops/random.py.
int64_t MultinomialBlockRows(int64_t batch, int64_t samples, int64_t classes, int threads) {
  const int64_t cost = static_cast<int64_t>(
      50 * (samples * std::log(static_cast<double>(classes)) / std::log(2.0) + classes));
  const double wanted = (static_cast<double>(batch) * static_cast<double>(cost) - 100000) / 100000 + 0.9;
  if (batch <= 1 || threads <= 1 || wanted < 2) return std::max<int64_t>(batch, 1);
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto efficiency = [&](int64_t count) {
    return static_cast<double>(count) / static_cast<double>(ceil_div(count, threads) * threads);
  };
  int64_t size = std::min(batch, std::max(ceil_div(batch, 4 * int64_t{threads}),
                                          static_cast<int64_t>(1.0 / (static_cast<double>(cost) / 40000))));
  const int64_t largest = std::min(batch, 2 * size);
  double best = efficiency(ceil_div(batch, size));
  for (int64_t prev = ceil_div(batch, size); best < 1.0 && prev > 1;) {   // coarser while efficient
    const int64_t coarser = ceil_div(batch, prev - 1);
    if (coarser > largest) break;
    prev = ceil_div(batch, coarser);
    if (efficiency(prev) + 0.01 >= best) {
      size = coarser;
      best = std::max(best, efficiency(prev));
    }
  }
  return size;
}

// StatelessMultinomial: logits [batch, classes] (float types), seed -> [batch, samples] indices.
// Per row an unnormalized CDF in double of exp(logit - max finite logit) over the finite logits;
// a sample is the first class whose CDF exceeds u * total, u a double in [0, 1) from two stream
// words. A block of rows starting at s starts at Philox call s * (samples + 3) / 4 and its rows
// read on from there, 2 * samples words each, so every row knows its place in the stream.
// (TF takes exp with Eigen's vectorized exp, which may differ from std::exp in the last bit: a
// sample can differ only if u * total lies within that bit of a CDF value.)
class MultinomialKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    auto k = std::make_unique<MultinomialKernel>();
    const TensorDesc& logits = def.inputs[0];
    k->dtype_ = logits.dtype;
    k->out_dtype_ = def.outputs[0].dtype;
    if (k->dtype_ != kFloat && k->dtype_ != kHalf && k->dtype_ != kBFloat16)
      return Error("logits dtype ", DTypeName(k->dtype_), " not supported (allowed: float32, float16, bfloat16)");
    if (k->out_dtype_ != kInt32 && k->out_dtype_ != kInt64)
      return Error("output dtype ", DTypeName(k->out_dtype_), " not supported (allowed: int32, int64)");
    NPU_RETURN_IF_ERROR(StreamSource::Make(def, false, 1, &k->source_));
    if (logits.dims.size() != 2 || logits.dims[1] <= 0)
      return Error("logits must be a matrix with at least one class, got ", ShapeString(logits.dims));
    const auto& od = def.outputs[0].dims;
    if (od.size() != 2 || od[0] != logits.dims[0])
      return Error("output shape ", ShapeString(od), " does not match logits ", ShapeString(logits.dims));
    k->batch_ = logits.dims[0];
    k->classes_ = logits.dims[1];
    k->samples_ = od[1];
    k->block_rows_ = MultinomialBlockRows(k->batch_, k->samples_, k->classes_, TfIntraOpThreads());
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    Key key;
    U32x4 counter;
    source_.Read(args, &key, &counter);
    const char* logits = args.in<char>(0);
    const int in_size = DTypeSize(dtype_);
    const int64_t cost = classes_ * 8 + samples_ * 16;
    ParallelFor(batch_, cost, [&](int64_t begin, int64_t end) {
      std::vector<float> row(classes_);
      std::vector<double> cdf(classes_);
      std::vector<int64_t> picks(samples_);
      for (int64_t b = begin; b < end; ++b) {
        Load<float>(dtype_, logits + b * classes_ * in_size, classes_, row.data());
        float top = std::numeric_limits<float>::lowest();   // no finite logit: total 0, and
        for (float x : row)                                   // every sample is `classes`
          if (std::isfinite(x)) top = std::max(top, x);
        double total = 0;
        for (int64_t j = 0; j < classes_; ++j) {
          if (std::isfinite(row[j])) total += std::exp(static_cast<double>(row[j]) - top);
          cdf[j] = total;
        }
        const int64_t start = b / block_rows_ * block_rows_;
        Stream stream(key, counter, static_cast<uint64_t>(start * (samples_ + 3) / 4),
                      static_cast<uint64_t>(2 * samples_ * (b - start)));
        for (int64_t j = 0; j < samples_; ++j) {
          const uint32_t x0 = stream.Next(), x1 = stream.Next();
          const uint64_t bits = (uint64_t{1023} << 52) | (uint64_t{x0 & 0xfffffu} << 32) | x1;
          double u;
          std::memcpy(&u, &bits, 8);
          picks[j] = std::upper_bound(cdf.begin(), cdf.end(), (u - 1.0) * total) - cdf.begin();
        }
        Store<int64_t>(out_dtype_, picks.data(), samples_,
                       args.out<char>(0) + b * samples_ * DTypeSize(out_dtype_));
      }
    });
    return Status::Ok();
  }

 private:
  StreamSource source_;
  int dtype_ = kFloat, out_dtype_ = kInt64;
  int64_t batch_ = 0, classes_ = 0, samples_ = 0, block_rows_ = 1;
};

class KeyCounterKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 2));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    NPU_RETURN_IF_ERROR(CheckSeed(def.inputs[0]));
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
  RegisterKernel("StatelessMultinomial", MultinomialKernel::Make);
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
  for (const bool ranged : {true, false}) {
    const std::string name = ranged ? "StatelessRandomUniformInt" : "StatelessRandomUniformFullInt";
    for (const bool v2 : {false, true}) {
      RegisterKernel(name + (v2 ? "V2" : ""), [v2, ranged](const KernelDef& d, std::unique_ptr<Kernel>* k) {
        return IntKernel::Make(d, v2, ranged, k);
      });
    }
  }
}
const StaticInit kInit(RegisterRandomKernels);

}  // namespace
}  // namespace kernels
}  // namespace npu
