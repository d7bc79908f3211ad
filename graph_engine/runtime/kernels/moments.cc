// Batch-norm training statistics per channel (graph_engine/ops/norm.py has the attrs and the
// numpy references; passes/fusion/batch_norm_training.py makes them from Keras' subgraphs):
//   NpuMoments(x) -> (mean, variance)                 one kernel for Mean, SquaredDifference, Mean
//   NpuBatchNormGradSums(dy, x) -> (sum dy, sum dy*x)  one pass for the gradient's two Sums
// over every axis but the channel axis. x is viewed as [outer, channels, inner] (channels last:
// inner 1).
//
// The elements of a channel are cut into segments of at most kSegment that stay in L1: a
// segment's sums run in float32 (8-wide over channels, or along a channel's contiguous run),
// and the variance of a segment is taken around its own mean by reading it again from L1 (two
// passes, no cancellation, one pass over memory). Segments combine in double, in a fixed
// order (results do not depend on threads):
//   mean = sum(S_s) / n,   M2 = sum(M2_s + n_s (S_s / n_s - mean)^2),   variance = M2 / n.
// Float32/float16/bfloat16 storage, float32 math, rounded once on store.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/channel_view.h"
#include "kernels/float_io.h"
#include "kernels/window.h"   // CheckShape

namespace npu {
namespace kernels {
namespace {

constexpr int64_t kSegment = 4096;   // elements of one segment (16 KiB of float32)
constexpr int64_t kMaxCols = 256;    // channels per segment (channels last)

// acc[j] += x[j] (kSquares: += (x[j] - m[j])^2; kProduct: += x[j] * y[j]) for j < w.
enum class Accumulate { kSum, kSquares, kProduct };
template <Accumulate kOp>
inline void AddRow(const float* x, const float* y, int64_t w, float* acc) {
  int64_t j = 0;
  for (; j + 8 <= w; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    if (kOp == Accumulate::kSquares) {
      v = _mm256_sub_ps(v, _mm256_loadu_ps(y + j));
      v = _mm256_mul_ps(v, v);
    } else if (kOp == Accumulate::kProduct) {
      v = _mm256_mul_ps(v, _mm256_loadu_ps(y + j));
    }
    _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), v));
  }
  for (; j < w; ++j) {
    const float v = kOp == Accumulate::kSquares ? (x[j] - y[j]) * (x[j] - y[j])
                    : kOp == Accumulate::kProduct ? x[j] * y[j] : x[j];
    acc[j] += v;
  }
}

// Sum of x[i] (kSquares: (x[i] - m)^2; kProduct: x[i] * y[i]) over a contiguous run, in 8
// float32 lanes added in a fixed order.
template <Accumulate kOp>
inline float RunSum(const float* x, const float* y, int64_t n, float m) {
  __m256 lanes = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (kOp == Accumulate::kSquares) {
      v = _mm256_sub_ps(v, mv);
      v = _mm256_mul_ps(v, v);
    } else if (kOp == Accumulate::kProduct) {
      v = _mm256_mul_ps(v, _mm256_loadu_ps(y + i));
    }
    lanes = _mm256_add_ps(lanes, v);
  }
  float lane[8];
  _mm256_storeu_ps(lane, lanes);
  float s = 0;
  for (; i < n; ++i)
    s += kOp == Accumulate::kSquares   ? (x[i] - m) * (x[i] - m)
         : kOp == Accumulate::kProduct ? x[i] * y[i]
                                       : x[i];
  for (float v : lane) s += v;
  return s;
}

// Two sums per segment and channel (moments: the sum and M2 around the segment's mean; grad
// sums: sum dy and sum dy*x), in double, laid out [segment][channel].
struct Partials {
  int64_t segments = 0;
  std::vector<double> a, b;
  std::vector<double> n;   // elements per channel of each segment
};

class ChannelStatsKernel : public Kernel {
 public:
  ChannelStatsKernel(bool moments, ChannelView v, int dtype)
      : moments_(moments), v_(v), dtype_(dtype) {
    if (v_.inner == 1) {
      cols_ = std::min(v_.channels, kMaxCols);
      rows_ = std::max<int64_t>(1, kSegment / std::max<int64_t>(cols_, 1));
    } else {
      rows_ = std::max<int64_t>(1, std::min(v_.inner, kSegment));
    }
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t n = v_.outer * v_.channels * v_.inner, count = v_.PerChannel();
    const int64_t c = v_.channels;
    if (c == 0) return Status::Ok();
    FloatIn x(dtype_, args.in(moments_ ? 0 : 1), n);
    std::unique_ptr<FloatIn> dy;
    if (!moments_) dy = std::make_unique<FloatIn>(dtype_, args.in(0), n);
    FloatOut out0(dtype_, args.out(0), c), out1(dtype_, args.out(1), c);
    const Partials p = v_.inner == 1 ? ChannelsLast(x.data(), dy ? dy->data() : nullptr)
                                     : ChannelsFirst(x.data(), dy ? dy->data() : nullptr);
    ParallelFor(c, 4 * p.segments, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) Combine(p, ch, count, out0.data() + ch, out1.data() + ch);
    });
    out0.Finish();
    out1.Finish();
    return Status::Ok();
  }

 private:
  // Channel ch's results from its segments' partial sums, in segment order.
  void Combine(const Partials& p, int64_t ch, int64_t count, float* r0, float* r1) const {
    const int64_t c = v_.channels;
    double a = 0, b = 0;
    for (int64_t s = 0; s < p.segments; ++s) a += p.a[s * c + ch];
    if (!moments_) {
      for (int64_t s = 0; s < p.segments; ++s) b += p.b[s * c + ch];
      *r0 = static_cast<float>(a);
      *r1 = static_cast<float>(b);
      return;
    }
    // An empty batch: 0/0, NaN, as Mean; inf/NaN elements give NaN variances, as TF's.
    const double mean = a / static_cast<double>(count);
    for (int64_t s = 0; s < p.segments; ++s) {
      const double ns = p.n[s];
      if (ns == 0) continue;
      const double d = p.a[s * c + ch] / ns - mean;
      b += p.b[s * c + ch] + ns * d * d;
    }
    *r0 = static_cast<float>(mean);
    *r1 = static_cast<float>(b / static_cast<double>(count));
  }

  // x as [rows, C]: a segment is rows_ rows of a block of cols_ channels.
  Partials ChannelsLast(const float* x, const float* dy) const {
    const int64_t c = v_.channels, rows = v_.outer;
    const int64_t blocks = (rows + rows_ - 1) / rows_, chunks = (c + cols_ - 1) / cols_;
    Partials p;
    p.segments = blocks;
    p.a.assign(blocks * c, 0.0);
    p.b.assign(blocks * c, 0.0);
    for (int64_t blk = 0; blk < blocks; ++blk)
      p.n.push_back(static_cast<double>(std::min(rows, (blk + 1) * rows_) - blk * rows_));
    ParallelFor(blocks * chunks, 3 * rows_ * cols_, [&](int64_t i0, int64_t i1) {
      float sa[kMaxCols], sb[kMaxCols], mean[kMaxCols];
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t blk = item / chunks, c0 = item % chunks * cols_, w = std::min(cols_, c - c0);
        const int64_t r0 = blk * rows_, r1 = std::min(rows, r0 + rows_);
        std::fill(sa, sa + w, 0.0f);
        std::fill(sb, sb + w, 0.0f);
        if (moments_) {
          for (int64_t r = r0; r < r1; ++r) AddRow<Accumulate::kSum>(x + r * c + c0, nullptr, w, sa);
          for (int64_t j = 0; j < w; ++j) mean[j] = sa[j] / static_cast<float>(r1 - r0);
          for (int64_t r = r0; r < r1; ++r) AddRow<Accumulate::kSquares>(x + r * c + c0, mean, w, sb);
        } else {
          for (int64_t r = r0; r < r1; ++r) {
            AddRow<Accumulate::kSum>(dy + r * c + c0, nullptr, w, sa);
            AddRow<Accumulate::kProduct>(dy + r * c + c0, x + r * c + c0, w, sb);
          }
        }
        for (int64_t j = 0; j < w; ++j) {
          p.a[blk * c + c0 + j] = sa[j];
          p.b[blk * c + c0 + j] = sb[j];
        }
      }
    });
    return p;
  }

  // x as [outer, C, inner]: a segment is up to rows_ elements of one channel's contiguous run.
  Partials ChannelsFirst(const float* x, const float* dy) const {
    const int64_t c = v_.channels, pieces = (v_.inner + rows_ - 1) / rows_;
    Partials p;
    p.segments = v_.outer * pieces;
    p.a.assign(p.segments * c, 0.0);
    p.b.assign(p.segments * c, 0.0);
    for (int64_t s = 0; s < p.segments; ++s)
      p.n.push_back(static_cast<double>(std::min(rows_, v_.inner - s % pieces * rows_)));
    ParallelFor(p.segments * c, 3 * rows_, [&](int64_t i0, int64_t i1) {
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t s = item / c, ch = item % c, o = s / pieces;
        const int64_t i = s % pieces * rows_, m = std::min(rows_, v_.inner - i);
        const int64_t at = v_.At(o, ch, i);
        double a, b;
        if (moments_) {
          const float sum = RunSum<Accumulate::kSum>(x + at, nullptr, m, 0.0f);
          a = sum;
          b = RunSum<Accumulate::kSquares>(x + at, nullptr, m, sum / static_cast<float>(m));
        } else {
          a = RunSum<Accumulate::kSum>(dy + at, nullptr, m, 0.0f);
          b = RunSum<Accumulate::kProduct>(dy + at, x + at, m, 0.0f);
        }
        p.a[s * c + ch] = a;
        p.b[s * c + ch] = b;
      }
    });
    return p;
  }

  bool moments_;
  ChannelView v_;
  int dtype_;
  int64_t rows_ = 1, cols_ = 1;
};

// NpuMoments (x) and NpuBatchNormGradSums (dy, x): attrs axis (the channel axis), keep_dims.
Status MakeChannelStats(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  const bool moments = def.kernel == "NpuMoments";
  NPU_RETURN_IF_ERROR(CheckArity(def, moments ? 1 : 2, 2));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  const Dims& x = def.inputs[0].dims;
  if (x.empty()) return Error("x must have rank >= 1, got a scalar");
  if (!moments) NPU_RETURN_IF_ERROR(CheckShape("x", def.inputs[1].dims, x));
  int64_t axis;
  bool keep;
  NPU_RETURN_IF_ERROR(def.attrs.Int("axis", -1, &axis));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("keep_dims", true, &keep));
  const int64_t rank = static_cast<int64_t>(x.size());
  if (axis < -rank || axis >= rank) return Error("axis ", axis, " is out of range for rank ", rank);
  axis = (axis + rank) % rank;
  if (!keep && axis != rank - 1)
    return Error("keep_dims false needs the channel axis last, got axis ", axis, " of ", ShapeString(x));
  Dims stat = keep ? Dims(x.size(), 1) : Dims{x[axis]};
  if (keep) stat[axis] = x[axis];
  for (int i = 0; i < 2; ++i)
    NPU_RETURN_IF_ERROR(CheckShape(i == 0 ? "output 0" : "output 1", def.outputs[i].dims, stat));
  *out = std::make_unique<ChannelStatsKernel>(moments, ViewAround(x, axis), def.outputs[0].dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("NpuMoments", MakeChannelStats);
NPU_REGISTER_KERNEL("NpuBatchNormGradSums", MakeChannelStats);

}  // namespace
}  // namespace kernels
}  // namespace npu
