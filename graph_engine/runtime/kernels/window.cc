#include "kernels/window.h"

namespace npu {
namespace kernels {
namespace {

// The H and W entries of a 4-element per-axis list; the batch and channel entries must be
// `neutral` (TF rejects strides, dilations or windows across them too).
Status SpatialPair(const Attrs& attrs, const char* name, bool nchw, int64_t neutral,
                   bool required, int64_t* h, int64_t* w) {
  std::vector<int64_t> v;
  if (!required && !attrs.Has(name)) {
    *h = *w = neutral;
    return Status::Ok();
  }
  NPU_RETURN_IF_ERROR(attrs.IntList(name, &v));
  if (v.size() != 4) return Error("attribute '", name, "' needs 4 entries, got ", v.size());
  const int ih = nchw ? 2 : 1, iw = nchw ? 3 : 2, ic = nchw ? 1 : 3;
  if (v[0] != neutral || v[ic] != neutral)
    return Error("attribute '", name, "' must be ", neutral, " on the batch and channel axes");
  if (v[ih] < 1 || v[iw] < 1) return Error("attribute '", name, "' must be positive");
  *h = v[ih];
  *w = v[iw];
  return Status::Ok();
}

// One spatial axis: output size and padding before, as TF computes them.
Status Axis(const std::string& padding, int64_t in, int64_t k, int64_t stride, int64_t dilation,
            int64_t explicit_before, int64_t explicit_after, int64_t* out, int64_t* before) {
  const int64_t eff = (k - 1) * dilation + 1;
  if (padding == "VALID") {
    *out = in >= eff ? (in - eff) / stride + 1 : 0;
    *before = 0;
  } else if (padding == "SAME") {
    *out = (in + stride - 1) / stride;
    *before = std::max<int64_t>((*out - 1) * stride + eff - in, 0) / 2;
  } else {
    const int64_t padded = in + explicit_before + explicit_after;
    *out = padded >= eff ? (padded - eff) / stride + 1 : 0;
    *before = explicit_before;
  }
  if (*out <= 0 && in > 0) return Error("window of ", eff, " does not fit an input of ", in);
  return Status::Ok();
}

}  // namespace

Status MakeWindow2D(const Attrs& attrs, const Dims& input, int64_t kh, int64_t kw, bool dilations,
                    Window2D* w) {
  std::string format, padding;
  NPU_RETURN_IF_ERROR(attrs.String("data_format", "NHWC", &format));
  if (format != "NHWC" && format != "NCHW")
    return Error("data_format '", format, "' is not supported; allowed: NHWC, NCHW");
  if (input.size() != 4) return Error("input must have rank 4, got ", ShapeString(input));
  w->nchw = format == "NCHW";
  w->n = input[0];
  w->h = input[w->nchw ? 2 : 1];
  w->w = input[w->nchw ? 3 : 2];
  w->c = input[w->nchw ? 1 : 3];
  w->kh = kh;
  w->kw = kw;
  NPU_RETURN_IF_ERROR(SpatialPair(attrs, "strides", w->nchw, 1, true, &w->sh, &w->sw));
  if (dilations) NPU_RETURN_IF_ERROR(SpatialPair(attrs, "dilations", w->nchw, 1, false, &w->dh, &w->dw));
  NPU_RETURN_IF_ERROR(attrs.String("padding", &padding));
  std::vector<int64_t> pads(8, 0);
  if (padding == "EXPLICIT") {
    NPU_RETURN_IF_ERROR(attrs.IntList("explicit_paddings", &pads));
    if (pads.size() != 8) return Error("explicit_paddings needs 8 entries, got ", pads.size());
    for (int64_t p : pads)
      if (p < 0) return Error("explicit_paddings must not be negative");
  } else if (padding != "SAME" && padding != "VALID") {
    return Error("padding '", padding, "' is not supported; allowed: SAME, VALID, EXPLICIT");
  }
  const int ih = w->nchw ? 2 : 1, iw = w->nchw ? 3 : 2;
  int64_t pad_top, pad_left;
  NPU_RETURN_IF_ERROR(Axis(padding, w->h, kh, w->sh, w->dh, pads[2 * ih], pads[2 * ih + 1], &w->oh, &pad_top));
  NPU_RETURN_IF_ERROR(Axis(padding, w->w, kw, w->sw, w->dw, pads[2 * iw], pads[2 * iw + 1], &w->ow, &pad_left));
  w->pad_top = pad_top;
  w->pad_left = pad_left;
  return Status::Ok();
}

Status PoolWindowSize(const Attrs& attrs, int64_t* kh, int64_t* kw) {
  std::string format;
  NPU_RETURN_IF_ERROR(attrs.String("data_format", "NHWC", &format));
  return SpatialPair(attrs, "ksize", format == "NCHW", 1, true, kh, kw);
}

Status CheckShape(const char* what, const Dims& actual, const Dims& expected) {
  if (actual != expected)
    return Error(what, " has shape ", ShapeString(actual), "; expected ", ShapeString(expected));
  return Status::Ok();
}

}  // namespace kernels
}  // namespace npu
