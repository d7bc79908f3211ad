// MaxPool3D/AvgPool3D, their gradients and MaxPool3DGradGrad (reference:
// graph_engine/ops/pool3d.py), float32 compute over float32/float16/bfloat16 storage.
//
// Channels are the innermost loop (NCDHW is pooled as NDHWC with batch N*C and one channel:
// each (n, c) volume is contiguous there). The forward kinds run in parallel over output rows
// (n, od, oh); the gradients gather instead of scatter: each input element adds up, in output
// order, the outputs whose windows hold it, so input rows run in parallel without races and
// every sum has the order a sequential scatter would give it.
#include <cmath>
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/window3d.h"

namespace npu {
namespace kernels {
namespace {

enum class Pool3DKind { kMax, kAvg, kMaxGrad, kAvgGrad, kMaxGradGrad };

class Pool3DKernel : public Kernel {
 public:
  Pool3DKernel(Pool3DKind kind, Window3D g, std::vector<int> in_dtypes, int out_dtype)
      : kind_(kind), g_(g), in_dtypes_(std::move(in_dtypes)), out_dtype_(out_dtype) {
    x_size_ = g_.n * g_.in[0] * g_.in[1] * g_.in[2] * g_.c;
    y_size_ = g_.positions() * g_.c;
    if (g_.xs[4] != 1) {   // NCDHW: volume (n, c) is image n * C + c of one channel
      g_.xs[0] = g_.xs[4], g_.ys[0] = g_.ys[4], g_.n *= g_.c;
      g_.c = g_.co = g_.xs[4] = g_.ys[4] = 1;
    }
    for (int i = 0; i < 3; ++i) {
      holders_[i].resize(g_.in[i]);
      count_[i].assign(g_.out[i], 0);
      for (int64_t o = 0; o < g_.out[i]; ++o)
        for (int64_t k = 0; k < g_.k[i]; ++k) {
          const int64_t v = o * g_.stride[i] - g_.pad[i] + k * g_.dilation[i];
          if (v < 0 || v >= g_.in[i]) continue;
          holders_[i][v].push_back(o);
          ++count_[i][o];
        }
    }
  }

  Status Compute(const KernelArgs& args) const override {
    // Inputs: forward x; MaxGrad (x, y, dy); AvgGrad dy; MaxGradGrad (x, y, ddx).
    std::vector<FloatIn> in;
    in.reserve(in_dtypes_.size());   // FloatIn may point into itself: no reallocation
    for (size_t i = 0; i < in_dtypes_.size(); ++i) {
      const bool input_shaped = (i == 0 && kind_ != Pool3DKind::kAvgGrad) ||
                                (i == 2 && kind_ == Pool3DKind::kMaxGradGrad);
      in.emplace_back(in_dtypes_[i], args.in(static_cast<int>(i)), input_shaped ? x_size_ : y_size_);
    }
    const bool to_input = kind_ == Pool3DKind::kMaxGrad || kind_ == Pool3DKind::kAvgGrad;
    FloatOut out(out_dtype_, args.out(0), to_input ? x_size_ : y_size_);
    if (to_input) {
      ParallelFor(g_.n * g_.in[0] * g_.in[1], g_.in[2] * g_.taps() * g_.c, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) GradRow(r, in, out.data());
      });
    } else {
      ParallelFor(g_.n * g_.out[0] * g_.out[1], g_.out[2] * g_.taps() * g_.c, [&](int64_t r0, int64_t r1) {
        std::vector<float> acc(2 * g_.c);   // per channel: the value, found (MaxGradGrad)
        for (int64_t r = r0; r < r1; ++r) ForwardRow(r, in, acc.data(), out.data());
      });
    }
    out.Finish();
    return Status::Ok();
  }

 private:
  // Output row r = (n, od, oh): every ow, channels innermost, taps in (kd, kh, kw) order.
  void ForwardRow(int64_t r, const std::vector<FloatIn>& in, float* acc, float* out) const {
    const int64_t C = g_.c, oh = r % g_.out[1], od = r / g_.out[1] % g_.out[0];
    const int64_t n = r / (g_.out[1] * g_.out[0]);
    const float* x = in[0].data();
    float* found = acc + C;
    for (int64_t ow = 0; ow < g_.out[2]; ++ow) {
      const int64_t o = n * g_.ys[0] + od * g_.ys[1] + oh * g_.ys[2] + ow * g_.ys[3];
      const float* y = kind_ == Pool3DKind::kMaxGradGrad ? in[1].data() + o : nullptr;
      std::fill(acc, acc + C, kind_ == Pool3DKind::kMax ? -std::numeric_limits<float>::infinity() : 0.f);
      std::fill(found, found + C, 0.f);
      int64_t count = 0;
      for (int64_t kd = 0; kd < g_.k[0]; ++kd) {
        const int64_t id = od * g_.stride[0] - g_.pad[0] + kd * g_.dilation[0];
        if (id < 0 || id >= g_.in[0]) continue;
        for (int64_t kh = 0; kh < g_.k[1]; ++kh) {
          const int64_t ih = oh * g_.stride[1] - g_.pad[1] + kh * g_.dilation[1];
          if (ih < 0 || ih >= g_.in[1]) continue;
          for (int64_t kw = 0; kw < g_.k[2]; ++kw) {
            const int64_t iw = ow * g_.stride[2] - g_.pad[2] + kw * g_.dilation[2];
            if (iw < 0 || iw >= g_.in[2]) continue;
            const int64_t i = n * g_.xs[0] + id * g_.xs[1] + ih * g_.xs[2] + iw * g_.xs[3];
            const float* xi = x + i;
            ++count;
            switch (kind_) {
              case Pool3DKind::kMax:
                for (int64_t c = 0; c < C; ++c) acc[c] = std::max(acc[c], xi[c]);
                break;
              case Pool3DKind::kAvg:
                for (int64_t c = 0; c < C; ++c) acc[c] += xi[c];
                break;
              default: {   // MaxGradGrad: ddx at the first element equal to the pooled value
                const float* ddx = in[2].data() + i;
                for (int64_t c = 0; c < C; ++c)
                  if (found[c] == 0.f && xi[c] == y[c]) acc[c] = ddx[c], found[c] = 1.f;
              }
            }
          }
        }
      }
      if (kind_ == Pool3DKind::kAvg)   // in-range elements only, as TF
        for (int64_t c = 0; c < C; ++c) out[o + c] = acc[c] / static_cast<float>(count);
      else
        std::copy_n(acc, C, out + o);
    }
  }

  // Input row r = (n, id, ih) of MaxGrad/AvgGrad: each element sums the gradients of the
  // outputs whose windows hold it, in output order (od, oh, ow).
  void GradRow(int64_t r, const std::vector<FloatIn>& in, float* out) const {
    const int64_t C = g_.c, ih = r % g_.in[1], id = r / g_.in[1] % g_.in[0];
    const int64_t n = r / (g_.in[1] * g_.in[0]);
    const bool avg = kind_ == Pool3DKind::kAvgGrad;
    const float* dy = in[avg ? 0 : 2].data();
    for (int64_t iw = 0; iw < g_.in[2]; ++iw) {
      const int64_t i = n * g_.xs[0] + id * g_.xs[1] + ih * g_.xs[2] + iw * g_.xs[3];
      float* dx = out + i;
      std::fill(dx, dx + C, 0.f);
      for (int64_t od : holders_[0][id])
        for (int64_t oh : holders_[1][ih])
          for (int64_t ow : holders_[2][iw]) {
            const int64_t o = n * g_.ys[0] + od * g_.ys[1] + oh * g_.ys[2] + ow * g_.ys[3];
            const float* g = dy + o;
            if (avg) {
              const float count = static_cast<float>(count_[0][od] * count_[1][oh] * count_[2][ow]);
              for (int64_t c = 0; c < C; ++c) dx[c] += g[c] / count;
            } else {   // every element within 1e-5 of the pooled value, as TF's CPU
              const float *x = in[0].data() + i, *y = in[1].data() + o;
              for (int64_t c = 0; c < C; ++c)
                if (std::fabs(x[c] - y[c]) < 1e-5f) dx[c] += g[c];
            }
          }
    }
  }

  Pool3DKind kind_;
  Window3D g_;
  std::vector<int> in_dtypes_;
  int out_dtype_;
  int64_t x_size_, y_size_;
  // Per axis: the outputs whose window holds each input index (ascending), and each output's
  // in-range window elements.
  std::vector<std::vector<int64_t>> holders_[3];
  std::vector<int64_t> count_[3];
};

Status MakePool3D(const KernelDef& def, Pool3DKind kind, std::unique_ptr<Kernel>* out) {
  const bool three = kind == Pool3DKind::kMaxGrad || kind == Pool3DKind::kMaxGradGrad;
  NPU_RETURN_IF_ERROR(CheckArity(def, three ? 3 : 1, 1));
  NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
  std::vector<int> in_dtypes;
  for (const TensorDesc& d : def.inputs) in_dtypes.push_back(d.dtype);
  for (int t : in_dtypes)
    if (!IsFloatStorage(t) || !IsFloatStorage(def.outputs[0].dtype))
      return Error("does not support ", DTypeName(t), "; supported: float32, float16, bfloat16");
  std::vector<int64_t> ksize, x;
  std::string fmt;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("ksize", &ksize));
  NPU_RETURN_IF_ERROR(def.attrs.String("data_format", "NDHWC", &fmt));
  const int c = fmt == "NCDHW" ? 1 : 4, sp = fmt == "NCDHW" ? 2 : 1;
  std::vector<int64_t> strides;
  NPU_RETURN_IF_ERROR(def.attrs.IntList("strides", &strides));
  if (ksize.size() != 5 || strides.size() != 5 || ksize[0] != 1 || ksize[c] != 1 || strides[0] != 1 || strides[c] != 1)
    return Error("ksize and strides must be 5 entries that are 1 on the batch and channel dimensions");
  if (kind == Pool3DKind::kAvgGrad) NPU_RETURN_IF_ERROR(def.attrs.IntList("orig_input_shape", &x));
  else x = def.inputs[0].dims;
  if (x.size() != 5) return Error("input must be 5-D, got ", ShapeString(x));
  const bool to_input = kind == Pool3DKind::kMaxGrad || kind == Pool3DKind::kAvgGrad;
  const int pooled_arg = kind == Pool3DKind::kAvgGrad ? 0 : three ? 1 : -1;
  const Dims& pooled = pooled_arg >= 0 ? def.inputs[pooled_arg].dims : def.outputs[0].dims;
  Window3D g;
  NPU_RETURN_IF_ERROR(MakeWindow3D(def, x, ksize.data() + sp, x[c], pooled, &g));
  if (kind == Pool3DKind::kMaxGrad && def.inputs[2].dims != pooled)
    return Error("grad ", ShapeString(def.inputs[2].dims), " must have the pooled shape ", ShapeString(pooled));
  if (kind == Pool3DKind::kMaxGradGrad && def.inputs[2].dims != x)
    return Error("grad ", ShapeString(def.inputs[2].dims), " must have the input shape ", ShapeString(x));
  if (def.outputs[0].dims != (to_input ? x : pooled))
    return Error("output ", ShapeString(def.outputs[0].dims), " must be ", ShapeString(to_input ? x : pooled));
  *out = std::make_unique<Pool3DKernel>(kind, g, in_dtypes, def.outputs[0].dtype);
  return Status::Ok();
}

template <Pool3DKind kKind>
Status MakePool3DOf(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return MakePool3D(def, kKind, out);
}

NPU_REGISTER_KERNEL("MaxPool3D", MakePool3DOf<Pool3DKind::kMax>);
NPU_REGISTER_KERNEL("AvgPool3D", MakePool3DOf<Pool3DKind::kAvg>);
NPU_REGISTER_KERNEL("MaxPool3DGrad", MakePool3DOf<Pool3DKind::kMaxGrad>);
NPU_REGISTER_KERNEL("AvgPool3DGrad", MakePool3DOf<Pool3DKind::kAvgGrad>);
NPU_REGISTER_KERNEL("MaxPool3DGradGrad", MakePool3DOf<Pool3DKind::kMaxGradGrad>);

}  // namespace
}  // namespace kernels
}  // namespace npu
