"""Example inputs for the ops added for model coverage (Keras activations, attention, padding):
(op, tf.raw_ops inputs, attrs), the same form as tests/test_ge_ops.py's CASES. The coverage
sweep (op_coverage.py) runs both tables; tests/test_op_coverage.py checks these against TF.

tf_cpu_op: TF on the CPU as a reference, in a form every CPU build computes. TF's CPU kernels
differ by build: with oneDNN (Intel machines) they take NCHW/NCDHW pooling and convolution,
dilated convolution gradients, Conv3D with dilations, depthwise convolution in NCHW or with
unequal strides; plain Eigen (e.g. AVX2-only AMD machines) rejects all of these. tf_cpu_op
computes such cases, on every machine, through an exactly equivalent formulation of TF ops that
Eigen supports, so the reference is TF's numerics wherever the suite runs.
"""
import numpy as np
import tensorflow as tf

CPU = "/device:CPU:0"
# Convolution and pooling ops: tf_cpu_op rewrites channels-first layouts, dilations and
# depthwise unequal strides into forms plain Eigen computes.
_WINDOWED = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2dNative",
             "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
             "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
             "MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad", "MaxPoolGradGrad",
             "MaxPool3D", "AvgPool3D", "MaxPool3DGrad", "AvgPool3DGrad", "MaxPool3DGradGrad"}
_CHANNELS_LAST = {"NCHW": "NHWC", "NCDHW": "NDHWC"}
_SHAPE_ARGS = {"input_sizes", "orig_input_shape"}   # activation shapes, in data_format order
_FILTER_ARGS = {"filter", "filter_sizes"}           # [spatial..., in, out] in every data_format


def tf_cpu_op(op_type, inputs, attrs):
    """tf.raw_ops.<op_type>(**inputs, **attrs) on the CPU, differentiable with tf.GradientTape.

    Convolutions and pooling are computed in a form plain Eigen supports, on every machine (never
    through a oneDNN-only path, so the reference is the same computation everywhere):
    * NCHW/NCDHW: the activations (and activation-shape vectors) transposed to NHWC/NDHWC, the
      op run there (strides, ksize, dilations, explicit paddings permuted alike), the result
      transposed back (filter gradients are layout-free);
    * dilations > 1: the filter dilated explicitly (zeros inserted between its taps, with TF ops,
      so the tape maps gradients back to the real taps) and dilation 1; a filter backprop is
      computed for the dilated filter and its real taps picked out; SAME padding is unchanged
      (it depends on the dilated filter size only);
    * depthwise with unequal strides: the input padded explicitly as the real strides pad it,
      convolved with stride 1 and VALID padding, the result subsampled by the strides; its
      backprops are the tape's gradients of that forward (it is linear in each argument);
    * grouped Conv2D/Conv3D (filter depth a proper divisor of the input's channels; TF's CPU
      kernels compute no gradients for them, and only some builds Conv2D's forward): one
      convolution per group on its channels, concatenated; its backprops are the tape's
      gradients of that forward.
    """
    with tf.device(CPU):
        if op_type.startswith("FusedBatchNorm"):
            return _batch_norm(op_type, inputs, attrs)
        if op_type not in _WINDOWED:
            return getattr(tf.raw_ops, op_type)(**inputs, **attrs)
        inputs = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        fmt = attrs.get("data_format", "")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        if fmt in _CHANNELS_LAST:
            return _channels_last(op_type, inputs, dict(attrs), _CHANNELS_LAST[fmt])
        return _windowed(op_type, inputs, dict(attrs))


def _batch_norm(op_type, inputs, attrs):
    """FusedBatchNorm*: the outputs TF's builds fill differently in the form plain Eigen gives
    them (oneDNN returns V3's reserve_space_3 as [0] and the gradients' placeholders as
    scalars), and inference's reserve spaces, which Eigen leaves uninitialized, as the mean and
    variance given."""
    out = list(getattr(tf.raw_ops, op_type)(**inputs, **attrs))
    if "Grad" in op_type:
        return out[:3] + [tf.zeros([0], out[3].dtype)] * 2
    if not attrs.get("is_training", True):
        out[3:5] = [tf.stop_gradient(inputs["mean"]), tf.stop_gradient(inputs["variance"])]
    if op_type == "FusedBatchNormV3":
        out[5] = tf.zeros([], out[5].dtype)
    return out


def _channels_last(op_type, inputs, attrs, fmt):
    rank = len(fmt)
    to_last, to_first = [0, *range(2, rank), 1], [0, rank - 1, *range(1, rank - 1)]
    new = {}
    for k, v in inputs.items():
        if k in _FILTER_ARGS:
            new[k] = v
        elif k in _SHAPE_ARGS:
            new[k] = tf.gather(v, to_last)
        else:
            new[k] = tf.transpose(v, to_last)
    attrs["data_format"] = fmt
    for a in ("strides", "ksize", "dilations"):
        if a in attrs:
            attrs[a] = [list(attrs[a])[i] for i in to_last]
    if attrs.get("explicit_paddings"):
        p = list(attrs["explicit_paddings"])
        attrs["explicit_paddings"] = [q for i in to_last for q in p[2 * i:2 * i + 2]]
    out = _windowed(op_type, new, attrs)
    return out if "BackpropFilter" in op_type else tf.transpose(out, to_first)


def _windowed(op_type, inputs, attrs):
    """A channels-last window op, dilations and depthwise unequal strides rewritten."""
    rates = list(attrs.get("dilations", []))[1:-1]
    # An empty window is left alone: TF then computes an empty output (or rejects the filter)
    # without looking at the dilations, and zero-dilating it would change the output size.
    if any(d != 1 for d in rates) and 0 not in _window(inputs, len(rates)):
        attrs = {**attrs, "dilations": [1] * (len(rates) + 2)}
        if "filter" in inputs:
            inputs = {**inputs, "filter": _dilate(inputs["filter"], rates)}
        else:                                                       # a filter backprop
            sizes = np.array(inputs["filter_sizes"])
            sizes[:len(rates)] = (sizes[:len(rates)] - 1) * np.array(rates) + 1
            sizes = tf.constant(sizes, inputs["filter_sizes"].dtype)
            grad = _windowed(op_type, {**inputs, "filter_sizes": sizes}, attrs)
            return grad[tuple(slice(None, None, d) for d in rates)]
    if op_type.startswith("Depthwise") and attrs["strides"][1] != attrs["strides"][2]:
        return _depthwise_unequal_strides(op_type, inputs, attrs)
    if op_type.startswith(("Conv2D", "Conv3D")) and _conv_groups(inputs) > 1:
        return _grouped_conv(op_type, inputs, attrs)
    return getattr(tf.raw_ops, op_type)(**inputs, **attrs)


def _window(inputs, rank):
    """The filter's spatial sizes (from the filter or filter_sizes input)."""
    f = inputs["filter"].shape.as_list() if "filter" in inputs else list(np.array(inputs["filter_sizes"]))
    return [int(d) for d in f[:rank]]


def _dilate(f, rates):
    """f [spatial..., in, out] with rate-1 zeros inserted between the taps of each spatial axis."""
    for axis, d in enumerate(rates):
        if d == 1:
            continue
        shape = f.shape.as_list()
        pads = [[0, 0]] * (len(shape) + 1)
        pads[axis + 1] = [0, d - 1]
        f = tf.reshape(tf.pad(tf.expand_dims(f, axis + 1), pads),
                       shape[:axis] + [shape[axis] * d] + shape[axis + 1:])
        f = f[(slice(None),) * axis + (slice(0, (shape[axis] - 1) * d + 1),)]
    return f


def _backprop_by_tape(forward, op_type, inputs, attrs):
    """A convolution backprop (op_type ends in BackpropInput or BackpropFilter) as the tape's
    gradient of `forward` ({"input", "filter"}, attrs) -> output: it is linear in each argument."""
    filter_grad = "BackpropFilter" in op_type       # Conv3D's end in V2
    dy = inputs["out_backprop"]
    x = inputs["input"] if filter_grad else tf.zeros(np.array(inputs["input_sizes"]), dy.dtype)
    f = tf.zeros(np.array(inputs["filter_sizes"]), dy.dtype) if filter_grad else inputs["filter"]
    wrt = f if filter_grad else x
    with tf.GradientTape() as tape:
        tape.watch(wrt)
        y = forward({"input": x, "filter": f}, attrs)
    if y.shape != dy.shape:      # the tape would broadcast it; TF's kernels reject it
        raise tf.errors.InvalidArgumentError(None, None, f"{op_type}: out_backprop {dy.shape} does "
                                             f"not match the convolution output {y.shape}")
    return tape.gradient(y, wrt, output_gradients=dy)


def _depthwise_unequal_strides(op_type, inputs, attrs):
    """NHWC depthwise convolution (dilation 1) whose strides differ between rows and columns."""
    if op_type != "DepthwiseConv2dNative":     # backprops: gradients of the forward below
        return _backprop_by_tape(lambda ins, a: _depthwise_unequal_strides(
            "DepthwiseConv2dNative", ins, a), op_type, inputs, attrs)
    x, f = inputs["input"], inputs["filter"]
    strides, padding = list(attrs["strides"])[1:3], attrs["padding"]
    padding = padding.decode() if isinstance(padding, bytes) else padding
    pads = [[0, 0]]
    for axis, (n, k, s) in enumerate(zip(x.shape[1:3], f.shape[:2], strides)):
        if padding == "SAME":
            total = max((-(-n // s) - 1) * s + k - n, 0)
            pads.append([total // 2, total - total // 2])
        elif padding == "EXPLICIT":
            pads.append(list(attrs["explicit_paddings"])[2 * axis + 2:2 * axis + 4])
        else:
            pads.append([0, 0])
    y = tf.raw_ops.DepthwiseConv2dNative(input=tf.pad(x, pads + [[0, 0]]), filter=f,
                                         strides=[1, 1, 1, 1], padding="VALID")
    return y[:, ::strides[0], ::strides[1], :]


def _conv_groups(inputs):
    """Groups of a channels-last Conv2D/Conv3D-family case: input channels / filter depth when
    that is a valid grouping (TF's CPU kernels report an invalid one themselves), else 1."""
    c = int(np.array(inputs["input_sizes"])[-1]) if "input_sizes" in inputs else inputs["input"].shape[-1]
    f = [int(d) for d in np.array(inputs["filter_sizes"])] if "filter_sizes" in inputs \
        else inputs["filter"].shape.as_list()
    depth, out = f[-2], f[-1]
    if len(f) not in (4, 5) or depth <= 0 or c == 0 or c % depth or c == depth:
        return 1
    return c // depth if out % (c // depth) == 0 else 1


def _grouped_conv(op_type, inputs, attrs):
    """Channels-last grouped Conv2D or Conv3D: group g's input channels convolved with its
    filter columns, one plain convolution each, concatenated; backprops by the tape."""
    forward = "Conv3D" if op_type.startswith("Conv3D") else "Conv2D"
    if op_type != forward:
        return _backprop_by_tape(lambda ins, a: _grouped_conv(forward, ins, a),
                                 op_type, inputs, attrs)
    groups, conv = _conv_groups(inputs), getattr(tf.raw_ops, forward)
    pieces = zip(tf.split(inputs["input"], groups, axis=-1), tf.split(inputs["filter"], groups, axis=-1))
    return tf.concat([conv(input=x, filter=f, **attrs) for x, f in pieces], axis=-1)


_R = np.random.default_rng(1)


def _f32(*shape, lo=-2.0, hi=2.0):
    return _R.uniform(lo, hi, shape).astype(np.float32)


def _i32(lo, hi, *shape):
    return _R.integers(lo, hi, shape).astype(np.int32)


_UNIT = _f32(3, 4, lo=-0.9, hi=0.9)          # inside the domain of asin/acos/atanh


class Var:
    """An input that is a resource variable: the sweep creates one holding `value` on the device
    the op runs on, passes its handle, and compares the variable's value after the op as one
    more output (ResourceApply*, ResourceScatter* ...)."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def __repr__(self):
        return f"Var({self.value.dtype}{list(self.value.shape)})"


class ListOf:
    """An input that is a TensorList: the sweep makes one from the rows of `value` on the device
    the op runs on (TensorListFromTensor). A list the op returns is compared as its stacked
    elements."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def __repr__(self):
        return f"ListOf({self.value.dtype}{list(self.value.shape)})"


_X, _Y = _f32(3, 4), _f32(4)
_KEY = np.array([0x9A3F00C1D2E4F567], np.uint64)
_COUNTER = np.array([0xFFFFFFFFFFFFFFFE, 0x0123456789ABCDEF], np.uint64)   # the low word carries
_POOL = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
_POOL_X = _f32(2, 6, 6, 3)
_POOLED = tf_cpu_op("MaxPool", {"input": _POOL_X}, _POOL).numpy()
_POOL3D = dict(ksize=[1, 2, 3, 2, 1], strides=[1, 2, 2, 1, 1], padding="SAME")
_POOL3D_X = _f32(2, 5, 6, 4, 3)
_POOLED3D = tf_cpu_op("MaxPool3D", {"input": _POOL3D_X}, _POOL3D).numpy()

CASES = [
    *[(op, {"x": _f32(3, 4)}, {}) for op in
      ("Erf", "Erfc", "Expm1", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Rint")],
    ("Inv", {"x": _f32(3, 4, lo=0.5, hi=2.0) * np.array([1, -1, 1, -1], np.float32)}, {}),
    ("Rint", {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)}, {}),
    *[(op, {"x": _UNIT}, {}) for op in ("Asin", "Acos", "Atanh")],
    ("Acosh", {"x": _f32(3, 4, lo=1.1, hi=3.0)}, {}),
    ("Expint", {"x": _f32(3, 4, lo=0.05, hi=6.0)}, {}),
    ("Invert", {"x": _i32(-50, 50, 6)}, {}),
    ("Selu", {"features": _f32(3, 4)}, {}),
    ("SeluGrad", {"gradients": _f32(3, 4), "outputs": _f32(3, 4, lo=-1.7, hi=2.0)}, {}),
    ("SoftsignGrad", {"gradients": _f32(3, 4), "features": _f32(3, 4)}, {}),
    ("InvGrad", {"y": _f32(3, 4), "dy": _f32(3, 4)}, {}),
    ("Atan2", {"y": _f32(3, 4), "x": _f32(4)}, {}),
    ("Xlogy", {"x": np.array([0, 1, -2, 0], np.float32), "y": np.array([0, 2, 3, 5], np.float32)}, {}),
    ("Xlog1py", {"x": np.array([0, 1, -2, 3], np.float32), "y": np.array([-1, 2, 0.5, 5], np.float32)}, {}),
    ("Xdivy", {"x": np.array([0, 1, -2, 3], np.float32), "y": np.array([0, 2, 0.5, 5], np.float32)}, {}),
    ("MulNoNan", {"x": np.array([1.5, 1, -2, np.nan], np.float32), "y": np.array([0, 2, 0.5, 0], np.float32)}, {}),
    ("TruncateDiv", {"x": _f32(3, 4), "y": _f32(4, lo=0.5, hi=2.0)}, {}),
    ("TruncateDiv", {"x": _i32(-9, 9, 3, 4), "y": np.array([3, -2, 1, -4], np.int32)}, {}),
    ("TruncateMod", {"x": _f32(3, 4), "y": _f32(4, lo=0.5, hi=2.0)}, {}),
    ("TruncateMod", {"x": _i32(-9, 9, 3, 4), "y": np.array([3, -2, 1, -4], np.int32)}, {}),
    ("ApproximateEqual", {"x": _X, "y": _X + np.array([0, 1e-6, 1e-3, 0], np.float32)}, {"tolerance": 1e-4}),
    ("Einsum", {"inputs": [_f32(2, 3, 4), _f32(2, 4, 5)]}, {"equation": "bij,bjk->bik"}),
    ("Einsum", {"inputs": [_f32(2, 5, 2, 4), _f32(2, 6, 2, 4)]}, {"equation": "aecd,abcd->acbe"}),
    ("Einsum", {"inputs": [_f32(2, 5, 8), _f32(8, 2, 4)]}, {"equation": "abc,cde->abde"}),
    ("Einsum", {"inputs": [_f32(2, 3, 5, 4), _f32(4, 6)]}, {"equation": "...k,kn->...n"}),
    ("Einsum", {"inputs": [_f32(3, 3)]}, {"equation": "ii->i"}),
    ("Einsum", {"inputs": [_f32(3)]}, {"equation": "i->ii"}),
    ("ConcatOffset", {"concat_dim": np.int32(1),
                      "shape": [np.array([2, 3, 5], np.int32), np.array([2, 4, 5], np.int32)]}, {}),
    ("MirrorPad", {"input": _f32(2, 4, 5), "paddings": np.array([[0, 0], [1, 2], [3, 1]], np.int32)},
     {"mode": "REFLECT"}),
    ("MirrorPad", {"input": _f32(2, 4, 5), "paddings": np.array([[1, 0], [2, 2], [0, 5]], np.int32)},
     {"mode": "SYMMETRIC"}),
    ("MirrorPadGrad", {"input": _f32(2, 7, 9), "paddings": np.array([[0, 0], [1, 2], [3, 1]], np.int32)},
     {"mode": "REFLECT"}),
    ("MirrorPadGrad", {"input": _f32(3, 8, 10), "paddings": np.array([[1, 0], [2, 2], [0, 5]], np.int32)},
     {"mode": "SYMMETRIC"}),
    ("ResizeBilinear", {"images": _f32(2, 5, 7, 3), "size": np.array([10, 14], np.int32)},
     {"half_pixel_centers": True}),
    ("ResizeBilinear", {"images": _f32(2, 5, 7, 3), "size": np.array([3, 4], np.int32)},
     {"align_corners": True}),
    ("ResizeBilinear", {"images": _i32(0, 255, 1, 4, 4, 2), "size": np.array([7, 5], np.int32)}, {}),
    ("ResizeBilinearGrad", {"grads": _f32(2, 10, 14, 3), "original_image": _f32(2, 5, 7, 3)},
     {"half_pixel_centers": True}),
    ("ResizeBilinearGrad", {"grads": _f32(2, 3, 4, 3), "original_image": _f32(2, 5, 7, 3)},
     {"align_corners": True}),
    # stateless random ops (Dropout, initializers): any 64-bit key and 128-bit counter
    ("StatelessRandomGetKeyCounter", {"seed": np.array([3, -7], np.int32)}, {}),
    *[(op, {"key": _KEY, "counter": _COUNTER, "shape": np.array([3, 5], np.int32),
            "alg": np.int32(alg)}, {"dtype": dtype})
      for op in ("StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2")
      for alg, dtype in ((1, tf.float32), (3, tf.float16), (1, tf.bfloat16))],
    *[(op, {"seed": np.array([5, 11], np.int32), "shape": np.array([2, 7], np.int32)}, {"dtype": tf.float32})
      for op in ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal")],
    *[(op, {"x": _f32(3, 4, 5, lo=0.5, hi=1.5) * np.array([1, -1, 1, 1, -1], np.float32),
            "axis": np.int32(axis)}, {"exclusive": ex, "reverse": rev})
      for op in ("Cumsum", "Cumprod") for axis, ex, rev in ((1, False, False), (-1, True, True))],
    ("Cumsum", {"x": _i32(-9, 9, 4, 3), "axis": np.int32(0)}, {"reverse": True}),
    ("MaxPoolGradGrad", {"orig_input": _POOL_X, "orig_output": _POOLED, "grad": _f32(2, 6, 6, 3)}, _POOL),
    ("MaxPoolGradGrad", {"orig_input": np.round(_POOL_X), "grad": _f32(2, 6, 6, 3),
                         "orig_output": tf_cpu_op("MaxPool", {"input": np.round(_POOL_X)}, _POOL).numpy()},
     _POOL),                                                    # ties: the first maximum wins
    ("Conv3D", {"input": _f32(2, 5, 6, 4, 3), "filter": _f32(2, 3, 2, 3, 4)},
     dict(strides=[1, 1, 2, 1, 1], padding="SAME")),
    ("Conv3D", {"input": _f32(1, 3, 5, 6, 4), "filter": _f32(2, 2, 3, 3, 2)},
     dict(strides=[1, 1, 1, 1, 1], padding="SAME", data_format="NCDHW")),
    ("Conv3D", {"input": _f32(1, 5, 6, 4, 3), "filter": _f32(2, 3, 2, 3, 2)},
     dict(strides=[1, 1, 1, 1, 1], padding="VALID", dilations=[1, 2, 1, 1, 1])),
    ("Conv3DBackpropInputV2", {"input_sizes": np.array([2, 5, 6, 4, 3], np.int32),
                               "filter": _f32(2, 3, 2, 3, 4), "out_backprop": _f32(2, 5, 3, 4, 4)},
     dict(strides=[1, 1, 2, 1, 1], padding="SAME")),
    ("Conv3DBackpropFilterV2", {"input": _f32(2, 5, 6, 4, 3), "filter_sizes": np.array([2, 3, 2, 3, 4], np.int32),
                                "out_backprop": _f32(2, 4, 2, 3, 4)},
     dict(strides=[1, 1, 2, 1, 1], padding="VALID")),
    # grouped (Keras' Conv3D(groups=G)): 2 groups of 2 channels; 4 of one, NCDHW
    ("Conv3D", {"input": _f32(2, 4, 5, 5, 4), "filter": _f32(3, 3, 3, 2, 6)},
     dict(strides=[1, 1, 1, 1, 1], padding="SAME")),
    ("Conv3D", {"input": _f32(1, 4, 3, 5, 4), "filter": _f32(2, 2, 2, 1, 8)},
     dict(strides=[1, 1, 1, 2, 2], padding="SAME", data_format="NCDHW")),
    ("Conv3DBackpropInputV2", {"input_sizes": np.array([2, 4, 5, 5, 4], np.int32),
                               "filter": _f32(3, 3, 3, 2, 6), "out_backprop": _f32(2, 4, 5, 5, 6)},
     dict(strides=[1, 1, 1, 1, 1], padding="SAME")),
    ("Conv3DBackpropFilterV2", {"input": _f32(2, 4, 5, 5, 4), "filter_sizes": np.array([3, 3, 3, 2, 6], np.int32),
                                "out_backprop": _f32(2, 1, 2, 2, 6)},
     dict(strides=[1, 2, 2, 2, 1], padding="VALID")),
    ("GatherNd", {"params": _f32(4, 5, 3), "indices": np.array([[[1, 2], [3, 0]], [[0, 4], [1, 2]]], np.int32)}, {}),
    ("GatherNd", {"params": _i32(-9, 9, 4, 5), "indices": np.array([[3], [0], [3]], np.int64)}, {}),
    ("ScatterNd", {"indices": np.array([[1], [3], [1]], np.int32), "updates": _f32(3, 5),
                   "shape": np.array([4, 5], np.int32)}, {}),               # repeated index: summed
    ("ScatterNd", {"indices": np.array([[0, 1], [2, 2]], np.int64), "updates": _i32(-9, 9, 2),
                   "shape": np.array([3, 4], np.int64)}, {}),
    *[(op, {"input": _POOL3D_X}, _POOL3D) for op in ("MaxPool3D", "AvgPool3D")],
    ("AvgPool3D", {"input": np.moveaxis(_POOL3D_X, -1, 1)},
     dict(ksize=[1, 1, 2, 2, 2], strides=[1, 1, 2, 1, 2], padding="VALID", data_format="NCDHW")),
    ("MaxPool3DGrad", {"orig_input": _POOL3D_X, "orig_output": _POOLED3D, "grad": _f32(*_POOLED3D.shape)}, _POOL3D),
    ("MaxPool3DGrad", {"orig_input": np.round(_POOL3D_X), "grad": _f32(*_POOLED3D.shape),
                       "orig_output": tf_cpu_op("MaxPool3D", {"input": np.round(_POOL3D_X)}, _POOL3D).numpy()},
     _POOL3D),                                       # ties: every maximal element gets the gradient
    ("MaxPool3DGradGrad", {"orig_input": np.round(_POOL3D_X), "grad": _f32(*_POOL3D_X.shape),
                           "orig_output": tf_cpu_op("MaxPool3D", {"input": np.round(_POOL3D_X)}, _POOL3D).numpy()},
     _POOL3D),
    ("AvgPool3DGrad", {"orig_input_shape": np.array(_POOL3D_X.shape, np.int32), "grad": _f32(*_POOLED3D.shape)},
     _POOL3D),
]
