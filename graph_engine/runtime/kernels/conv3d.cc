// Conv3D and its gradients (reference: graph_engine/ops/conv3d.py), NDHWC or NCDHW, DHWIO
// filters, float32 compute with float16/bfloat16 storage.
//
// im2col + GEMM, as conv.cc: a block of output positions gets its im2col rows [taps, C/G]
// (zeros in the padding), and the DHWIO filter is a [taps * C/G, CO] matrix, so one GEMM
// per block and group gives the outputs, the rows' input gradients (added back into dx) or
// their share of the filter gradient. A grouped convolution (filter in-depth C/G) does that
// per group, with the group's channels and filter columns packed dense.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/format.h"
#include "kernels/gemm.h"
#include "kernels/scratch.h"
#include "kernels/window3d.h"

namespace npu {
namespace kernels {
namespace {

// About this many floats of im2col rows per block: large enough for an efficient GEMM,
// small enough to stay in cache.
constexpr int64_t kColsBlockFloats = 1 << 17;

enum class Conv3DKind { kForward, kBackpropInput, kBackpropFilter };

// Checks the filter (DHWIO, its in-depth the input's channels / groups) and builds the
// geometry; `groups` = input channels / filter in-depth.
Status MakeGeometry(const KernelDef& def, const Dims& x, const Dims& f, const Dims& y, Window3D* g,
                    int64_t* groups) {
  if (f.size() != 5) return Error("filter must be 5-D [d, h, w, in, out], got ", ShapeString(f));
  NPU_RETURN_IF_ERROR(MakeWindow3D(def, x, f.data(), f[4], y, g));
  if (f[3] <= 0 || g->c % f[3] != 0)
    return Error("input depth must be evenly divisible by filter depth: ", g->c, " vs ", f[3]);
  *groups = g->c / f[3];
  if (*groups == 0 || g->co % *groups != 0)
    return Error("output depth must be evenly divisible by number of groups: ", g->co, " vs ",
                 *groups);
  return Status::Ok();
}

class Conv3DKernel : public Kernel {
 public:
  Conv3DKernel(Conv3DKind kind, Window3D g, int64_t groups, int dtype)
      : kind_(kind), g_(g), groups_(groups), dtype_(dtype) {}

  Status Compute(const KernelArgs& args) const override {
    switch (kind_) {
      case Conv3DKind::kForward: Forward(args); break;
      case Conv3DKind::kBackpropInput: BackpropInput(args); break;
      case Conv3DKind::kBackpropFilter: BackpropFilter(args); break;
    }
    return Status::Ok();
  }

 private:
  int64_t cg() const { return g_.c / groups_; }          // input channels of a group
  int64_t og() const { return g_.co / groups_; }         // output channels of a group
  int64_t kkc() const { return g_.taps() * cg(); }       // a group's contraction length
  int64_t x_size() const { return g_.n * g_.xs[0]; }
  int64_t y_size() const { return g_.positions() * g_.co; }
  // NDHWC with one group: the output (gradient) rows are the GEMM's, read and written in place.
  bool dense_rows() const { return g_.ys[4] == 1 && groups_ == 1; }
  // Positions per block: a cache-sized im2col block, and at least one block per thread.
  int64_t Rows(int64_t positions) const {
    const int64_t per_thread = (positions + PlanThreads() - 1) / PlanThreads();
    return std::max<int64_t>(1, std::min(std::max<int64_t>(32, kColsBlockFloats / kkc()), per_thread));
  }

  // Each group's filter columns as a dense [kkc, og] matrix (none needed for one group).
  std::vector<std::vector<float>> GroupFilters(const float* f) const {
    std::vector<std::vector<float>> w(groups_ > 1 ? groups_ : 0);
    for (size_t gi = 0; gi < w.size(); ++gi) {
      w[gi].resize(kkc() * og());
      for (int64_t k = 0; k < kkc(); ++k)
        std::copy_n(f + k * g_.co + gi * og(), og(), w[gi].data() + k * og());
    }
    return w;
  }

  // Input offset (channel 0) of tap (kd, kh, kw)'s axis-i coordinate for output coordinate o,
  // or -1 outside the input.
  int64_t InputAt(int i, int64_t o, int64_t k) const {
    const int64_t v = o * g_.stride[i] - g_.pad[i] + k * g_.dilation[i];
    return v < 0 || v >= g_.in[i] ? -1 : v;
  }

  // A window row (from input column iw0) inside the input that takes every channel of adjacent
  // NDHWC pixels is one run: one copy, not KW copies of a few channels.
  bool IsRun(int64_t cn, int64_t iw0) const {
    return g_.xs[4] == 1 && cn == g_.c && g_.dilation[2] == 1 && iw0 >= 0 && iw0 + g_.k[2] <= g_.in[2];
  }
  static void AddFloats(float* d, const float* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  }

  // im2col rows [taps, cn] of positions [p0, p1) from input channels [c0, c0 + cn).
  void Im2Col(const float* x, int64_t p0, int64_t p1, int64_t c0, int64_t cn, float* cols) const {
    const int64_t cs = g_.xs[4], kw_floats = g_.k[2] * cn;
    int64_t o[3], n = p0;   // position p = (n, o[0], o[1], o[2]), stepped below
    for (int i = 2; i >= 0; --i) o[i] = n % g_.out[i], n /= g_.out[i];
    for (int64_t p = p0; p < p1; ++p) {
      const float* xn = x + n * g_.xs[0] + c0 * cs;
      float* dst = cols + (p - p0) * kkc();
      const int64_t iw0 = InputAt(2, o[2], 0);
      const bool run = IsRun(cn, iw0);
      for (int64_t kd = 0; kd < g_.k[0]; ++kd) {
        const int64_t id = InputAt(0, o[0], kd);
        for (int64_t kh = 0; kh < g_.k[1]; ++kh) {
          const int64_t ih = id < 0 ? -1 : InputAt(1, o[1], kh);
          if (run && ih >= 0) {
            CopyFloats(dst, xn + id * g_.xs[1] + ih * g_.xs[2] + iw0 * g_.xs[3], kw_floats);
            dst += kw_floats;
            continue;
          }
          for (int64_t kw = 0; kw < g_.k[2]; ++kw, dst += cn) {
            const int64_t iw = ih < 0 ? -1 : InputAt(2, o[2], kw);
            if (iw < 0) { std::fill(dst, dst + cn, 0.f); continue; }
            const float* src = xn + id * g_.xs[1] + ih * g_.xs[2] + iw * g_.xs[3];
            if (cs == 1) CopyFloats(dst, src, cn);
            else for (int64_t c = 0; c < cn; ++c) dst[c] = src[c * cs];
          }
        }
      }
      if (++o[2] == g_.out[2] && (o[2] = 0, ++o[1] == g_.out[1]) && (o[1] = 0, ++o[0] == g_.out[0]))
        o[0] = 0, ++n;
    }
  }

  // Adds im2col rows [taps, cn] of positions [p0, p1) back into input channels [c0, c0 + cn)
  // of dx, input plane by input plane (n, id) in parallel: each plane gathers what its taps
  // received, so no two ranges write the same element.
  void Col2ImAdd(const float* cols, int64_t p0, int64_t p1, int64_t c0, int64_t cn, float* dx) const {
    const int64_t cs = g_.xs[4], plane = g_.out[1] * g_.out[2], per_n = g_.out[0] * plane;
    const int64_t n0 = p0 / per_n, n1 = (p1 - 1) / per_n + 1;
    ParallelFor((n1 - n0) * g_.in[0], 2 * (p1 - p0) * kkc() / g_.in[0], [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t n = n0 + s / g_.in[0], id = s % g_.in[0];
        float* dxp = dx + n * g_.xs[0] + id * g_.xs[1] + c0 * cs;
        for (int64_t kd = 0; kd < g_.k[0]; ++kd) {
          const int64_t at = id + g_.pad[0] - kd * g_.dilation[0];
          if (at < 0 || at % g_.stride[0] != 0 || at / g_.stride[0] >= g_.out[0]) continue;
          const int64_t first = n * per_n + at / g_.stride[0] * plane;   // output plane od
          const int64_t r0 = std::max(p0, first);
          for (int64_t p = r0, oh = (r0 - first) / g_.out[2], ow = (r0 - first) % g_.out[2];
               p < std::min(p1, first + plane); ++p, ow = ow + 1 == g_.out[2] ? (++oh, 0) : ow + 1) {
            const float* src = cols + ((p - p0) * g_.taps() + kd * g_.k[1] * g_.k[2]) * cn;
            const int64_t iw0 = InputAt(2, ow, 0);
            const bool run = IsRun(cn, iw0);
            for (int64_t kh = 0; kh < g_.k[1]; ++kh) {
              const int64_t ih = InputAt(1, oh, kh);
              if (run) {
                if (ih >= 0) AddFloats(dxp + ih * g_.xs[2] + iw0 * g_.xs[3], src, g_.k[2] * cn);
                src += g_.k[2] * cn;
                continue;
              }
              for (int64_t kw = 0; kw < g_.k[2]; ++kw, src += cn) {
                const int64_t iw = ih < 0 ? -1 : InputAt(2, ow, kw);
                if (iw < 0) continue;
                float* d = dxp + ih * g_.xs[2] + iw * g_.xs[3];
                if (cs == 1) AddFloats(d, src, cn);
                else for (int64_t c = 0; c < cn; ++c) d[c * cs] += src[c];
              }
            }
          }
        }
      }
    });
  }

  // Output channels [c0, c0 + cn) of positions [p0, p1) as a [p1 - p0, cn] matrix and back.
  void ToRows(const float* y, int64_t p0, int64_t p1, int64_t c0, int64_t cn, float* mat) const {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t c = 0; c < cn; ++c) mat[(p - p0) * cn + c] = y[g_.OutAt(p) + (c0 + c) * g_.ys[4]];
  }
  void FromRows(const float* mat, int64_t p0, int64_t p1, int64_t c0, int64_t cn, float* y) const {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t c = 0; c < cn; ++c) y[g_.OutAt(p) + (c0 + c) * g_.ys[4]] = mat[(p - p0) * cn + c];
  }

  void Forward(const KernelArgs& args) const {
    FloatIn x(dtype_, args.in(0), x_size()), f(dtype_, args.in(1), kkc() * g_.co);
    FloatOut y(dtype_, args.out(0), y_size());
    // Each group's filter columns transposed, [og, kkc]: for blocks of up to max(64, K/4) rows
    // and K >= 128 Gemm takes dot products along K (gemm.cc's UseDot), without packing the
    // im2col rows as its GEMM would (measured 5.6 -> 5.1 ms on a 3x3x3, 8 -> 8 channel Conv3D).
    std::vector<float> wt(g_.co * kkc());
    for (int64_t k = 0; k < kkc(); ++k)
      for (int64_t o = 0; o < g_.co; ++o) wt[o * kkc() + k] = f.data()[k * g_.co + o];
    const int64_t P = g_.positions(), dot_rows = std::max<int64_t>(64, kkc() / 4);
    const int64_t rows = kkc() >= 128 ? std::min(Rows(P), dot_rows) : Rows(P);
    const int64_t blocks = (P + rows - 1) / rows;
    ParallelFor(blocks, 2 * rows * kkc() * g_.co, [&](int64_t b0, int64_t b1) {
      float* cols = Scratch(kScratchCols, rows * kkc());
      float* part = Scratch(kScratchGroup, dense_rows() ? 0 : rows * og());
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t p0 = b * rows, p1 = std::min(P, p0 + rows);
        for (int64_t gi = 0; gi < groups_; ++gi) {
          Im2Col(x.data(), p0, p1, gi * cg(), cg(), cols);
          float* out = dense_rows() ? y.data() + p0 * g_.co : part;
          Gemm(p1 - p0, og(), kkc(), cols, false, wt.data() + gi * og() * kkc(), true, out);
          if (!dense_rows()) FromRows(part, p0, p1, gi * og(), og(), y.data());
        }
      }
    });
    y.Finish();
  }

  // dx = col2im(dy x W^T) per group and block: blocks of an image in turn (their windows
  // overlap in dx), images in parallel when there are enough of them; otherwise the GEMM and
  // col2im run parallel inside.
  void BackpropInput(const KernelArgs& args) const {
    FloatIn f(dtype_, args.in(0), kkc() * g_.co), dy(dtype_, args.in(1), y_size());
    FloatOut dx(dtype_, args.out(0), x_size());
    const std::vector<std::vector<float>> wg = GroupFilters(f.data());
    const int64_t per_n = g_.out[0] * g_.out[1] * g_.out[2];
    const int64_t rows = std::min(std::max<int64_t>(32, kColsBlockFloats / kkc()), per_n);
    const auto images = [&](int64_t n0, int64_t n1) {
      float* cols = Scratch(kScratchCols, rows * kkc());
      float* dyg = Scratch(kScratchGroup, dense_rows() ? 0 : rows * og());
      for (int64_t n = n0; n < n1; ++n) {
        std::fill(dx.data() + n * g_.xs[0], dx.data() + (n + 1) * g_.xs[0], 0.f);
        for (int64_t p0 = n * per_n; p0 < (n + 1) * per_n; p0 += rows) {
          const int64_t p1 = std::min((n + 1) * per_n, p0 + rows);
          for (int64_t gi = 0; gi < groups_; ++gi) {
            const float* d = dy.data() + p0 * g_.co;
            if (!dense_rows()) ToRows(dy.data(), p0, p1, gi * og(), og(), dyg), d = dyg;
            Gemm(p1 - p0, kkc(), og(), d, false, groups_ > 1 ? wg[gi].data() : f.data(), true, cols);
            Col2ImAdd(cols, p0, p1, gi * cg(), cg(), dx.data());
          }
        }
      }
    };
    if (g_.n >= PlanThreads()) ParallelFor(g_.n, 2 * per_n * kkc() * g_.co, images);
    else images(0, g_.n);
    dx.Finish();
  }

  // dW^T = sum over position blocks of dy^T x im2col(x), per group; one partial sum per part
  // (groups one after another, each [kkc, og]), added in order.
  void BackpropFilter(const KernelArgs& args) const {
    FloatIn x(dtype_, args.in(0), x_size()), dy(dtype_, args.in(1), y_size());
    FloatOut dw(dtype_, args.out(0), kkc() * g_.co);
    const int64_t P = g_.positions(), rows = Rows(P), blocks = (P + rows - 1) / rows;
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(PlanThreads(), blocks));
    std::vector<std::vector<float>> partial(parts);
    ParallelFor(parts, 2 * P * kkc() * g_.co / parts, [&](int64_t q0, int64_t q1) {
      float* cols = Scratch(kScratchCols, rows * kkc());
      float* dyg = Scratch(kScratchGroup, dense_rows() ? 0 : rows * og());
      for (int64_t q = q0; q < q1; ++q) {
        partial[q].assign(kkc() * g_.co, 0.f);
        for (int64_t b = blocks * q / parts; b < blocks * (q + 1) / parts; ++b) {
          const int64_t p0 = b * rows, p1 = std::min(P, p0 + rows);
          for (int64_t gi = 0; gi < groups_; ++gi) {
            Im2Col(x.data(), p0, p1, gi * cg(), cg(), cols);
            const float* d = dy.data() + p0 * g_.co;
            if (!dense_rows()) ToRows(dy.data(), p0, p1, gi * og(), og(), dyg), d = dyg;
            Gemm(og(), kkc(), p1 - p0, d, true, cols, false, partial[q].data() + gi * kkc() * og(), true);
          }
        }
      }
    });
    // Group gi's sum, transposed ([og, kkc]: the GEMM then reads the im2col rows as they are,
    // without packing them transposed), is columns [gi * og, (gi + 1) * og) of dW [kkc, CO].
    float* out = dw.data();
    std::fill(out, out + kkc() * g_.co, 0.f);
    for (const auto& p : partial)
      for (int64_t k = 0; k < kkc(); ++k)
        for (int64_t o = 0; o < g_.co; ++o) out[k * g_.co + o] += p[o * kkc() + k];
    dw.Finish();
  }

  Conv3DKind kind_;
  Window3D g_;
  int64_t groups_;
  int dtype_;
};

Status MakeConv3D(const KernelDef& def, Conv3DKind kind, std::unique_ptr<Kernel>* out) {
  NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  NPU_RETURN_IF_ERROR(CheckFloatStorage(def));
  Dims x, f, y;
  switch (kind) {
    case Conv3DKind::kForward:
      x = def.inputs[0].dims, f = def.inputs[1].dims, y = def.outputs[0].dims;
      break;
    case Conv3DKind::kBackpropInput:
      NPU_RETURN_IF_ERROR(def.attrs.IntList("input_sizes", &x));
      if (x != def.outputs[0].dims) return Error("input_sizes ", ShapeString(x), " differ from the output shape");
      f = def.inputs[0].dims, y = def.inputs[1].dims;
      break;
    case Conv3DKind::kBackpropFilter:
      NPU_RETURN_IF_ERROR(def.attrs.IntList("filter_sizes", &f));
      if (f != def.outputs[0].dims) return Error("filter_sizes ", ShapeString(f), " differ from the output shape");
      x = def.inputs[0].dims, y = def.inputs[1].dims;
      break;
  }
  Window3D g;
  int64_t groups = 1;
  NPU_RETURN_IF_ERROR(MakeGeometry(def, x, f, y, &g, &groups));
  *out = std::make_unique<Conv3DKernel>(kind, g, groups, def.outputs[0].dtype);
  return Status::Ok();
}

NPU_REGISTER_KERNEL("Conv3D", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv3D(d, Conv3DKind::kForward, k);
});
NPU_REGISTER_KERNEL("Conv3DBackpropInputV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv3D(d, Conv3DKind::kBackpropInput, k);
});
NPU_REGISTER_KERNEL("Conv3DBackpropFilterV2", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return MakeConv3D(d, Conv3DKind::kBackpropFilter, k);
});

}  // namespace
}  // namespace kernels
}  // namespace npu
