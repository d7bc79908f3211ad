"""Every op of the GE registry against TensorFlow on CPU: the op is compiled as an eager single
op (compile_model), run by the reference executor, and compared with tf.raw_ops."""
import functools
import numpy as np
import pytest
import tensorflow as tf

from graph_engine import ops
from graph_engine.compiler import model_format as mf
from graph_engine.compiler import reference_executor
from graph_engine.compiler.compile import compile_model
from graph_engine.compiler.devtools import op_request

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return R.uniform(0.5, 2.0, shape).astype(np.float32)


def ints(lo, hi, *shape, dtype=np.int32):
    return R.integers(lo, hi, shape).astype(dtype)


def i32(*values):
    return np.array(values, np.int32)


X = f32(2, 6, 6, 3)
W = f32(3, 3, 3, 4)
NHWC = dict(strides=[1, 2, 2, 1], padding="SAME")
POOL = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
POOL_NCHW = dict(ksize=[1, 1, 2, 2], strides=[1, 1, 2, 2], padding="VALID", data_format="NCHW")
POOLED_SAME = tf.raw_ops.MaxPool(input=X, **POOL).numpy()

# (op, raw_ops inputs, attrs) -- at least one case per registered op (test_every_op_is_tested)
CASES = [
    *[(op, {"x": f32(3, 4)}, {}) for op in
      ("Neg", "Abs", "Sign", "Square", "Exp", "Floor", "Ceil", "Round", "Sin", "Cos", "Tanh",
       "Sigmoid", "IsNan", "IsInf", "IsFinite")],
    *[(op, {"x": pos(3, 4)}, {}) for op in ("Log", "Log1p", "Sqrt", "Rsqrt", "Reciprocal")],
    ("Neg", {"x": ints(-5, 5, 6)}, {}),
    ("LogicalNot", {"x": f32(5) > 0}, {}),
    *[(op, {"x": f32(3, 1, 4), "y": f32(5, 1)}, {}) for op in
      ("AddV2", "Add", "Sub", "Mul", "Maximum", "Minimum", "SquaredDifference", "RealDiv", "Div",
       "DivNoNan", "FloorDiv", "FloorMod", "Equal", "NotEqual", "Greater", "GreaterEqual", "Less",
       "LessEqual")],
    ("Pow", {"x": pos(3, 4), "y": f32(4)}, {}),
    ("DivNoNan", {"x": f32(4), "y": np.array([0, 1, 0, 2], np.float32)}, {}),
    *[(op, {"x": ints(-9, 9, 3, 4), "y": ints(1, 4, 4) * np.array([1, -1, 1, -1], np.int32)}, {})
      for op in ("AddV2", "Mul", "Div", "FloorDiv", "FloorMod", "Maximum", "Equal", "Less")],
    ("AddV2", {"x": ints(-9, 9, 3, dtype=np.int64), "y": ints(-9, 9, 3, dtype=np.int64)}, {}),
    *[(op, {"x": f32(6) > 0, "y": f32(6) > 0}, {}) for op in ("LogicalAnd", "LogicalOr")],
    *[(op, {"x": ints(0, 64, 5), "y": ints(0, 64, 5)}, {})
      for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")],
    ("SelectV2", {"condition": f32(3, 1) > 0, "t": f32(1, 4), "e": f32(3, 4)}, {}),
    ("Select", {"condition": f32(3) > 0, "x": f32(3, 4), "y": f32(3, 4)}, {}),
    ("Select", {"condition": np.array(False), "x": f32(3, 4), "y": f32(3, 4)}, {}),
    ("AddN", {"inputs": [f32(2, 3), f32(2, 3), f32(2, 3)]}, {}),
    ("Cast", {"x": f32(3, 4) * 4}, {"DstT": tf.int32}),
    ("Cast", {"x": ints(-2, 3, 5)}, {"DstT": tf.bool}),
    ("Cast", {"x": f32(5)}, {"DstT": tf.bfloat16}),
    ("Bitcast", {"input": f32(3, 2)}, {"type": tf.int32}),
    ("Relu", {"features": f32(3, 4)}, {}),
    ("Relu6", {"features": f32(3, 4) * 8}, {}),
    ("Elu", {"features": f32(3, 4)}, {}),
    ("Softplus", {"features": f32(3, 4) * 5}, {}),
    ("Softsign", {"features": f32(3, 4)}, {}),
    ("LeakyRelu", {"features": f32(3, 4)}, {"alpha": 0.3}),
    ("ReluGrad", {"gradients": f32(3, 4), "features": f32(3, 4)}, {}),
    ("Relu6Grad", {"gradients": f32(3, 4), "features": f32(3, 4) * 8}, {}),
    ("SigmoidGrad", {"y": pos(3, 4) / 2, "dy": f32(3, 4)}, {}),
    ("TanhGrad", {"y": f32(3, 4) / 3, "dy": f32(3, 4)}, {}),
    ("RsqrtGrad", {"y": pos(3, 4), "dy": f32(3, 4)}, {}),
    ("SqrtGrad", {"y": pos(3, 4), "dy": f32(3, 4)}, {}),
    ("ReciprocalGrad", {"y": pos(3, 4), "dy": f32(3, 4)}, {}),
    ("EluGrad", {"gradients": f32(3, 4), "outputs": f32(3, 4)}, {}),
    ("SoftplusGrad", {"gradients": f32(3, 4), "features": f32(3, 4)}, {}),
    ("LeakyReluGrad", {"gradients": f32(3, 4), "features": f32(3, 4)}, {"alpha": 0.1}),
    ("Softmax", {"logits": f32(4, 7) * 10}, {}),
    ("LogSoftmax", {"logits": f32(4, 7) * 10}, {}),
    ("SoftmaxCrossEntropyWithLogits", {"features": f32(4, 5),
                                       "labels": tf.nn.softmax(f32(4, 5)).numpy()}, {}),
    ("SparseSoftmaxCrossEntropyWithLogits", {"features": f32(4, 5), "labels": ints(0, 5, 4)}, {}),
    ("BiasAdd", {"value": f32(2, 3, 4), "bias": f32(4)}, {}),
    ("BiasAdd", {"value": f32(2, 4, 3, 3), "bias": f32(4)}, {"data_format": "NCHW"}),
    ("BiasAddGrad", {"out_backprop": f32(2, 3, 4)}, {}),
    ("BiasAddGrad", {"out_backprop": f32(2, 4, 3, 3)}, {"data_format": "NCHW"}),
    ("MatMul", {"a": f32(3, 4), "b": f32(5, 4)}, {"transpose_b": True}),
    ("MatMul", {"a": f32(4, 3), "b": f32(4, 5)}, {"transpose_a": True}),
    ("BatchMatMulV2", {"x": f32(2, 1, 3, 4), "y": f32(3, 5, 4)}, {"adj_y": True}),
    ("BatchMatMulV3", {"x": f32(2, 3, 4), "y": f32(2, 4, 5)}, {"Tout": tf.float32}),
    *[(op, {"input": f32(3, 4, 5), "axis": i32(0, -1)}, {"keep_dims": k})
      for op in ("Sum", "Mean", "Max", "Min", "Prod") for k in (False, True)],
    ("Mean", {"input": ints(-9, 9, 3, 4), "axis": i32(1)}, {}),
    ("All", {"input": f32(3, 4) > -1, "axis": i32(1)}, {}),
    ("Any", {"input": f32(3, 4) > 1, "axis": i32(0)}, {}),
    ("ArgMax", {"input": f32(3, 4, 5), "dimension": np.int32(1)}, {}),
    ("ArgMin", {"input": f32(3, 4, 5), "dimension": np.int32(-1)}, {"output_type": tf.int32}),
    ("Conv2D", {"input": X, "filter": W}, NHWC),
    ("Conv2D", {"input": X, "filter": W}, dict(strides=[1, 1, 1, 1], padding="VALID",
                                               dilations=[1, 2, 2, 1])),
    ("Conv2D", {"input": X, "filter": W},
     dict(strides=[1, 1, 1, 1], padding="EXPLICIT", explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0])),
    ("Conv2DBackpropInput", {"input_sizes": i32(2, 6, 6, 3), "filter": W,
                             "out_backprop": f32(2, 3, 3, 4)}, NHWC),
    ("Conv2DBackpropInput", {"input_sizes": i32(2, 7, 7, 3), "filter": W,
                             "out_backprop": f32(2, 3, 3, 4)},
     dict(strides=[1, 2, 2, 1], padding="VALID")),
    ("Conv2DBackpropFilter", {"input": X, "filter_sizes": i32(3, 3, 3, 4),
                              "out_backprop": f32(2, 3, 3, 4)}, NHWC),
    ("DepthwiseConv2dNative", {"input": X, "filter": f32(3, 3, 3, 2)}, NHWC),
    ("DepthwiseConv2dNative", {"input": f32(2, 3, 5, 5), "filter": f32(2, 2, 3, 1)},
     dict(strides=[1, 1, 1, 1], padding="VALID", data_format="NCHW")),
    ("DepthwiseConv2dNativeBackpropInput", {"input_sizes": i32(2, 6, 6, 3),
                                            "filter": f32(3, 3, 3, 2),
                                            "out_backprop": f32(2, 3, 3, 6)}, NHWC),
    ("DepthwiseConv2dNativeBackpropFilter", {"input": X, "filter_sizes": i32(3, 3, 3, 2),
                                             "out_backprop": f32(2, 3, 3, 6)}, NHWC),
    ("MaxPool", {"input": X}, POOL),
    ("MaxPool", {"input": f32(2, 3, 4, 4)}, POOL_NCHW),
    ("AvgPool", {"value": X}, POOL),
    ("AvgPool", {"value": f32(2, 3, 4, 4)}, POOL_NCHW),
    ("MaxPoolGrad", {"orig_input": X, "orig_output": POOLED_SAME, "grad": f32(2, 3, 3, 3)}, POOL),
    ("MaxPoolGrad", {"orig_input": np.round(X), "orig_output":
                     tf.raw_ops.MaxPool(input=np.round(X), **POOL).numpy(),
                     "grad": f32(2, 3, 3, 3)}, POOL),              # ties: first maximum wins
    ("AvgPoolGrad", {"orig_input_shape": i32(2, 6, 6, 3), "grad": f32(2, 3, 3, 3)}, POOL),
    ("Reshape", {"tensor": f32(3, 4), "shape": i32(2, -1)}, {}),
    ("Squeeze", {"input": f32(3, 1, 4, 1)}, {"axis": [1]}),
    ("Squeeze", {"input": f32(3, 1, 4, 1)}, {}),
    ("ExpandDims", {"input": f32(3, 4), "axis": np.int32(-1)}, {}),
    ("Transpose", {"x": f32(2, 3, 4), "perm": i32(2, 0, 1)}, {}),
    ("ConcatV2", {"values": [f32(2, 3), f32(2, 1)], "axis": np.int32(-1)}, {}),
    ("Pack", {"values": [f32(2, 3), f32(2, 3)]}, {"axis": 1}),
    ("Unpack", {"value": f32(2, 3)}, {"num": 3, "axis": 1}),
    ("Split", {"axis": np.int32(1), "value": f32(2, 6)}, {"num_split": 3}),
    ("SplitV", {"value": f32(2, 6), "size_splits": i32(1, -1, 2), "axis": np.int32(1)},
     {"num_split": 3}),
    ("Slice", {"input": f32(4, 5), "begin": i32(1, 2), "size": i32(2, -1)}, {}),
    ("StridedSlice", {"input": f32(4, 5, 6), "begin": i32(1, 0, -1), "end": i32(3, 0, 0),
                      "strides": i32(1, 1, -2)}, {"end_mask": 2, "shrink_axis_mask": 0}),
    ("StridedSlice", {"input": f32(4, 5, 6), "begin": i32(0, 1, 0), "end": i32(0, 2, 0),
                      "strides": i32(1, 1, 1)},
     {"ellipsis_mask": 1, "shrink_axis_mask": 2, "new_axis_mask": 4}),
    ("StridedSliceGrad", {"shape": i32(4, 5), "begin": i32(1, 0), "end": i32(3, 5),
                          "strides": i32(1, 2), "dy": f32(2, 3)}, {}),
    ("GatherV2", {"params": f32(5, 3), "indices": ints(0, 5, 2, 2), "axis": np.int32(0)}, {}),
    ("GatherV2", {"params": f32(2, 4, 3), "indices": ints(0, 3, 2, 5), "axis": np.int32(-1)},
     {"batch_dims": 1}),
    ("UnsortedSegmentSum", {"data": f32(6, 3), "segment_ids": ints(0, 4, 6),
                            "num_segments": np.int32(4)}, {}),
    ("Fill", {"dims": i32(2, 3), "value": np.float32(1.5)}, {}),
    ("ZerosLike", {"x": f32(2, 3)}, {}),
    ("OnesLike", {"x": ints(0, 3, 4)}, {}),
    ("Tile", {"input": f32(2, 3), "multiples": i32(2, 1)}, {}),
    ("BroadcastTo", {"input": f32(3, 1), "shape": i32(2, 3, 4)}, {}),
    ("Pad", {"input": f32(2, 3), "paddings": np.array([[1, 0], [2, 1]], np.int32)}, {}),
    ("PadV2", {"input": f32(2, 3), "paddings": np.array([[0, 1], [1, 1]], np.int32),
               "constant_values": np.float32(-1)}, {}),
    ("Range", {"start": np.int32(1), "limit": np.int32(10), "delta": np.int32(3)}, {}),
    ("Shape", {"input": f32(2, 3)}, {}),
    ("ShapeN", {"input": [f32(2, 3), f32(4)]}, {"out_type": tf.int64}),
    ("Size", {"input": f32(2, 3)}, {}),
    ("Rank", {"input": f32(2, 3)}, {}),
    ("BroadcastGradientArgs", {"s0": i32(2, 1, 3), "s1": i32(1)}, {}),
    ("BroadcastGradientArgs", {"s0": i32(4, 5), "s1": i32(4, 5)}, {}),
    *[(op, {"input": f32(2, 3)}, {}) for op in
      ("Identity", "Snapshot", "StopGradient", "PreventGradient")],
    ("IdentityN", {"input": [f32(2), ints(0, 3, 3)]}, {}),
    ("Const", {}, {"value": tf.make_tensor_proto(f32(2, 3)), "dtype": tf.float32}),
    ("NoOp", {}, {}),
]


def _ids():
    return [f"{i}-{c[0]}" for i, c in enumerate(CASES)]


@functools.lru_cache(maxsize=None)
def _op_cases():
    # Loaded by path: it is data, and importing the npu_device package would load the plugin.
    import importlib.util, pathlib
    path = pathlib.Path(__file__).parents[1] / "npu_device" / "tools" / "op_cases.py"
    spec = importlib.util.spec_from_file_location("op_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tf_outputs(op, inputs, attrs):
    """TF's own CPU result (never the NPU kernel under test), in a form plain Eigen computes."""
    if op == "Const":                       # eager TF has no Const kernel call
        return [tf.make_ndarray(attrs["value"])]
    with tf.device("/device:CPU:0"):
        result = _op_cases().tf_cpu_op(op, inputs, attrs)
    if result is None or isinstance(result, tf.Operation):
        return []
    items = result if isinstance(result, (list, tuple)) else [result]
    return [np.asarray(t) for t in items]


def compile_and_run(op, inputs, attrs):
    nd, model_inputs = op_request(op, inputs, **attrs)
    model = compile_model(nd.SerializeToString())
    kernels = [k.kernel for k in mf.deserialize(model).kernels]
    assert all(ops.get(k).runtime_kernel for k in kernels), kernels
    assert ops.get(op).runtime_kernel or kernels == []
    return reference_executor.run(model, model_inputs)


@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_op_matches_tensorflow(case):
    op, inputs, attrs = case
    expected = _tf_outputs(op, inputs, attrs)
    got = compile_and_run(op, inputs, attrs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        if np.issubdtype(e.dtype, np.floating) or e.dtype == tf.bfloat16.as_numpy_dtype:
            np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32),
                                       rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, e)


def test_every_op_is_tested():
    # Ops added since have their cases in npu_device/tools/op_cases.py and tools/cases/.
    from npu_device.tools import cases
    tested = {c[0] for c in CASES} | {c[0] for c in cases.all_cases()}
    assert set(ops.registered()) - tested == set()


# float16 / bfloat16 are storage types: the reference computes in float32 and rounds once,
# TF's CPU kernels may round intermediate results, so the bound is a few storage ulps.
HALF_CASES = [
    ("MatMul", {"a": f32(8, 16), "b": f32(16, 4)}, {}),
    ("Conv2D", {"input": X, "filter": W}, NHWC),
    ("AddV2", {"x": f32(3, 4), "y": f32(4)}, {}),
    ("Softmax", {"logits": f32(4, 7)}, {}),
    ("Sum", {"input": f32(3, 40), "axis": i32(1)}, {}),
    ("Relu", {"features": f32(3, 4)}, {}),
    ("BiasAddGrad", {"out_backprop": f32(4, 6, 5)}, {}),
    ("SparseSoftmaxCrossEntropyWithLogits", {"features": f32(4, 5), "labels": ints(0, 5, 4)}, {}),
]


@pytest.mark.parametrize("dtype,rtol", [(np.float16, 1e-2), (tf.bfloat16.as_numpy_dtype, 4e-2)],
                         ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_half_precision_ops(case, dtype, rtol):
    op, inputs, attrs = case
    narrow = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in inputs.items()}
    expected = _tf_outputs(op, narrow, attrs)
    got = compile_and_run(op, narrow, attrs)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        scale = np.abs(e.astype(np.float32)).max()
        np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32), rtol=rtol,
                                   atol=rtol * scale)


def test_storage_rounding_is_float32_then_round():
    """The kernel contract: compute in float32, round once on store."""
    a, b = f32(4, 64).astype(np.float16), f32(64, 3).astype(np.float16)
    got = compile_and_run("MatMul", {"a": a, "b": b}, {})[0]
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)


def test_sparse_xent_out_of_range_label_gives_nan_row():
    got = compile_and_run("SparseSoftmaxCrossEntropyWithLogits",
                          {"features": f32(2, 3), "labels": i32(1, 7)}, {})
    assert np.isfinite(got[0][0]) and np.isnan(got[0][1]) and np.isnan(got[1][1]).all()
