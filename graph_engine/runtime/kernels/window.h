// Geometry of 2-D sliding windows (convolution and pooling): data_format, strides,
// dilations and SAME/VALID/EXPLICIT padding, computed as TF does.
#ifndef NPU_KERNELS_WINDOW_H_
#define NPU_KERNELS_WINDOW_H_

#include "kernels/kernel.h"
#include "kernels/shape.h"

namespace npu {
namespace kernels {

struct Window2D {
  bool nchw = false;
  int64_t n = 0, h = 0, w = 0, c = 0;   // input batch, rows, columns, channels
  int64_t oh = 0, ow = 0;               // output rows and columns
  int64_t kh = 1, kw = 1;               // window (filter) size
  int64_t sh = 1, sw = 1;               // strides
  int64_t dh = 1, dw = 1;               // dilations
  int64_t pad_top = 0, pad_left = 0;    // padding before the first row/column

  // A [batch, rows, cols, channels] shape in this window's data format.
  Dims Shape(int64_t rows, int64_t cols, int64_t channels) const {
    return nchw ? Dims{n, channels, rows, cols} : Dims{n, rows, cols, channels};
  }
  Dims InputShape() const { return Shape(h, w, c); }
  Dims OutputShape(int64_t channels) const { return Shape(oh, ow, channels); }
  // Element strides of (batch, row, column, channel) in a tensor of `rows` x `cols` x `channels`.
  void Strides(int64_t rows, int64_t cols, int64_t channels, int64_t s[4]) const {
    if (nchw) { s[0] = channels * rows * cols; s[1] = cols; s[2] = 1; s[3] = rows * cols; }
    else { s[0] = rows * cols * channels; s[1] = cols * channels; s[2] = channels; s[3] = 1; }
  }
};

// Reads data_format, strides, dilations (when `dilations`), padding and explicit_paddings
// for an input of shape `input` (in data_format) and a kh x kw window.
Status MakeWindow2D(const Attrs& attrs, const Dims& input, int64_t kh, int64_t kw, bool dilations,
                    Window2D* w);

// Reads a pooling window size (ksize, one per axis in data_format order) into kh, kw.
Status PoolWindowSize(const Attrs& attrs, int64_t* kh, int64_t* kw);

// Checks that `actual` equals the shape the window implies.
Status CheckShape(const char* what, const Dims& actual, const Dims& expected);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_WINDOW_H_
