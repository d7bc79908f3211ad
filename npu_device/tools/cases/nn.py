"""Cases of the neural-network ops of graph_engine/ops/nn_extra.py, and grouped convolutions."""
import numpy as np
import tensorflow as tf

from npu_device.tools.op_cases import _f32, _i32, tf_cpu_op

_POOL_X = _f32(2, 6, 6, 3)
_POOL = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
_POOLED = tf_cpu_op("MaxPool", {"input": _POOL_X}, _POOL).numpy()
_POOL_V2 = {"ksize": np.array(_POOL["ksize"], np.int32), "strides": np.array(_POOL["strides"], np.int32)}

_LRN = dict(depth_radius=2, bias=1.5, alpha=0.3, beta=0.75)
_LRN_X = _f32(2, 3, 3, 7)
_LRN_Y = tf_cpu_op("LRN", {"input": _LRN_X}, _LRN).numpy()

_FQ_X = _f32(3, 4, lo=-7.0, hi=7.0)
_FQ_ARGS = dict(min=-5.3, max=4.9)
_QDQ_X = _f32(3, 4, lo=-1.8, hi=1.8)
_QDQ_RANGE = {"input_min": np.float32(-1.3), "input_max": np.float32(1.1)}
_QDQ_RANGE_AXIS1 = {"input_min": np.array([-1.3, -0.6, -1.0, -0.1], np.float32),
                    "input_max": np.array([1.1, 0.5, 1.4, 0.3], np.float32)}

# Grouped convolution (filter depth C / G; graph_engine/ops/conv.py): G = 3, G = C with two
# outputs per channel (the depthwise form), G = 2 strided and dilated, NCHW with explicit pads.
# Their own random values, so that the cases of the modules after this one keep theirs.
_GR = np.random.default_rng(29)


def _g32(*shape):
    return _GR.uniform(-2.0, 2.0, shape).astype(np.float32)


_SAME1 = dict(strides=[1, 1, 1, 1], padding="SAME")
_GX, _GW = _g32(2, 7, 7, 6), _g32(3, 3, 2, 9)
_DX, _DW = _g32(2, 6, 6, 4), _g32(3, 3, 1, 8)
_STRIDED = dict(strides=[1, 2, 1, 1], dilations=[1, 1, 2, 1], padding="VALID")
_NCHW = dict(strides=[1, 1, 2, 2], padding="EXPLICIT", data_format="NCHW",
             explicit_paddings=[0, 0, 0, 0, 1, 2, 2, 0])

CASES = [
    ("Conv2D", {"input": _GX, "filter": _GW}, _SAME1),
    ("Conv2D", {"input": _DX, "filter": _DW}, _SAME1),
    ("Conv2D", {"input": _g32(2, 9, 8, 8), "filter": _g32(3, 2, 4, 6)}, _STRIDED),
    ("Conv2D", {"input": _g32(2, 6, 7, 5), "filter": _g32(3, 3, 3, 4)}, _NCHW),
    ("Conv2DBackpropInput", {"input_sizes": np.array(_GX.shape, np.int32), "filter": _GW,
                             "out_backprop": _g32(2, 7, 7, 9)}, _SAME1),
    ("Conv2DBackpropInput", {"input_sizes": np.array([2, 6, 7, 5], np.int32),
                             "filter": _g32(3, 3, 3, 4), "out_backprop": _g32(2, 4, 4, 3)}, _NCHW),
    ("Conv2DBackpropInput", {"input_sizes": np.array(_DX.shape, np.int32), "filter": _DW,
                             "out_backprop": _g32(2, 3, 3, 8)}, dict(strides=[1, 2, 2, 1], padding="SAME")),
    ("Conv2DBackpropFilter", {"input": _GX, "filter_sizes": np.array(_GW.shape, np.int32),
                              "out_backprop": _g32(2, 7, 7, 9)}, _SAME1),
    ("Conv2DBackpropFilter", {"input": _g32(2, 9, 8, 8), "filter_sizes": np.array([3, 2, 4, 6], np.int32),
                              "out_backprop": _g32(2, 4, 6, 6)}, _STRIDED),
    ("Conv2DBackpropFilter", {"input": _DX, "filter_sizes": np.array(_DW.shape, np.int32),
                              "out_backprop": _g32(2, 6, 6, 8)}, _SAME1),

    ("L2Loss", {"t": _f32(3, 4)}, {}),
    ("BiasAddV1", {"value": _f32(2, 3, 4), "bias": _f32(4)}, {}),
    ("DataFormatDimMap", {"x": np.array([-4, -1, 0, 1, 2, 3, 5], np.int32)}, {}),
    ("DataFormatDimMap", {"x": _i32(-5, 5, 2, 3)}, {"src_format": "NDHWC", "dst_format": "NCDHW"}),
    ("DataFormatVecPermute", {"x": _i32(-9, 9, 4)}, {}),
    ("DataFormatVecPermute", {"x": _i32(-9, 9, 4, 2)}, {"src_format": "NCHW", "dst_format": "NHWC"}),
    ("DataFormatVecPermute", {"x": _i32(-9, 9, 2)}, {"src_format": "NHWC", "dst_format": "NWHC"}),
    ("DataFormatVecPermute", {"x": _i32(-9, 9, 5)}, {"src_format": "NDHWC", "dst_format": "NCDHW"}),

    ("MaxPoolV2", {"input": _POOL_X, **_POOL_V2}, {"padding": "SAME"}),
    ("MaxPoolGradV2", {"orig_input": _POOL_X, "orig_output": _POOLED, "grad": _f32(*_POOLED.shape),
                       **_POOL_V2}, {"padding": "SAME"}),
    ("MaxPoolGradGradV2", {"orig_input": _POOL_X, "orig_output": _POOLED, "grad": _f32(*_POOL_X.shape),
                           **_POOL_V2}, {"padding": "SAME"}),

    ("LRN", {"input": _LRN_X}, _LRN),
    ("LRN", {"input": _f32(1, 2, 2, 12)}, {}),
    ("LRNGrad", {"input_grads": _f32(*_LRN_X.shape), "input_image": _LRN_X, "output_image": _LRN_Y}, _LRN),

    ("FakeQuantWithMinMaxArgs", {"inputs": _FQ_X}, _FQ_ARGS),
    ("FakeQuantWithMinMaxArgs", {"inputs": _FQ_X}, dict(min=-1.0, max=6.5, num_bits=4, narrow_range=True)),
    ("FakeQuantWithMinMaxArgsGradient", {"gradients": _f32(3, 4), "inputs": _FQ_X}, _FQ_ARGS),
    ("FakeQuantWithMinMaxVars", {"inputs": _FQ_X, "min": np.float32(-5.3), "max": np.float32(4.9)}, {}),
    ("FakeQuantWithMinMaxVars", {"inputs": _FQ_X, "min": np.float32(0), "max": np.float32(0)}, {}),
    ("FakeQuantWithMinMaxVarsGradient", {"gradients": _f32(3, 4), "inputs": _FQ_X,
                                         "min": np.float32(-5.3), "max": np.float32(4.9)}, {"num_bits": 6}),
    ("FakeQuantWithMinMaxVarsPerChannel", {"inputs": _FQ_X, "min": np.array([-5.3, -1, 0.5, -6], np.float32),
                                           "max": np.array([4.9, 1, 6, -0.5], np.float32)}, {"narrow_range": True}),
    ("FakeQuantWithMinMaxVarsPerChannelGradient",
     {"gradients": _f32(3, 4), "inputs": _FQ_X, "min": np.array([-5.3, -1, 0.5, -6], np.float32),
      "max": np.array([4.9, 1, 6, -0.5], np.float32)}, {}),

    *[(op, {"input": _QDQ_X, **_QDQ_RANGE}, {"range_given": True})
      for op in ("QuantizeAndDequantizeV2", "QuantizeAndDequantizeV4")],
    ("QuantizeAndDequantizeV2", {"input": _QDQ_X, **_QDQ_RANGE},
     {"num_bits": 4, "round_mode": "HALF_UP", "narrow_range": True}),
    ("QuantizeAndDequantizeV2", {"input": _QDQ_X, **_QDQ_RANGE_AXIS1}, {"signed_input": False, "axis": 1}),
    ("QuantizeAndDequantizeV3", {"input": _QDQ_X, **_QDQ_RANGE, "num_bits": np.int32(5)}, {"range_given": True}),
    ("QuantizeAndDequantizeV3", {"input": _QDQ_X, **_QDQ_RANGE_AXIS1, "num_bits": np.int32(7)}, {"axis": 1}),
    ("QuantizeAndDequantizeV3", {"input": _QDQ_X, **_QDQ_RANGE_AXIS1, "num_bits": np.int32(3)},
     {"range_given": True, "axis": 1, "signed_input": False}),
    ("QuantizeAndDequantizeV4", {"input": _QDQ_X, **_QDQ_RANGE_AXIS1}, {"axis": 1, "round_mode": "HALF_UP"}),
    ("QuantizeAndDequantizeV4Grad", {"gradients": _f32(3, 4), "input": _QDQ_X, **_QDQ_RANGE}, {}),
    ("QuantizeAndDequantizeV4Grad", {"gradients": _f32(3, 4), "input": _QDQ_X, **_QDQ_RANGE_AXIS1}, {"axis": 1}),
]

# Fused batch norm: training (the batch's moments; exponential_avg_factor blends the running
# ones), channels last and first, 5-D (V3); the gradients also in inference (NHWC: TF's CPU
# kernel has no other). Not swept: the forward in inference, whose reserve spaces 1 and 2 TF's
# CPU kernel leaves uninitialized; T float16/bfloat16 (with U float32), as the sweep's loss
# cannot add a float16 output's sum to a float32 one's.
_BN_X = _f32(2, 3, 3, 4)
_BN_C = {"scale": _f32(4), "offset": _f32(4), "mean": _f32(4), "variance": _f32(4, lo=0.2, hi=2.0)}
_BN_NCHW = {"x": np.transpose(_BN_X, (0, 3, 1, 2)), **_BN_C}


def _bn_cases(op):
    return [(op, {"x": _BN_X, **_BN_C}, {"is_training": True, "epsilon": 0.01}),
            (op, _BN_NCHW, {"is_training": True, "exponential_avg_factor": 0.3, "data_format": "NCHW"}),
            (op, {"x": _BN_X, **_BN_C}, {"is_training": False, "epsilon": 0.01})]    # inference


def _bn_grad_cases(op):
    extra = {"reserve_space_3": np.zeros(0, np.float32)} if op.endswith("V3") else {}
    cases = [(op, {"y_backprop": _f32(*_BN_X.shape), "x": _BN_X, "scale": _BN_C["scale"],
                   "reserve_space_1": _BN_C["mean"], "reserve_space_2": _BN_C["variance"], **extra},
              {"is_training": False})]
    for fmt, x in (("NHWC", _BN_X), ("NCHW", _BN_NCHW["x"])):
        batch = tf_cpu_op("FusedBatchNormV3", {"x": x, **_BN_C}, {"is_training": True, "data_format": fmt})
        cases.append((op, {"y_backprop": _f32(*x.shape), "x": x, "scale": _BN_C["scale"],
                           "reserve_space_1": batch[3].numpy(), "reserve_space_2": batch[4].numpy(), **extra},
                      {"is_training": True, "data_format": fmt}))
    return cases


CASES += [
    *_bn_cases("FusedBatchNorm"),
    *_bn_cases("FusedBatchNormV2"),
    *_bn_cases("FusedBatchNormV3"),
    ("FusedBatchNormV3", {"x": _f32(2, 3, 2, 2, 4), **_BN_C}, {"is_training": True, "data_format": "NDHWC"}),
    *_bn_grad_cases("FusedBatchNormGrad"),
    *_bn_grad_cases("FusedBatchNormGradV2"),
    *_bn_grad_cases("FusedBatchNormGradV3"),
]

# Window maxima: distinct values (the sweep's integer variants round them: ties, first wins).
_DIL_X, _DIL_F = _f32(2, 5, 6, 3), _f32(2, 3, 3)
_DIL = dict(strides=[1, 2, 1, 1], rates=[1, 1, 2, 1], padding="SAME")
_DIL_VALID = dict(strides=[1, 1, 1, 1], rates=[1, 1, 1, 1], padding="VALID")
_DIL_Y = tf_cpu_op("Dilation2D", {"input": _DIL_X, "filter": _DIL_F}, _DIL).numpy()
_ARGMAX_POOL = dict(ksize=[1, 3, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
_ARGMAX = tf_cpu_op("MaxPoolWithArgmax", {"input": _POOL_X}, _ARGMAX_POOL)[1].numpy()
CASES += [
    ("MaxPoolWithArgmax", {"input": _POOL_X}, _ARGMAX_POOL),
    ("MaxPoolWithArgmax", {"input": _POOL_X}, dict(ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID",
                                                   include_batch_in_index=True)),
    # T and Targmax both vary here, so the sweep runs each case as given: one per dtype
    *[("MaxPoolGradWithArgmax", {"input": (_POOL_X * 3).astype(t), "grad": (_f32(*_ARGMAX.shape) * 3).astype(t),
                                 "argmax": _ARGMAX}, _ARGMAX_POOL)
      for t in (np.float32, np.float16, tf.bfloat16.as_numpy_dtype, np.int32, np.int64)],
    ("Dilation2D", {"input": _DIL_X, "filter": _DIL_F}, _DIL),
    ("Dilation2D", {"input": _DIL_X, "filter": _DIL_F}, _DIL_VALID),
    ("Dilation2DBackpropInput", {"input": _DIL_X, "filter": _DIL_F, "out_backprop": _f32(*_DIL_Y.shape)}, _DIL),
    ("Dilation2DBackpropFilter", {"input": _DIL_X, "filter": _DIL_F, "out_backprop": _f32(*_DIL_Y.shape)}, _DIL),
    ("NthElement", {"input": _f32(3, 5), "n": np.int32(2)}, {}),
    ("NthElement", {"input": _f32(2, 3, 4), "n": np.int32(0)}, {"reverse": True}),
    ("NthElement", {"input": np.array([[3, 1, 3, 2], [5, 5, 5, 1]], np.int32), "n": np.int32(1)}, {"reverse": True}),
]
