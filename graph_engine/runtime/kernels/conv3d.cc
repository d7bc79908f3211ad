// Conv3D and its gradients (reference: graph_engine/ops/conv3d.py), NDHWC or NCDHW, DHWIO
// filters, float32 compute with float16/bfloat16 storage.
//
// Tap by tap: for each filter position (kd, kh, kw) the input pixels it meets for all P
// output positions are gathered into a [P, in] matrix (zeros in the padding), and one GEMM
// with that tap's [in, out] filter slice accumulates the output ([P, out]), the input
// gradient (scattered back) or the filter gradient of that tap.
#include <string>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/gemm.h"
#include "kernels/window3d.h"

namespace npu {
namespace kernels {
namespace {

enum class Conv3DKind { kForward, kBackpropInput, kBackpropFilter };

// Checks the filter (DHWIO, its in-channels the input's) and builds the geometry.
Status MakeGeometry(const KernelDef& def, const Dims& x, const Dims& f, const Dims& y, Window3D* g) {
  if (f.size() != 5) return Error("filter must be 5-D [d, h, w, in, out], got ", ShapeString(f));
  NPU_RETURN_IF_ERROR(MakeWindow3D(def, x, f.data(), f[4], y, g));
  if (f[3] != g->c)
    return Error("input has ", g->c, " channels but the filter expects ", f[3],
                 " (grouped convolution is not supported)");
  return Status::Ok();
}

class Conv3DKernel : public Kernel {
 public:
  Conv3DKernel(Conv3DKind kind, Window3D g, int dtype) : kind_(kind), g_(g), dtype_(dtype) {}

  Status Compute(const KernelArgs& args) const override {
    const int64_t P = g_.positions(), C = g_.c, CO = g_.co;
    const int64_t x_size = g_.n * g_.in[0] * g_.in[1] * g_.in[2] * C, y_size = P * CO;
    const int64_t f_size = g_.taps() * C * CO;
    std::vector<float> rows(P * C), ymat;
    if (kind_ == Conv3DKind::kForward) {
      FloatIn x(dtype_, args.in(0), x_size), f(dtype_, args.in(1), f_size);
      ymat.assign(P * CO, 0.f);
      for (int64_t t = 0; t < g_.taps(); ++t) {
        GatherTap(t, x.data(), rows.data());
        Gemm(P, CO, C, rows.data(), false, f.data() + t * C * CO, false, ymat.data(), true);
      }
      FloatOut y(dtype_, args.out(0), y_size);
      FromRows(ymat.data(), y.data());
      y.Finish();
      return Status::Ok();
    }
    FloatIn dy_in(dtype_, args.in(1), y_size);
    ymat.resize(P * CO);
    ToRows(dy_in.data(), ymat.data());
    if (kind_ == Conv3DKind::kBackpropInput) {
      FloatIn f(dtype_, args.in(0), f_size);
      FloatOut dx(dtype_, args.out(0), x_size);
      std::fill(dx.data(), dx.data() + x_size, 0.f);
      for (int64_t t = 0; t < g_.taps(); ++t) {
        Gemm(P, C, CO, ymat.data(), false, f.data() + t * C * CO, true, rows.data());
        ScatterTap(t, rows.data(), dx.data());
      }
      dx.Finish();
    } else {
      FloatIn x(dtype_, args.in(0), x_size);
      FloatOut df(dtype_, args.out(0), f_size);
      for (int64_t t = 0; t < g_.taps(); ++t) {
        GatherTap(t, x.data(), rows.data());
        Gemm(C, CO, P, rows.data(), true, ymat.data(), false, df.data() + t * C * CO);
      }
      df.Finish();
    }
    return Status::Ok();
  }

 private:
  void GatherTap(int64_t t, const float* x, float* rows) const {
    const int64_t C = g_.c, cs = g_.xs[4];
    ParallelFor(g_.positions(), C, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t at = g_.TapAt(p, t);
        float* r = rows + p * C;
        for (int64_t c = 0; c < C; ++c) r[c] = at < 0 ? 0.f : x[at + c * cs];
      }
    });
  }

  // Sequential: windows of different output positions may overlap in the input.
  void ScatterTap(int64_t t, const float* rows, float* dx) const {
    const int64_t C = g_.c, cs = g_.xs[4];
    for (int64_t p = 0; p < g_.positions(); ++p) {
      const int64_t at = g_.TapAt(p, t);
      if (at < 0) continue;
      const float* r = rows + p * C;
      for (int64_t c = 0; c < C; ++c) dx[at + c * cs] += r[c];
    }
  }

  // The [P, out] matrix from/to the output layout (a plain copy for NDHWC).
  void ToRows(const float* y, float* mat) const {
    ParallelFor(g_.positions(), g_.co, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t c = 0; c < g_.co; ++c) mat[p * g_.co + c] = y[g_.OutAt(p) + c * g_.ys[4]];
    });
  }
  void FromRows(const float* mat, float* y) const {
    ParallelFor(g_.positions(), g_.co, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t c = 0; c < g_.co; ++c) y[g_.OutAt(p) + c * g_.ys[4]] = mat[p * g_.co + c];
    });
  }

  Conv3DKind kind_;
  Window3D g_;
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
  NPU_RETURN_IF_ERROR(MakeGeometry(def, x, f, y, &g));
  *out = std::make_unique<Conv3DKernel>(kind, g, def.outputs[0].dtype);
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
