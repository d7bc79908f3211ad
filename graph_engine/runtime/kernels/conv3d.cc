// Conv3D and its gradients (reference: graph_engine/ops/conv3d.py), NDHWC or NCDHW, DHWIO
// filters, float32 compute with float16/bfloat16 storage.
//
// Tap by tap: for each filter position (kd, kh, kw) the input pixels it meets for all P
// output positions are gathered into a [P, in] matrix (zeros in the padding), and one GEMM
// with that tap's [in, out] filter slice accumulates the output ([P, out]), the input
// gradient (scattered back) or the filter gradient of that tap. A grouped convolution (filter
// in-depth C/G) does that per group, with the group's channels and filter columns packed dense.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/gemm.h"
#include "kernels/window3d.h"

namespace npu {
namespace kernels {
namespace {

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
    // Per group: its C/G input channels, CO/G output channels, and the [C/G, CO/G] columns of
    // each tap's filter slice (the filter itself when there is one group).
    const int64_t P = g_.positions(), C = g_.c / groups_, CO = g_.co / groups_;
    const int64_t x_size = g_.n * g_.in[0] * g_.in[1] * g_.in[2] * g_.c, y_size = P * g_.co;
    const int64_t f_size = g_.taps() * C * g_.co;
    std::vector<float> rows(P * C), ymat(P * CO), fpart(groups_ > 1 ? C * CO : 0);
    const auto filter_part = [&](const float* f, int64_t t, int64_t grp) {
      const float* tap = f + t * C * g_.co;
      if (groups_ == 1) return tap;
      for (int64_t c = 0; c < C; ++c)
        std::copy_n(tap + c * g_.co + grp * CO, CO, fpart.data() + c * CO);
      return static_cast<const float*>(fpart.data());
    };
    if (kind_ == Conv3DKind::kForward) {
      FloatIn x(dtype_, args.in(0), x_size), f(dtype_, args.in(1), f_size);
      FloatOut y(dtype_, args.out(0), y_size);
      for (int64_t grp = 0; grp < groups_; ++grp) {
        std::fill(ymat.begin(), ymat.end(), 0.f);
        for (int64_t t = 0; t < g_.taps(); ++t) {
          GatherTap(t, grp * C, C, x.data(), rows.data());
          Gemm(P, CO, C, rows.data(), false, filter_part(f.data(), t, grp), false, ymat.data(), true);
        }
        FromRows(ymat.data(), grp * CO, CO, y.data());
      }
      y.Finish();
      return Status::Ok();
    }
    FloatIn dy(dtype_, args.in(1), y_size);
    if (kind_ == Conv3DKind::kBackpropInput) {
      FloatIn f(dtype_, args.in(0), f_size);
      FloatOut dx(dtype_, args.out(0), x_size);
      std::fill(dx.data(), dx.data() + x_size, 0.f);
      for (int64_t grp = 0; grp < groups_; ++grp) {
        ToRows(dy.data(), grp * CO, CO, ymat.data());
        for (int64_t t = 0; t < g_.taps(); ++t) {
          Gemm(P, C, CO, ymat.data(), false, filter_part(f.data(), t, grp), true, rows.data());
          ScatterTap(t, grp * C, C, rows.data(), dx.data());
        }
      }
      dx.Finish();
    } else {
      FloatIn x(dtype_, args.in(0), x_size);
      FloatOut df(dtype_, args.out(0), f_size);
      std::vector<float> part(groups_ > 1 ? C * CO : 0);
      for (int64_t grp = 0; grp < groups_; ++grp) {
        ToRows(dy.data(), grp * CO, CO, ymat.data());
        for (int64_t t = 0; t < g_.taps(); ++t) {
          GatherTap(t, grp * C, C, x.data(), rows.data());
          float* tap = df.data() + t * C * g_.co;
          Gemm(C, CO, P, rows.data(), true, ymat.data(), false, groups_ == 1 ? tap : part.data());
          for (int64_t c = 0; groups_ > 1 && c < C; ++c)
            std::copy_n(part.data() + c * CO, CO, tap + c * g_.co + grp * CO);
        }
      }
      df.Finish();
    }
    return Status::Ok();
  }

 private:
  // Channels [c0, c0 + cn) of the input pixels tap t meets, as [P, cn] rows.
  void GatherTap(int64_t t, int64_t c0, int64_t cn, const float* x, float* rows) const {
    const int64_t cs = g_.xs[4];
    ParallelFor(g_.positions(), cn, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t at = g_.TapAt(p, t);
        float* r = rows + p * cn;
        for (int64_t c = 0; c < cn; ++c) r[c] = at < 0 ? 0.f : x[at + (c0 + c) * cs];
      }
    });
  }

  // Sequential: windows of different output positions may overlap in the input.
  void ScatterTap(int64_t t, int64_t c0, int64_t cn, const float* rows, float* dx) const {
    const int64_t cs = g_.xs[4];
    for (int64_t p = 0; p < g_.positions(); ++p) {
      const int64_t at = g_.TapAt(p, t);
      if (at < 0) continue;
      const float* r = rows + p * cn;
      for (int64_t c = 0; c < cn; ++c) dx[at + (c0 + c) * cs] += r[c];
    }
  }

  // Output channels [c0, c0 + cn) as a [P, cn] matrix and back (for NDHWC and one group, a
  // plain copy).
  void ToRows(const float* y, int64_t c0, int64_t cn, float* mat) const {
    ParallelFor(g_.positions(), cn, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t c = 0; c < cn; ++c) mat[p * cn + c] = y[g_.OutAt(p) + (c0 + c) * g_.ys[4]];
    });
  }
  void FromRows(const float* mat, int64_t c0, int64_t cn, float* y) const {
    ParallelFor(g_.positions(), cn, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t c = 0; c < cn; ++c) y[g_.OutAt(p) + (c0 + c) * g_.ys[4]] = mat[p * cn + c];
    });
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
