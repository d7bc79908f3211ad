#include "kernels/format.h"

namespace npu {
namespace kernels {

std::string FormatName(int format) {
  static const char* kNames[] = {"ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "FILTER_KN"};
  return format >= 0 && format <= kLastFormat ? kNames[format] : "Format(" + std::to_string(format) + ")";
}

Status Nc1hwc0::Of(const TensorDesc& d, Nc1hwc0* out) {
  if (d.format != kNC1HWC0) return Error("is stored ", FormatName(d.format), ", expected NC1HWC0");
  if (d.dims.size() > 4) return Error("NC1HWC0 holds values of rank <= 4, got ", ShapeString(d.dims));
  int64_t nhwc[4] = {1, 1, 1, 1};
  for (size_t i = 0; i < d.dims.size(); ++i) nhwc[4 - d.dims.size() + i] = d.dims[i];
  Nc1hwc0 g;
  g.n = nhwc[0]; g.h = nhwc[1]; g.w = nhwc[2]; g.c = nhwc[3];
  g.c0 = C0Of(d.dtype);
  g.c1 = CeilDiv(g.c, g.c0);
  *out = g;
  return Status::Ok();
}

Dims StorageDims(const TensorDesc& d) {
  const int64_t c0 = C0Of(d.dtype);
  if (d.format == kNC1HWC0) {
    Nc1hwc0 g;
    if (Nc1hwc0::Of(d, &g).ok()) return {g.n, g.c1, g.h, g.w, g.c0};
  } else if (d.format == kFractalZ && d.dims.size() == 4) {
    return {CeilDiv(d.dims[2], c0) * d.dims[0] * d.dims[1], CeilDiv(d.dims[3], kN0), kN0, c0};
  } else if (d.format == kFilterKN && d.dims.size() == 4) {
    return {d.dims[0] * d.dims[1] * d.dims[2], CeilDiv(d.dims[3], kN0) * kN0};
  }
  return d.dims;
}

bool HasPaddedFormat(const KernelDef& def) {
  for (const auto& d : def.inputs) if (IsPaddedFormat(d.format)) return true;
  for (const auto& d : def.outputs) if (IsPaddedFormat(d.format)) return true;
  return false;
}

}  // namespace kernels
}  // namespace npu
