"""Invalid user input keeps TensorFlow's error classes on the NPU (issue 11, item 5).

Each case runs eagerly on CPU and on the NPU: both must raise the same TF error class
(InvalidArgumentError nearly always), and the NPU's message must name the op and the problem.
Ops the NPU compiles must be rejected by the graph engine's own shape functions: their message
names the node and op ("(op MatMul)"), so a case that crashed the compiler and quietly fell back
to TF's CPU kernel fails here. A few cases go through tf.function with unknown input shapes,
where TF's graph-time shape inference cannot see the problem and the NPU cluster compile must.
Inputs that TF accepts (negative transpose perms, windows a little larger than the input, which
give empty outputs) must give TF's results on the NPU too.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import numpy as np
import pytest
import tensorflow as tf

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
R = tf.raw_ops
INVALID = tf.errors.InvalidArgumentError
UNIMPLEMENTED = tf.errors.UnimplementedError


def f(*shape):
    return np.ones(shape, np.float32)


@pytest.fixture
def cpu_fallback():
    """What users get by default: what the engine does not implement runs on CPU (the suite
    turns the fallback off, see conftest.py)."""
    from npu_device.configuration import current
    before = current().cpu_fallback
    npu_device.set_npu_config(cpu_fallback=True)
    yield
    npu_device.set_npu_config(cpu_fallback=before)


def i32(*values):
    return np.array(values, np.int32)


def scalar():
    return np.float32(1)


# (id, fn, op type, [text the NPU message must contain]); every case raises InvalidArgumentError.
EAGER = [
    ("matmul_inner", lambda: tf.matmul(f(2, 3), f(4, 5)), "MatMul", ["[2, 3]", "[4, 5]"]),
    ("matmul_rank1", lambda: R.MatMul(a=f(3), b=f(3, 2)), "MatMul", ["[3]", "matrices"]),
    ("bmm_inner", lambda: tf.matmul(f(2, 2, 3), f(2, 4, 5)), "BatchMatMulV2",
     ["[2, 2, 3]", "[2, 4, 5]"]),
    ("bmm_batch", lambda: tf.matmul(f(2, 2, 3), f(3, 3, 4)), "BatchMatMulV2",
     ["batch", "[2, 2, 3]", "[3, 3, 4]"]),
    ("bias_add_size", lambda: tf.nn.bias_add(f(2, 3), f(4)), "BiasAdd", ["[4]", "[2, 3]"]),
    ("bias_add_nchw", lambda: R.BiasAdd(value=f(2, 3, 4, 4), bias=f(4), data_format="NCHW"),
     "BiasAdd", ["[4]", "[2, 3, 4, 4]"]),
    ("bias_add_rank1", lambda: R.BiasAdd(value=f(3), bias=f(3)), "BiasAdd", ["2-D", "[3]"]),
    ("bias_add_bias_2d", lambda: R.BiasAdd(value=f(2, 3), bias=f(1, 3)), "BiasAdd",
     ["1-D", "[1, 3]"]),
    ("conv2d_channels", lambda: tf.nn.conv2d(f(1, 5, 5, 3), f(3, 3, 2, 4), 1, "VALID"),
     "Conv2D", ["evenly divisible by filter depth", "3 vs 2"]),     # not a grouping either
    ("conv2d_window_negative", lambda: tf.nn.conv2d(f(1, 2, 2, 1), f(4, 4, 1, 1), 1, "VALID"),
     "Conv2D", ["negative", "-1"]),
    ("conv2d_stride_0", lambda: R.Conv2D(input=f(1, 5, 5, 1), filter=f(3, 3, 1, 1),
                                         strides=[1, 0, 0, 1], padding="SAME"),
     "Conv2D", ["strides [1, 0, 0, 1]", "positive"]),
    ("conv2d_stride_negative", lambda: R.Conv2D(input=f(1, 5, 5, 1), filter=f(3, 3, 1, 1),
                                                strides=[1, -1, -1, 1], padding="VALID"),
     "Conv2D", ["strides [1, -1, -1, 1]", "positive"]),
    ("conv2d_dilation_0", lambda: R.Conv2D(input=f(1, 5, 5, 1), filter=f(3, 3, 1, 1),
                                           strides=[1, 1, 1, 1], dilations=[1, 0, 0, 1],
                                           padding="VALID"),
     "Conv2D", ["dilations [1, 0, 0, 1]", "positive"]),
    ("conv2d_rank3", lambda: R.Conv2D(input=f(5, 5, 1), filter=f(3, 3, 1, 1),
                                      strides=[1, 1, 1, 1], padding="VALID"),
     "Conv2D", ["4-D", "[5, 5, 1]"]),
    ("depthwise_channels", lambda: tf.nn.depthwise_conv2d(f(1, 5, 5, 3), f(3, 3, 2, 1),
                                                          [1, 1, 1, 1], "VALID"),
     "DepthwiseConv2dNative", ["3 channels", "expects 2"]),
    ("conv3d_channels", lambda: tf.nn.conv3d(f(1, 4, 4, 4, 2), f(2, 2, 2, 3, 1),
                                             [1, 1, 1, 1, 1], "VALID"),
     "Conv3D", ["evenly divisible by filter depth", "2 vs 3"]),
    ("max_pool_window_negative", lambda: tf.nn.max_pool2d(f(1, 2, 2, 1), 4, 1, "VALID"),
     "MaxPool", ["negative", "input size (padded): 2", "window size: 4"]),
    ("avg_pool_window_negative", lambda: tf.nn.avg_pool2d(f(1, 2, 2, 1), 4, 1, "VALID"),
     "AvgPool", ["negative", "input size (padded): 2", "window size: 4"]),
    ("max_pool3d_window_negative", lambda: tf.nn.max_pool3d(f(1, 2, 2, 2, 1), 4, 1, "VALID"),
     "MaxPool3D", ["negative", "window size: 4"]),
    ("max_pool_ksize_0", lambda: R.MaxPool(input=f(1, 4, 4, 1), ksize=[1, 0, 0, 1],
                                           strides=[1, 1, 1, 1], padding="VALID"),
     "MaxPool", ["ksize [1, 0, 0, 1]", "positive"]),
    ("max_pool_ksize_negative", lambda: R.MaxPool(input=f(1, 4, 4, 1), ksize=[1, -1, -1, 1],
                                                  strides=[1, 1, 1, 1], padding="VALID"),
     "MaxPool", ["ksize [1, -1, -1, 1]", "positive"]),
    ("avg_pool_ksize_0", lambda: R.AvgPool(value=f(1, 4, 4, 1), ksize=[1, 0, 0, 1],
                                           strides=[1, 1, 1, 1], padding="VALID"),
     "AvgPool", ["ksize [1, 0, 0, 1]", "positive"]),
    ("max_pool_stride_0", lambda: R.MaxPool(input=f(1, 4, 4, 1), ksize=[1, 2, 2, 1],
                                            strides=[1, 0, 0, 1], padding="SAME"),
     "MaxPool", ["strides [1, 0, 0, 1]", "positive"]),
    ("avg_pool_stride_negative", lambda: R.AvgPool(value=f(1, 4, 4, 1), ksize=[1, 2, 2, 1],
                                                   strides=[1, -1, -1, 1], padding="VALID"),
     "AvgPool", ["strides [1, -1, -1, 1]", "positive"]),
    ("max_pool_rank3", lambda: R.MaxPool(input=f(4, 4, 1), ksize=[1, 2, 2, 1],
                                         strides=[1, 1, 1, 1], padding="VALID"),
     "MaxPool", ["4-D", "[4, 4, 1]"]),
    ("reduce_sum_axis", lambda: tf.reduce_sum(f(2, 3), axis=2), "Sum", ["axis 2", "rank 2"]),
    ("reduce_mean_axis_negative", lambda: tf.reduce_mean(f(2, 3), axis=-3), "Mean",
     ["axis -3", "rank 2"]),
    ("reduce_max_axis_list", lambda: tf.reduce_max(f(2, 3), axis=[0, 5]), "Max",
     ["axis 5", "rank 2"]),
    ("reduce_sum_scalar_axis", lambda: R.Sum(input=scalar(), axis=i32(0)), "Sum",
     ["axis 0", "rank 0"]),
    ("reduce_sum_duplicate_axes", lambda: R.Sum(input=f(2, 3), axis=i32(1, -1)), "Sum",
     ["duplicate", "[1, -1]"]),
    ("argmax_axis", lambda: tf.argmax(f(2, 3), axis=2), "ArgMax", ["dimension 2", "rank 2"]),
    ("argmax_scalar", lambda: R.ArgMax(input=scalar(), dimension=np.int32(0)), "ArgMax",
     ["dimension 0", "rank 0"]),
    ("concat_dims", lambda: tf.concat([f(2, 3), f(3, 4)], 0), "ConcatV2", ["[2, 3]", "[3, 4]"]),
    ("concat_axis", lambda: tf.concat([f(2, 3), f(2, 3)], 2), "ConcatV2", ["axis 2", "rank 2"]),
    ("concat_axis_negative", lambda: tf.concat([f(2, 3), f(2, 3)], -3), "ConcatV2",
     ["axis -3", "rank 2"]),
    ("concat_ranks", lambda: tf.concat([f(2, 3), f(2, 3, 1)], 0), "ConcatV2",
     ["ranks", "[2, 3, 1]"]),
    ("concat_scalars", lambda: R.ConcatV2(values=[scalar(), scalar()], axis=np.int32(0)),
     "ConcatV2", ["scalars"]),
    ("transpose_duplicate", lambda: tf.transpose(f(2, 3), [0, 0]), "Transpose",
     ["perm [0, 0]", "permutation"]),
    ("transpose_length", lambda: tf.transpose(f(2, 3), [0]), "Transpose", ["perm [0]", "rank 2"]),
    ("transpose_out_of_range", lambda: tf.transpose(f(2, 3), [0, 2]), "Transpose",
     ["perm [0, 2]", "permutation"]),
    ("transpose_negative_out_of_range", lambda: tf.transpose(f(2, 3), [-3, 0]), "Transpose",
     ["perm [-3, 0]", "permutation"]),
    ("gather_axis", lambda: tf.gather(f(2, 3), i32(0), axis=2), "GatherV2", ["axis 2", "rank 2"]),
    ("gather_scalar_params", lambda: R.GatherV2(params=scalar(), indices=i32(0),
                                                axis=np.int32(0)),
     "GatherV2", ["params", "1-D"]),
    ("gather_batch_dims", lambda: tf.gather(f(2, 3), np.zeros((3, 1), np.int32), axis=1,
                                            batch_dims=1),
     "GatherV2", ["batch_dims 1", "[2, 3]", "[3, 1]"]),
    ("softmax_scalar", lambda: R.Softmax(logits=scalar()), "Softmax", [">= 1 dimension"]),
    ("log_softmax_scalar", lambda: R.LogSoftmax(logits=scalar()), "LogSoftmax",
     [">= 1 dimension"]),
    ("tile_multiples_length", lambda: tf.tile(f(2, 3), [2]), "Tile", ["multiples [2]", "2"]),
    ("tile_multiples_negative", lambda: tf.tile(f(2, 3), [2, -1]), "Tile", ["[2, -1]"]),
    ("pad_paddings_rows", lambda: tf.pad(f(2, 3), [[1, 1]]), "Pad", ["[1, 1]", "[2, 2]"]),
    ("pad_paddings_3x2", lambda: R.Pad(input=f(2, 3), paddings=np.ones((3, 2), np.int32)),
     "Pad", ["[2, 2]"]),
    ("pad_negative", lambda: tf.pad(f(2, 3), [[-1, 0], [0, 0]]), "Pad",
     ["[[-1, 0], [0, 0]]", "non-negative"]),
    ("pad_v2_negative", lambda: tf.pad(f(2, 3), [[0, 0], [0, -1]], constant_values=1.0),
     "PadV2", ["[0, -1]", "non-negative"]),
    ("mirror_pad_too_big", lambda: tf.pad(f(2, 3), [[0, 0], [3, 0]], mode="REFLECT"),
     "MirrorPad", ["[3, 0]", "REFLECT"]),
    ("strided_slice_stride_0", lambda: tf.strided_slice(f(4), [0], [4], [0]), "StridedSlice",
     ["strides[0]", "non-zero"]),
    ("strided_slice_lengths", lambda: tf.strided_slice(f(4), [0, 0], [4], [1]), "StridedSlice",
     ["begin [0, 0]", "end [4]", "same length"]),
    ("strided_slice_shrink_out_of_bounds",
     lambda: tf.strided_slice(f(4), [5], [6], [1], shrink_axis_mask=1), "StridedSlice",
     ["index 5", "size 4"]),
    ("slice_out_of_bounds", lambda: tf.slice(f(4), [2], [3]), "Slice",
     ["begin [2]", "size [3]", "[4]"]),
    ("slice_negative_begin", lambda: tf.slice(f(4), [-1], [1]), "Slice", ["begin [-1]"]),
    ("slice_size_negative", lambda: tf.slice(f(4), [0], [-2]), "Slice", ["size [-2]"]),
    ("slice_lengths", lambda: tf.slice(f(4, 2), [0], [1]), "Slice", ["begin [0]", "2 entries"]),
    ("split_not_divisible", lambda: tf.split(f(5), 2), "Split", ["[5]", "divisible by 2"]),
    ("split_axis", lambda: tf.split(f(4), 2, axis=1), "Split", ["split_dim 1", "rank 1"]),
    ("split_scalar", lambda: R.Split(axis=np.int32(0), value=scalar(), num_split=1), "Split",
     ["split_dim 0", "rank 0"]),
    ("split_v_sum", lambda: tf.split(f(5), [2, 2]), "SplitV", ["[2, 2]", "[5]"]),
    ("split_v_two_minus_one", lambda: tf.split(f(5), [-1, -1]), "SplitV",
     ["[-1, -1]", "one -1"]),
    ("unpack_num", lambda: R.Unpack(value=f(2, 3), num=3), "Unpack", ["[2, 3]", "num=3"]),
    ("unpack_axis", lambda: R.Unpack(value=f(2, 3), num=2, axis=2), "Unpack",
     ["axis 2", "rank 2"]),
    ("pack_shapes", lambda: tf.stack([f(2), f(3)]), "Pack", ["[2]", "[3]"]),
    ("pack_axis", lambda: R.Pack(values=[f(2), f(2)], axis=3), "Pack", ["axis 3", "rank 1"]),
    ("add_broadcast", lambda: tf.add(f(2, 3), f(4, 3)), "AddV2", ["[2, 3]", "[4, 3]"]),
    ("mul_broadcast", lambda: tf.multiply(f(2, 3), f(2, 4)), "Mul", ["[2, 3]", "[2, 4]"]),
    ("sub_broadcast", lambda: tf.subtract(f(3), f(2)), "Sub", ["[3]", "[2]"]),
    ("add_n_shapes", lambda: tf.add_n([f(2), f(3)]), "AddN", ["[2]", "[3]"]),
    ("where_broadcast", lambda: tf.where(np.ones((2,), bool), f(2), f(3)), "SelectV2",
     ["[2]", "[3]"]),
    ("relu_grad_shapes", lambda: R.ReluGrad(gradients=f(2), features=f(1)), "ReluGrad",
     ["[2]", "[1]"]),
    ("sigmoid_grad_shapes", lambda: R.SigmoidGrad(y=f(2, 3), dy=f(3)), "SigmoidGrad",
     ["[2, 3]", "[3]"]),
    ("fill_negative", lambda: tf.fill([-1, 2], 1.0), "Fill", ["[-1, 2]", "non-negative"]),
    ("broadcast_to", lambda: tf.broadcast_to(f(2, 3), [4, 3]), "BroadcastTo",
     ["[2, 3]", "[4, 3]"]),
    ("broadcast_to_negative", lambda: tf.broadcast_to(f(1), [-1]), "BroadcastTo",
     ["[-1]", "non-negative"]),
    ("cumsum_axis", lambda: tf.cumsum(f(2, 3), axis=2), "Cumsum", ["axis 2", "rank 2"]),
    ("cumsum_scalar", lambda: tf.cumsum(scalar(), axis=0), "Cumsum", ["scalar"]),
    ("einsum_dims", lambda: tf.einsum("ij,jk->ik", f(2, 3), f(4, 5)), "Einsum",
     ["'j'", "3", "4"]),
    ("range_delta_0", lambda: tf.range(0., 5., 0.), "Range", ["delta"]),
    ("range_wrong_order", lambda: tf.range(5., 0., 1.), "Range", ["start 5", "limit 0"]),
    ("resize_size_0", lambda: tf.image.resize(f(1, 4, 4, 1), [0, 2]), "ResizeBilinear",
     ["[0, 2]", "positive"]),
    ("xent_shapes", lambda: R.SoftmaxCrossEntropyWithLogits(features=f(2, 3), labels=f(2, 4)),
     "SoftmaxCrossEntropyWithLogits", ["[2, 3]", "[2, 4]"]),
    ("sparse_xent_shapes", lambda: R.SparseSoftmaxCrossEntropyWithLogits(
        features=f(2, 3), labels=np.zeros(3, np.int32)),
     "SparseSoftmaxCrossEntropyWithLogits", ["[2, 3]", "[3]"]),
    ("gather_nd_depth", lambda: tf.gather_nd(f(2, 3), np.zeros((1, 3), np.int32)), "GatherNd",
     ["[1, 3]", "[2, 3]"]),
    ("scatter_nd_updates", lambda: tf.scatter_nd(np.zeros((2, 1), np.int32), f(3), [4]),
     "ScatterNd", ["[3]", "[2]"]),
    ("segment_sum_ids", lambda: tf.math.unsorted_segment_sum(f(2, 3), i32(0, 1, 0), 2),
     "UnsortedSegmentSum", ["[3]", "[2, 3]"]),
    ("segment_sum_negative_count", lambda: R.UnsortedSegmentSum(
        data=f(3), segment_ids=i32(0, 1, 2), num_segments=np.int32(-1)),
     "UnsortedSegmentSum", ["num_segments -1"]),
]

# Eager ops that TensorFlow runs with its own kernel on every device (Reshape, ExpandDims and
# Squeeze are registered for DEVICE_DEFAULT) or that the NPU does not implement (OneHot): the
# NPU gives TF's own error. The cluster cases below check our shape functions for them.
EAGER_TF_KERNEL = [
    ("reshape_size", lambda: tf.reshape(f(2, 3), [4]), "Reshape", ["6 values", "4"]),
    ("reshape_two_minus_one", lambda: tf.reshape(f(2, 3), [-1, -1]), "Reshape", ["-1"]),
    ("reshape_negative", lambda: tf.reshape(f(2, 3), [-2, -3]), "Reshape", ["-2"]),
    ("expand_dims_axis", lambda: tf.expand_dims(f(2, 3), 4), "ExpandDims", ["4", "2 dimensions"]),
    ("expand_dims_axis_negative", lambda: tf.expand_dims(f(2, 3), -5), "ExpandDims", ["-5"]),
    ("squeeze_not_1", lambda: tf.squeeze(f(2, 3), axis=0), "Squeeze", ["dim[0]", "got 2"]),
    ("squeeze_axis", lambda: tf.squeeze(f(1, 3), axis=2), "Squeeze", ["index 2"]),
    ("one_hot_negative_depth", lambda: tf.one_hot(i32(0, 1), -1), "OneHot", ["depth", "-1"]),
]

# Errors only the values show: the NPU kernel finds them while running (runtime messages).
EAGER_RUNTIME = [
    ("gather_index_past_the_end", lambda: tf.gather(f(3, 4), i32(0, 5)), "GatherV2",
     ["indices[1] = 5", "[0, 3)"]),
    ("gather_negative_index", lambda: tf.gather(f(3, 4), np.array([[0], [-4]], np.int32), axis=1),
     "GatherV2", ["indices[1] = -4", "[0, 4)"]),
    ("gather_nd_out_of_range", lambda: tf.gather_nd(f(3, 4), i32(7, 0)[None]), "GatherNd",
     ["[7, 0]", "[3,4]"]),
]


def _error(device, fn):
    with tf.device(device):
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (the class is what the test compares)
            return e
    return None


def _check(fn, op, words, compiled, cls=INVALID):
    cpu = _error(CPU, fn)
    assert isinstance(cpu, cls), f"TF on CPU: expected {cls.__name__}, got {cpu!r}"
    npu = _error(NPU, fn)
    assert npu is not None, f"the NPU accepted input that TF on CPU rejects: {cpu}"
    assert type(npu) is type(cpu), (f"NPU raised {type(npu).__name__}, CPU "
                                    f"{type(cpu).__name__}:\n{npu}")
    message = str(npu)
    # "(op X)": the graph engine's shape function rejected it, not TF's kernel after a fallback.
    assert (f"(op {op})" if compiled else f"[Op:{op}]") in message, message
    for word in words:
        assert word in message, f"{word!r} not in: {message}"


@pytest.mark.parametrize("fn, op, words", [c[1:] for c in EAGER], ids=[c[0] for c in EAGER])
def test_eager_invalid_input_raises_tf_class(fn, op, words):
    _check(fn, op, words, compiled=True)


@pytest.mark.parametrize("fn, op, words", [c[1:] for c in EAGER_RUNTIME],
                         ids=[c[0] for c in EAGER_RUNTIME])
def test_eager_invalid_values_found_while_running(fn, op, words):
    _check(fn, op, words, compiled=False)


@pytest.mark.parametrize("fn, op, words", [c[1:] for c in EAGER_TF_KERNEL],
                         ids=[c[0] for c in EAGER_TF_KERNEL])
def test_eager_invalid_input_in_tf_kernels(fn, op, words):
    _check(fn, op, words, compiled=False)


# Where TF's kernels say OutOfRangeError: a window parameter below 1 (compile time), a box
# index past the batch (found while running).
OUT_OF_RANGE = [
    ("extract_patches_rate_0", lambda: tf.image.extract_patches(
        f(1, 5, 5, 2), [1, 2, 2, 1], [1, 1, 1, 1], [1, 0, 0, 1], "VALID"), True,
     "ExtractImagePatches", ["rates", "out of range"]),
    ("crop_and_resize_box_index", lambda: tf.image.crop_and_resize(
        f(2, 4, 4, 1), f(1, 4), np.int32([5]), [2, 2]), False,
     "CropAndResize", ["box_index", "[0, batch_size = 2)"]),
]


@pytest.mark.parametrize("fn, compiled, op, words", [c[1:] for c in OUT_OF_RANGE],
                         ids=[c[0] for c in OUT_OF_RANGE])
def test_eager_out_of_range_keeps_tf_class(fn, compiled, op, words):
    _check(fn, op, words, compiled=compiled, cls=tf.errors.OutOfRangeError)


# TF on CPU says UnimplementedError; so does the NPU (the engine does not implement them either,
# and with the CPU fallback on, TF's kernel reports it).
UNIMPLEMENTED_CASES = [
    ("conv2d_batch_stride", lambda: R.Conv2D(input=f(1, 5, 5, 1), filter=f(3, 3, 1, 1),
                                             strides=[2, 1, 1, 1], padding="VALID")),
    ("max_pool_batch_window", lambda: R.MaxPool(input=f(2, 4, 4, 1), ksize=[2, 2, 2, 1],
                                                strides=[1, 1, 1, 1], padding="VALID")),
    ("avg_pool_depth_window", lambda: R.AvgPool(value=f(1, 2, 2, 4), ksize=[1, 1, 1, 2],
                                                strides=[1, 1, 1, 2], padding="VALID")),
]


@pytest.mark.parametrize("fn", [c[1] for c in UNIMPLEMENTED_CASES],
                         ids=[c[0] for c in UNIMPLEMENTED_CASES])
def test_eager_unimplemented_stays_unimplemented(fn, cpu_fallback):
    cpu, npu = _error(CPU, fn), _error(NPU, fn)
    assert isinstance(cpu, UNIMPLEMENTED), repr(cpu)
    assert type(npu) is type(cpu), repr(npu)


def _x(shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


# Inputs TensorFlow accepts although they look invalid: the NPU must give TF's result (empty
# outputs and pooling across channels run on CPU: the NPU kernels do not implement them).
ACCEPTED = [
    ("transpose_negative_perm", lambda: tf.transpose(_x((2, 3)), [-1, 0])),
    ("transpose_negative_perm_3d", lambda: tf.transpose(_x((2, 3, 4)), [-1, 0, 1])),
    ("max_pool_empty_output", lambda: tf.nn.max_pool2d(_x((1, 2, 2, 1)), 3, 1, "VALID")),
    ("avg_pool_empty_output", lambda: tf.nn.avg_pool2d(_x((1, 2, 2, 1)), 3, 1, "VALID")),
    ("conv2d_empty_output", lambda: tf.nn.conv2d(_x((1, 2, 2, 1)), f(3, 3, 1, 1), 2, "VALID")),
    ("max_pool_depth_window", lambda: tf.nn.max_pool2d(_x((1, 2, 2, 4)), [1, 1, 1, 2],
                                                       [1, 1, 1, 2], "VALID")),
    ("reduce_scalar_no_axes", lambda: R.Max(input=scalar(), axis=np.zeros(0, np.int32))),
    ("expand_dims_scalar", lambda: R.ExpandDims(input=scalar(), axis=np.int32(-1))),
    ("stack_scalars", lambda: R.Pack(values=[scalar(), scalar()], axis=-1)),
]


@pytest.mark.parametrize("fn", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_eager_inputs_tf_accepts_give_tf_results(fn, cpu_fallback):
    with tf.device(CPU):
        want = fn().numpy()
    with tf.device(NPU):
        got = fn()
    assert got.device.endswith("NPU:0"), got.device
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


# tf.function with unknown shapes: TF cannot check at trace time, the NPU cluster compile must.
# (body, argument, op type in the cluster, [text the NPU message must contain])
CLUSTER = [
    ("matmul", lambda x: tf.nn.relu(tf.matmul(x, tf.ones([4, 5]))), f(2, 3), "BatchMatMulV2",
     ["[2, 3]", "[4, 5]"]),
    ("reshape", lambda x: tf.reshape(x * 2.0, [4]), f(2, 3), "Reshape", ["[2, 3]", "[4]"]),
    ("reshape_two_minus_one", lambda x: tf.reshape(x * 2.0, [-1, -1]), f(2, 3), "Reshape",
     ["[-1, -1]"]),
    ("squeeze", lambda x: tf.squeeze(x * 2.0, axis=0), f(2, 3), "Squeeze", ["[2, 3]", "not 1"]),
    ("expand_dims", lambda x: tf.expand_dims(x * 2.0, 4), f(2, 3), "ExpandDims",
     ["dim 4", "rank 2"]),
    ("concat", lambda x: tf.concat([x, tf.ones([3, 4])], 0), f(2, 3), "ConcatV2",
     ["[2, 3]", "[3, 4]"]),
    ("transpose", lambda x: tf.transpose(x * 2.0, [1, 0, 2]), f(2, 3), "Transpose",
     ["[1, 0, 2]", "rank 2"]),
    ("reduce_sum", lambda x: tf.reduce_sum(x * 2.0, axis=2), f(2, 3), "Sum", ["axis 2"]),
    ("max_pool", lambda x: tf.nn.max_pool2d(x, 4, 1, "VALID"), f(1, 2, 2, 1), "MaxPool",
     ["negative"]),
    ("bias_add", lambda x: tf.nn.bias_add(x, tf.ones([4])), f(2, 3), "BiasAdd",
     ["[4]", "[2, 3]"]),
    ("add", lambda x: x + tf.ones([4, 3]), f(2, 3), "AddV2", ["[2, 3]", "[4, 3]"]),
    ("softmax", lambda x: tf.nn.softmax(x * 2.0), scalar(), "Softmax", [">= 1 dimension"]),
]


@pytest.mark.parametrize("body, arg, op, words", [c[1:] for c in CLUSTER],
                         ids=[c[0] for c in CLUSTER])
def test_function_with_unknown_shapes_raises_tf_class(body, arg, op, words):
    spec = [tf.TensorSpec(None, tf.float32)]
    errors = {}
    for device in (CPU, NPU):
        fn = tf.function(body, input_signature=spec)       # one trace per device
        errors[device] = _error(device, lambda: fn(arg))
    assert isinstance(errors[CPU], INVALID), repr(errors[CPU])
    assert type(errors[NPU]) is type(errors[CPU]), repr(errors[NPU])
    message = str(errors[NPU])
    assert "NPU cluster" in message and f"(op {op})" in message, message
    for word in words:
        assert word in message, f"{word!r} not in: {message}"
