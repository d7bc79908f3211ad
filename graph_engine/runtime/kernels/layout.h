// Float32 NHWC access to 4-D values stored NHWC or NCHW: convolution kernels compute on
// NHWC and relayout NCHW data around the computation.
#ifndef NPU_KERNELS_LAYOUT_H_
#define NPU_KERNELS_LAYOUT_H_

#include <vector>

#include "kernels/float_io.h"
#include "kernels/shape.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {

// Float32 NHWC copy (or view) of a [n, rows, cols, ch] value stored in the window's layout.
class NhwcIn {
 public:
  NhwcIn(const Window2D& g, int dtype, const void* data, int64_t rows, int64_t cols, int64_t ch)
      : in_(dtype, data, g.n * rows * cols * ch) {
    if (!g.nchw) { ptr_ = in_.data(); return; }
    copy_.resize(g.n * rows * cols * ch);
    int64_t src[4], dst[4];
    g.Strides(rows, cols, ch, src);
    Window2D nhwc;
    nhwc.Strides(rows, cols, ch, dst);
    CopyStrided(StridedPlan::Make({g.n, rows, cols, ch}, {Dims(dst, dst + 4), Dims(src, src + 4)}), 4,
                in_.data(), copy_.data());
    ptr_ = copy_.data();
  }
  const float* data() const { return ptr_; }

 private:
  FloatIn in_;
  std::vector<float> copy_;
  const float* ptr_;
};

// Float32 NHWC buffer for a [n, rows, cols, ch] result stored in the window's layout.
class NhwcOut {
 public:
  NhwcOut(const Window2D& g, int dtype, void* data, int64_t rows, int64_t cols, int64_t ch)
      : g_(g), rows_(rows), cols_(cols), ch_(ch), out_(dtype, data, g.n * rows * cols * ch) {
    if (g.nchw) copy_.resize(g.n * rows * cols * ch);
  }
  float* data() { return g_.nchw ? copy_.data() : out_.data(); }
  void Finish() {
    if (g_.nchw) {
      int64_t src[4], dst[4];
      Window2D nhwc;
      nhwc.Strides(rows_, cols_, ch_, src);
      g_.Strides(rows_, cols_, ch_, dst);
      CopyStrided(StridedPlan::Make({g_.n, rows_, cols_, ch_}, {Dims(dst, dst + 4), Dims(src, src + 4)}),
                  4, copy_.data(), out_.data());
    }
    out_.Finish();
  }

 private:
  const Window2D& g_;
  int64_t rows_, cols_, ch_;
  FloatOut out_;
  std::vector<float> copy_;
};

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_LAYOUT_H_
