// Window maxima with their position (graph_engine/ops/nn_extra.py): MaxPoolWithArgmax,
// MaxPoolGradWithArgmax, Dilation2D and its backprops, and NthElement. NHWC; any NPU number
// type, computed as float32 (float storage) or int64 (integers), rounded once on store.
// As TF's CPU kernels: a window's maximum starts at the dtype's lowest value and only a strictly
// greater value replaces it (the first maximum in scan order wins; MaxPoolWithArgmax takes the
// window's first element whatever it is); window positions in the padding are skipped.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {
namespace {

template <class V>
std::vector<V> LoadAll(int dtype, const void* data, int64_t n) {
  std::vector<V> v(n);
  Load<V>(dtype, data, n, v.data());
  return v;
}

template <class V>
V Lowest(int dtype) {
  if constexpr (std::is_same_v<V, float>) return LowestOf(dtype);
  return dtype == kInt32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
}

// a + b in the dtype's own arithmetic, as TF's kernels add input and filter: integers wrap.
template <class V>
V AddAs(int dtype, V a, V b) {
  if constexpr (std::is_same_v<V, float>) {
    return a + b;
  } else {
    const uint64_t sum = static_cast<uint64_t>(a) + static_cast<uint64_t>(b);
    return dtype == kInt32 ? static_cast<V>(static_cast<int32_t>(static_cast<uint32_t>(sum)))
                           : static_cast<V>(sum);
  }
}

struct Taken {
  int64_t row = -1, col = -1, tap = 0;   // input position and filter tap of the maximum
};

// The window geometry over an NHWC input, and the search of one window.
struct WindowScan {
  Window2D g;
  bool first_always = false;
  int dtype = kFloat;

  int64_t InAt(int64_t n, int64_t y, int64_t x, int64_t c) const { return ((n * g.h + y) * g.w + x) * g.c + c; }
  int64_t OutAt(int64_t n, int64_t y, int64_t x, int64_t c) const { return ((n * g.oh + y) * g.ow + x) * g.c + c; }

  // The maximum of x (+ filter[kh, kw, c]) over the window of output (n, oy, ox), channel c.
  template <class V>
  V Max(const V* x, const V* filter, V lowest, int64_t n, int64_t oy, int64_t ox, int64_t c, Taken* t) const {
    V best = lowest;
    *t = Taken();
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t y = oy * g.sh + kh * g.dh - g.pad_top;
      if (y < 0 || y >= g.h) continue;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t xx = ox * g.sw + kw * g.dw - g.pad_left;
        if (xx < 0 || xx >= g.w) continue;
        const V v = filter ? AddAs(dtype, x[InAt(n, y, xx, c)], filter[(kh * g.kw + kw) * g.c + c])
                           : x[InAt(n, y, xx, c)];
        if (v > best || (first_always && t->row < 0)) {
          best = v;
          *t = Taken{y, xx, kh * g.kw + kw};
        }
      }
    }
    return best;
  }

  // fn(output index, n, oy, ox, c) for every output element, images in parallel.
  template <class Fn>
  void ForOutputs(bool parallel, Fn&& fn) const {
    auto image = [&](int64_t n) {
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox)
          for (int64_t c = 0; c < g.c; ++c) fn(OutAt(n, oy, ox, c), n, oy, ox, c);
    };
    if (!parallel) {
      for (int64_t n = 0; n < g.n; ++n) image(n);
      return;
    }
    ParallelFor(g.n, g.oh * g.ow * g.c * g.kh * g.kw, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) image(n);
    });
  }
};

enum class Kind { kPoolArgmax, kPoolGrad, kDilation, kDilationInput, kDilationFilter };

template <class V>
class WindowMaxKernel : public Kernel {
 public:
  WindowMaxKernel(Kind kind, WindowScan scan, int dtype, int index_dtype, bool with_batch)
      : kind_(kind), s_(scan), dtype_(dtype), index_dtype_(index_dtype), with_batch_(with_batch) {}

  bool ChecksValues() const override { return kind_ == Kind::kPoolGrad; }

  Status Compute(const KernelArgs& args) const override {
    const Window2D& g = s_.g;
    const int64_t in_size = g.n * g.h * g.w * g.c, out_size = g.n * g.oh * g.ow * g.c;
    if (kind_ == Kind::kPoolGrad) return PoolGrad(args, in_size, out_size);
    const std::vector<V> x = LoadAll<V>(dtype_, args.in(0), in_size);
    const bool dilation = kind_ != Kind::kPoolArgmax;
    const std::vector<V> f = dilation ? LoadAll<V>(dtype_, args.in(1), g.kh * g.kw * g.c) : std::vector<V>();
    const V lowest = Lowest<V>(dtype_);
    if (kind_ == Kind::kPoolArgmax || kind_ == Kind::kDilation) {
      std::vector<V> y(out_size);
      std::vector<int64_t> arg(kind_ == Kind::kPoolArgmax ? out_size : 0);
      s_.ForOutputs(true, [&](int64_t o, int64_t n, int64_t oy, int64_t ox, int64_t c) {
        Taken t;
        y[o] = s_.Max(x.data(), dilation ? f.data() : nullptr, lowest, n, oy, ox, c, &t);
        if (!arg.empty()) arg[o] = s_.InAt(with_batch_ ? n : 0, t.row, t.col, c);
      });
      Store<V>(dtype_, y.data(), out_size, args.out(0));
      if (!arg.empty()) Store<int64_t>(index_dtype_, arg.data(), out_size, args.out(1));
      return Status::Ok();
    }
    // Dilation backprops: each output gradient to its window's maximum (TF: with nothing
    // taken, the input gradient goes to the clamped window start, the filter's to tap 0).
    const std::vector<V> dy = LoadAll<V>(dtype_, args.in(2), out_size);
    const bool to_filter = kind_ == Kind::kDilationFilter;
    std::vector<V> out(to_filter ? g.kh * g.kw * g.c : in_size, V(0));
    s_.ForOutputs(!to_filter, [&](int64_t o, int64_t n, int64_t oy, int64_t ox, int64_t c) {
      Taken t;
      s_.Max(x.data(), f.data(), lowest, n, oy, ox, c, &t);
      if (to_filter) {
        out[t.tap * g.c + c] += dy[o];
        return;
      }
      const int64_t y = t.row >= 0 ? t.row : std::max<int64_t>(oy * g.sh - g.pad_top, 0);
      const int64_t xx = t.row >= 0 ? t.col : std::max<int64_t>(ox * g.sw - g.pad_left, 0);
      out[s_.InAt(n, y, xx, c)] += dy[o];
    });
    Store<V>(dtype_, out.data(), static_cast<int64_t>(out.size()), args.out(0));
    return Status::Ok();
  }

 private:
  // (input, grad, argmax) -> grad added at each argmax (an index within its image unless
  // include_batch_in_index); an index outside its image is TF's InvalidArgument.
  Status PoolGrad(const KernelArgs& args, int64_t in_size, int64_t out_size) const {
    const std::vector<V> grad = LoadAll<V>(dtype_, args.in(1), out_size);
    const std::vector<int64_t> argmax = LoadAll<int64_t>(index_dtype_, args.in(2), out_size);
    std::vector<V> dx(in_size, V(0));
    const int64_t per_in = in_size / std::max<int64_t>(s_.g.n, 1), per_out = out_size / std::max<int64_t>(s_.g.n, 1);
    for (int64_t i = 0; i < out_size; ++i) {
      const int64_t base = i / per_out * per_in;
      const int64_t at = argmax[i] + (with_batch_ ? 0 : base);
      if (at < base || at >= base + per_in)
        return InvalidArgument("Invalid output gradient index: ", argmax[i], " is out of the range of image ",
                               i / per_out, " of ", per_in, " elements");
      dx[at] += grad[i];
    }
    Store<V>(dtype_, dx.data(), in_size, args.out(0));
    return Status::Ok();
  }

  Kind kind_;
  WindowScan s_;
  int dtype_, index_dtype_;
  bool with_batch_;
};

template <template <class> class K, class... Args>
std::unique_ptr<Kernel> ForComputeType(int dtype, Args&&... args) {
  if (ComputeTypeOf(dtype) == ComputeType::kFloat) return std::make_unique<K<float>>(std::forward<Args>(args)...);
  return std::make_unique<K<int64_t>>(std::forward<Args>(args)...);
}

Status CheckNumber(int dtype) {
  if (dtype != kFloat && dtype != kHalf && dtype != kBFloat16 && dtype != kInt32 && dtype != kInt64)
    return Error("does not support ", DTypeName(dtype), "; supported: float32, float16, bfloat16, int32, int64");
  return Status::Ok();
}

Status MakeWindowMax(const KernelDef& def, Kind kind, std::unique_ptr<Kernel>* out) {
  const bool pool = kind == Kind::kPoolArgmax || kind == Kind::kPoolGrad;
  NPU_RETURN_IF_ERROR(CheckArity(def, kind == Kind::kPoolArgmax ? 1 : kind == Kind::kDilation ? 2 : 3,
                                 kind == Kind::kPoolArgmax ? 2 : 1));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  const int dtype = def.inputs[0].dtype;
  NPU_RETURN_IF_ERROR(CheckNumber(dtype));
  const Dims& x = def.inputs[0].dims;
  if (x.size() != 4) return InvalidArgument("input must be 4-D NHWC, got ", ShapeString(x));
  WindowScan scan;
  int64_t kh, kw;
  Attrs attrs = def.attrs;
  if (pool) {
    NPU_RETURN_IF_ERROR(PoolWindowSize(attrs, &kh, &kw));
  } else {
    const Dims& f = def.inputs[1].dims;
    if (f.size() != 3) return InvalidArgument("filter must be 3-dimensional, got ", ShapeString(f));
    if (f[2] != x[3]) return InvalidArgument("input and filter must have the same depth: ", x[3], " vs ", f[2]);
    kh = f[0];
    kw = f[1];
    if (attrs.Has("rates")) attrs.values["dilations"] = attrs.values.at("rates");
  }
  NPU_RETURN_IF_ERROR(MakeWindow2D(attrs, x, kh, kw, !pool, &scan.g));
  if (scan.g.nchw) return InvalidArgument("only NHWC is supported");
  scan.first_always = kind == Kind::kPoolArgmax;
  scan.dtype = dtype;
  if (kind == Kind::kPoolArgmax && NumElements(x) == 0)
    return InvalidArgument("tensor_in must not be empty");                 // TF's check
  const Dims pooled = scan.g.OutputShape(scan.g.c);
  int index_dtype = kInt64;
  switch (kind) {
    case Kind::kPoolArgmax:
      NPU_RETURN_IF_ERROR(CheckShape("argmax", def.outputs[1].dims, pooled));
      index_dtype = def.outputs[1].dtype;
      [[fallthrough]];
    case Kind::kDilation:
      NPU_RETURN_IF_ERROR(CheckShape("output", def.outputs[0].dims, pooled));
      break;
    case Kind::kPoolGrad:
      NPU_RETURN_IF_ERROR(CheckShape("grad", def.inputs[1].dims, pooled));
      NPU_RETURN_IF_ERROR(CheckShape("argmax", def.inputs[2].dims, pooled));
      index_dtype = def.inputs[2].dtype;
      break;
    case Kind::kDilationInput:
    case Kind::kDilationFilter:
      NPU_RETURN_IF_ERROR(CheckShape("out_backprop", def.inputs[2].dims, pooled));
      break;
  }
  if (index_dtype != kInt32 && index_dtype != kInt64) return Error("argmax must be int32 or int64");
  bool with_batch;
  NPU_RETURN_IF_ERROR(def.attrs.Bool("include_batch_in_index", false, &with_batch));
  *out = ForComputeType<WindowMaxKernel>(dtype, kind, scan, dtype, index_dtype, with_batch);
  return Status::Ok();
}

template <Kind kKind>
Status MakeWindowMaxOf(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakeWindowMax(def, kKind, out);
}
NPU_REGISTER_KERNEL("MaxPoolWithArgmax", MakeWindowMaxOf<Kind::kPoolArgmax>);
NPU_REGISTER_KERNEL("MaxPoolGradWithArgmax", MakeWindowMaxOf<Kind::kPoolGrad>);
NPU_REGISTER_KERNEL("Dilation2D", MakeWindowMaxOf<Kind::kDilation>);
NPU_REGISTER_KERNEL("Dilation2DBackpropInput", MakeWindowMaxOf<Kind::kDilationInput>);
NPU_REGISTER_KERNEL("Dilation2DBackpropFilter", MakeWindowMaxOf<Kind::kDilationFilter>);

// NthElement: per row of the last axis, the n-th smallest (reverse: largest) value.
template <class V>
class NthElementKernel : public Kernel {
 public:
  NthElementKernel(int64_t rows, int64_t cols, int64_t n, bool reverse, int dtype)
      : rows_(rows), cols_(cols), n_(n), reverse_(reverse), dtype_(dtype) {}
  Status Compute(const KernelArgs& args) const override {
    std::vector<V> x = LoadAll<V>(dtype_, args.in(0), rows_ * cols_), y(rows_);
    ParallelFor(rows_, 2 * cols_, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        V* row = x.data() + r * cols_;
        const int64_t k = reverse_ ? cols_ - 1 - n_ : n_;
        std::nth_element(row, row + k, row + cols_);
        y[r] = row[k];
      }
    });
    Store<V>(dtype_, y.data(), rows_, args.out(0));
    return Status::Ok();
  }

 private:
  int64_t rows_, cols_, n_;
  bool reverse_;
  int dtype_;
};

Status MakeNthElement(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  const int dtype = def.inputs[0].dtype;
  NPU_RETURN_IF_ERROR(CheckNumber(dtype));
  const Dims& x = def.inputs[0].dims;
  int64_t n;
  bool reverse;
  NPU_RETURN_IF_ERROR(def.attrs.Scalar("n", &n));
  NPU_RETURN_IF_ERROR(def.attrs.Bool("reverse", false, &reverse));
  if (n < 0) return InvalidArgument("n must be non-negative but is ", n);   // TF's checks
  if (x.empty()) return InvalidArgument("Input must be >= 1-D but is 0-D");
  if (x.back() <= n) return InvalidArgument("Input must have last dimension > n = ", n);
  *out = ForComputeType<NthElementKernel>(dtype, NumElements(x) / x.back(), x.back(), n, reverse, dtype);
  return Status::Ok();
}
NPU_REGISTER_KERNEL("NthElement", MakeNthElement);

}  // namespace
}  // namespace kernels
}  // namespace npu
