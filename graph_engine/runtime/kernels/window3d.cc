#include "kernels/window3d.h"

#include <algorithm>
#include <string>
#include <vector>

namespace npu {
namespace kernels {
namespace {

// Strides of (n, d, h, w, c) for spatial sizes dhw and c channels in the layout.
void LayoutStrides(bool ncdhw, const int64_t* dhw, int64_t c, int64_t* s) {
  if (ncdhw) {
    s[3] = 1; s[2] = dhw[2]; s[1] = dhw[1] * dhw[2]; s[4] = dhw[0] * s[1]; s[0] = c * s[4];
  } else {
    s[4] = 1; s[3] = c; s[2] = dhw[2] * c; s[1] = dhw[1] * s[2]; s[0] = dhw[0] * s[1];
  }
}

}  // namespace

Status MakeWindow3D(const KernelDef& def, const Dims& x, const int64_t window[3], int64_t co,
                    const Dims& y, Window3D* g) {
  std::string fmt, padding;
  std::vector<int64_t> strides, dilations;
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NDHWC", &fmt));
  NPU_RETURN_IF_ERROR(def.attrs.String("padding", &padding));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("strides", &strides));
  NPU_RETURN_IF_ERROR(def.attrs.IntList("dilations", {1, 1, 1, 1, 1}, &dilations));
  if (fmt != "NDHWC" && fmt != "NCDHW")
    return Error("data_format '", fmt, "' not supported; allowed: NDHWC, NCDHW");
  if (padding != "SAME" && padding != "VALID")
    return Error("padding '", padding, "' not supported; allowed: SAME, VALID");
  if (strides.size() != 5 || dilations.size() != 5)
    return Error("strides and dilations must have 5 entries");
  if (x.size() != 5 || y.size() != 5)
    return Error("input and output must be 5-D, got ", ShapeString(x), " and ", ShapeString(y));
  const bool ncdhw = fmt == "NCDHW";
  const int sp = ncdhw ? 2 : 1;   // first spatial axis in the layout
  g->n = x[0];
  g->c = ncdhw ? x[1] : x[4];
  g->co = co;
  for (int i = 0; i < 3; ++i) {
    g->in[i] = x[sp + i];
    g->k[i] = window[i];
    g->stride[i] = strides[sp + i];
    g->dilation[i] = dilations[sp + i];
    if (g->stride[i] < 1 || g->dilation[i] < 1 || g->k[i] < 1)
      return Error("window sizes, strides and dilations must be positive");
    const int64_t span = (g->k[i] - 1) * g->dilation[i] + 1;
    int64_t total = 0;
    if (padding == "SAME")
      total = std::max<int64_t>(((g->in[i] + g->stride[i] - 1) / g->stride[i] - 1) * g->stride[i] + span - g->in[i], 0);
    g->pad[i] = total / 2;
    g->out[i] = (g->in[i] + total - span) / g->stride[i] + 1;
    if (g->out[i] <= 0) return Error("window ", g->k[i], " does not fit input size ", g->in[i]);
  }
  const Dims want = ncdhw ? Dims{g->n, g->co, g->out[0], g->out[1], g->out[2]}
                          : Dims{g->n, g->out[0], g->out[1], g->out[2], g->co};
  if (y != want) return Error("the output is ", ShapeString(want), ", got ", ShapeString(y));
  LayoutStrides(ncdhw, g->in, g->c, g->xs);
  LayoutStrides(ncdhw, g->out, g->co, g->ys);
  return Status::Ok();
}

}  // namespace kernels
}  // namespace npu
