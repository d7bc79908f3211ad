// A tensor viewed as [outer, channels, inner] around one axis: the per-channel kernels of
// nn_extra.py (batch norm, fake quantization) walk one channel's elements with it.
#ifndef NPU_KERNELS_CHANNEL_VIEW_H_
#define NPU_KERNELS_CHANNEL_VIEW_H_

#include "kernels/shape.h"

namespace npu {
namespace kernels {

struct ChannelView {
  int64_t outer = 1, channels = 1, inner = 1;
  int64_t At(int64_t o, int64_t c, int64_t i) const { return (o * channels + c) * inner + i; }
  int64_t PerChannel() const { return outer * inner; }
  // Calls fn(element index) for every element of channel c, in memory order.
  template <class Fn>
  void ForChannel(int64_t c, Fn&& fn) const {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) fn(At(o, c, i));
  }
};

// `dims` viewed around `axis` (-1: the whole tensor is one channel).
inline ChannelView ViewAround(const Dims& dims, int64_t axis) {
  ChannelView v;
  if (axis < 0) {
    v.inner = NumElements(dims);
    return v;
  }
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d)
    (d < axis ? v.outer : d == axis ? v.channels : v.inner) *= dims[d];
  return v;
}

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_CHANNEL_VIEW_H_
