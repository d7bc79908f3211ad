// Geometry of 3-D convolutions and pools (NDHWC or NCDHW, SAME/VALID padding), shared by
// conv3d.cc and pool3d.cc; the Python twin is graph_engine/ops/spatial3d.py.
#ifndef NPU_KERNELS_WINDOW3D_H_
#define NPU_KERNELS_WINDOW3D_H_

#include <cstdint>

#include "kernels/kernel.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {

struct Window3D {
  int64_t n = 0, c = 0, co = 0;    // batch, input and output channels
  int64_t in[3] = {}, k[3] = {}, out[3] = {}, stride[3] = {}, dilation[3] = {}, pad[3] = {};
  int64_t xs[5] = {}, ys[5] = {};  // element strides of (n, d, h, w, c) in the input and output

  int64_t positions() const { return n * out[0] * out[1] * out[2]; }
  int64_t taps() const { return k[0] * k[1] * k[2]; }
  // Offset of output position p (row-major over n, od, oh, ow) in the output, channel 0.
  int64_t OutAt(int64_t p) const {
    const int64_t per_n = out[0] * out[1] * out[2];
    return p / per_n * ys[0] + p % per_n * (ys[4] == 1 ? co : 1);
  }
  // Input offset (channel 0) that tap t of output position p reads; -1 in the padding.
  int64_t TapAt(int64_t p, int64_t t) const {
    const int64_t tk[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]};
    int64_t at = 0;
    for (int i = 2; i >= 0; --i) {
      const int64_t v = p % out[i] * stride[i] - pad[i] + tk[i] * dilation[i];
      p /= out[i];
      if (v < 0 || v >= in[i]) return -1;
      at += v * xs[1 + i];
    }
    return at + p * xs[0];
  }
};

// From the node's attrs (data_format, padding, strides, optional dilations), the input dims
// `x`, the spatial window `window` (d, h, w), the output channels `co`; checks that the output
// dims `y` match.
Status MakeWindow3D(const KernelDef& def, const Dims& x, const int64_t window[3], int64_t co,
                    const Dims& y, Window3D* g);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_WINDOW3D_H_
