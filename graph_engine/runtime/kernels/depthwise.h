// The depthwise convolution kernels (DepthwiseConv2dNative and its gradients, depthwise.cc),
// also run by grouped Conv2D when every group has one input channel: Conv2D with filter
// [KH, KW, 1, C * M] over C channels is the depthwise convolution with multiplier M, and its
// filter is the depthwise filter [KH, KW, C, M] in the same memory order.
#ifndef NPU_KERNELS_DEPTHWISE_H_
#define NPU_KERNELS_DEPTHWISE_H_

#include <memory>

#include "kernels/epilogue.h"
#include "kernels/window.h"

namespace npu {
namespace kernels {

// Which computation of a convolution node: its forward pass or one of its two gradients.
enum class ConvPass { kForward, kBackpropInput, kBackpropFilter };

// A depthwise kernel for window `g` (input channels g.c) and `multiplier` filters per channel;
// `ep` is the forward pass's epilogue (empty for the gradients).
std::unique_ptr<Kernel> NewDepthwiseKernel(ConvPass pass, const Window2D& g, int64_t multiplier,
                                           int dtype, const Epilogue& ep);

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_DEPTHWISE_H_
