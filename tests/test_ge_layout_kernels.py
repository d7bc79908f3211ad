"""NC1HWC0 / FRACTAL_Z / FILTER_KN kernels of the simulated NPU (runtime/kernels/transdata.cc,
*_5hd.cc).

TransData's storage is checked byte for byte against graph_engine.ops.layout.pack (an ND
arena value aliasing the padded one exposes the storage); every 5HD kernel runs between
TransData conversions and is compared with the ND kernel (itself checked against TF by
test_kernels_*.py) and, for the convolutions, with TF on the CPU."""
import numpy as np
import pytest

from graph_engine.compiler import model_format as mf
from graph_engine import ops
from graph_engine.ops import layout
from test_kernels_harness import (C, FLOAT_TYPES, GraphBuilder, assert_float_close, dt_enum,
                                  random, run_kernel, tf_cpu, to_f32)

ND, NC1HWC0, FRACTAL_Z, NCHW = mf.Format.ND, mf.Format.NC1HWC0, mf.Format.FRACTAL_Z, mf.Format.NCHW
FILTER_KN = mf.Format.FILTER_KN
DTYPE_IDS = ["float32", "float16", "bfloat16"]
ALL_DTYPES = FLOAT_TYPES + [np.int8, np.uint8, np.int32, np.float64]


def padded_value(g, dtype, shape, fmt, offset=None):
    """An arena value stored in `fmt` (at `offset`, or at the arena's end)."""
    storage = layout.storage_shape(fmt, shape, dt_enum(dtype))
    nbytes = int(np.prod(storage)) * np.dtype(dtype).itemsize
    if offset is None:
        g.arena += -g.arena % 64
        offset, g.arena = g.arena, g.arena + nbytes
    g.values.append(mf.Value(dt_enum(dtype), tuple(shape), nbytes, mf.Kind.ARENA, offset, fmt))
    return len(g.values) - 1


def to_format(g, vid, dtype, shape, fmt, src=ND):
    out_shape = (shape[0], shape[2], shape[3], shape[1]) if src == NCHW else shape
    out = padded_value(g, dtype, out_shape, fmt)
    g.kernel("TransData", [vid], [out], T=dt_enum(dtype), src_format=int(src), dst_format=int(fmt))
    return out


def storage_of(g, vid, dtype, shape, fmt):
    """Makes the raw storage of padded arena value `vid` a model output."""
    v = g.values[vid]
    alias = len(g.values)
    g.values.append(mf.Value(v.dtype, layout.storage_shape(fmt, shape, v.dtype), v.nbytes,
                             mf.Kind.ARENA, v.where, ND))
    g.add_output(alias)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 2, 16), (2, 3, 3, 37), (3, 40), (1, 1, 1, 1),
                                   (2, 5, 33, 3), (1, 2, 9, 32)])
def test_transdata_nc1hwc0_storage_and_round_trip(shape, dtype):
    x = random(shape, dtype, -100, 100, seed=1)
    g = GraphBuilder()
    xin = g.input(dtype, shape)
    packed = to_format(g, xin, dtype, shape, NC1HWC0)
    back = g.output(dtype, shape)
    g.kernel("TransData", [packed], [back], T=dt_enum(dtype), src_format=int(NC1HWC0), dst_format=0)
    storage_of(g, packed, dtype, shape, NC1HWC0)
    got_back, got_storage = g.load().run([x])
    np.testing.assert_array_equal(got_back, x)
    np.testing.assert_array_equal(got_storage, layout.pack(x, NC1HWC0))
    assert got_storage.shape[-1] == (32 if np.dtype(dtype).itemsize == 1 else 16)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8], ids=["float32", "float16", "int8"])
@pytest.mark.parametrize("shape", [(2, 4, 7, 3), (1, 3, 5, 37)])
def test_transdata_to_nc1hwc0_zeroes_the_padding_of_a_reused_buffer(shape, dtype):
    """The padded value goes to arena bytes an earlier kernel wrote: its padding lanes must
    still read zero (the storage matches layout.pack byte for byte)."""
    x = random(shape, dtype, -100, 100, seed=4)
    storage = layout.storage_shape(NC1HWC0, shape, dt_enum(dtype))
    junk = np.full(storage, 7, dtype)
    g = GraphBuilder()
    xin, junk_in = g.input(dtype, shape), g.input(dtype, storage)
    old = g._value(dtype, storage, mf.Kind.ARENA, 0)
    g.arena = g.values[old].nbytes
    g.kernel("Identity", [junk_in], [old])                     # old bytes: all 7
    packed = padded_value(g, dtype, shape, NC1HWC0, offset=0)
    g.kernel("TransData", [xin], [packed], T=dt_enum(dtype), src_format=0, dst_format=int(NC1HWC0))
    storage_of(g, packed, dtype, shape, NC1HWC0)
    got = g.load().run([x, junk])[0]
    np.testing.assert_array_equal(got, layout.pack(x, NC1HWC0))


@pytest.mark.parametrize("fmt", [FRACTAL_Z, FILTER_KN], ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8], ids=["float32", "float16", "int8"])
@pytest.mark.parametrize("shape", [(3, 3, 5, 7), (1, 1, 16, 16), (2, 3, 40, 33), (7, 7, 3, 64)])
def test_transdata_filter_storage_and_round_trip(shape, dtype, fmt):
    w = random(shape, dtype, -100, 100, seed=2)
    g = GraphBuilder()
    win = g.input(dtype, shape)
    packed = to_format(g, win, dtype, shape, fmt)
    back = g.output(dtype, shape)
    g.kernel("TransData", [packed], [back], T=dt_enum(dtype), src_format=int(fmt), dst_format=0)
    storage_of(g, packed, dtype, shape, fmt)
    got_back, got_storage = g.load().run([w])
    np.testing.assert_array_equal(got_back, w)
    np.testing.assert_array_equal(got_storage, layout.pack(w, fmt))


def test_filter_kn_rows_are_the_real_input_channels_per_c0_block():
    # (c1, kh, kw, c0) over real channels: block 1 of 20 input channels holds 4 per tap
    w = np.arange(2 * 3 * 20 * 5, dtype=np.float32).reshape(2, 3, 20, 5)
    s = layout.pack(w, FILTER_KN)
    assert s.shape == (2 * 3 * 20, 16)
    np.testing.assert_array_equal(s[0, :5], w[0, 0, 0])               # c1 0, tap 0, c0 0
    np.testing.assert_array_equal(s[16, :5], w[0, 1, 0])              # c1 0, tap 1
    np.testing.assert_array_equal(s[6 * 16 + 4 + 2, :5], w[0, 1, 18])  # c1 1, tap 1, c0 2
    assert not s[:, 5:].any()                                         # padding columns zero


def test_filter_kn_rejects_nchw_and_half_convolutions_with_clear_errors():
    g = GraphBuilder()
    win = g.input(np.float32, (2, 3, 4, 5))
    to_format(g, win, np.float32, (2, 3, 4, 5), FILTER_KN, src=NCHW)
    with pytest.raises(Exception, match="FILTER_KN converts from/to HWIO filters"):
        g.load()
    x, w = random((1, 5, 5, 3), np.float16, seed=4), random((3, 3, 3, 8), np.float16, seed=5)
    with pytest.raises(Exception, match="reads FILTER_KN filters in float32 only"):
        run_5hd("Conv2D", [x, w], [NC1HWC0, FILTER_KN], np.float16, (1, 5, 5, 8),
                strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC")


def test_transdata_from_and_to_nchw_moves_the_channel_axis():
    x = random((2, 21, 3, 4), np.float32, seed=3)       # NCHW
    g = GraphBuilder()
    xin = g.input(np.float32, x.shape)
    packed = to_format(g, xin, np.float32, x.shape, NC1HWC0, src=NCHW)
    back = g.output(np.float32, x.shape)
    g.kernel("TransData", [packed], [back], T=1, src_format=int(NC1HWC0), dst_format=int(NCHW))
    storage_of(g, packed, np.float32, (2, 3, 4, 21), NC1HWC0)
    got_back, got_storage = g.load().run([x])
    np.testing.assert_array_equal(got_back, x)
    np.testing.assert_array_equal(got_storage, layout.pack(x.transpose(0, 2, 3, 1), NC1HWC0))


def test_transdata_rejects_bad_format_pairs_with_a_clear_error():
    g = GraphBuilder()
    xin = g.input(np.float32, (2, 3))
    out = g.output(np.float32, (2, 3))
    g.kernel("TransData", [xin], [out], T=1, src_format=0, dst_format=0)
    with pytest.raises(Exception, match="reads or writes NC1HWC0/FRACTAL_Z/FILTER_KN only"):
        g.load()


def test_nd_kernels_still_reject_padded_formats():
    g = GraphBuilder()
    xin = g.input(np.float32, (2, 4, 4, 3))
    packed = to_format(g, xin, np.float32, (2, 4, 4, 3), NC1HWC0)
    out = g.output(np.float32, (2, 4, 4, 3))
    g.kernel("Softmax", [packed], [out])
    with pytest.raises(Exception, match="storage format 3"):
        g.load()


# ---- 5HD kernels vs the ND kernels ---------------------------------------------------------

def run_5hd(kernel, inputs, formats, out_dtype, out_shape, out_format=NC1HWC0, **attrs):
    """Runs `kernel` on inputs converted to `formats` (None: fed ND as is); converts the result
    back to ND."""
    g = GraphBuilder(kernel)
    ins = []
    for x, fmt in zip(inputs, formats):
        vid = g.input(x.dtype, x.shape)
        ins.append(vid if fmt in (None, ND) else to_format(g, vid, x.dtype, x.shape, fmt))
    if out_format == ND:
        out = g.output(out_dtype, out_shape)
        g.kernel(kernel, ins, [out], **attrs)
    else:
        y = padded_value(g, out_dtype, out_shape, out_format)
        g.kernel(kernel, ins, [y], **attrs)
        out = g.output(out_dtype, out_shape)
        g.kernel("TransData", [y], [out], T=dt_enum(out_dtype), src_format=int(out_format), dst_format=0)
    model = g.load()
    assert model.kernel_names.count(kernel) == 1
    return model.run(inputs)[0]


def nd(kernel, inputs, dtype, shape, **attrs):
    return run_kernel(kernel, inputs, [(dtype, shape)], attrs)[0]


CONV_CASES = [  # input NHWC, filter HWIO, strides, padding, dilations
    ((2, 7, 7, 3), (3, 3, 3, 8), 1, "SAME", 1),
    ((1, 9, 8, 20), (3, 3, 20, 17), 2, "VALID", 1),
    ((2, 6, 6, 16), (1, 1, 16, 33), 1, "SAME", 1),
    ((1, 10, 10, 5), (3, 3, 5, 4), 1, "SAME", 2),
    # >= 128 output pixels (the compact im2col; fewer: per-block GEMMs): two C1 blocks, one
    # partly real; 1x1; dilated; strided SAME; several row blocks that straddle images
    ((2, 12, 12, 20), (3, 3, 20, 24), 1, "SAME", 1),
    ((2, 10, 10, 16), (1, 1, 16, 33), 1, "SAME", 1),
    ((2, 10, 10, 5), (3, 3, 5, 4), 1, "SAME", 2),
    ((2, 17, 17, 18), (3, 3, 18, 16), 2, "SAME", 1),
    ((4, 40, 40, 3), (3, 3, 3, 32), 1, "SAME", 1),
    # direct (>= 128 output pixels; the cases above with as many too): a 7x7/2 stem, a
    # non-square window
    ((2, 23, 21, 3), (7, 7, 3, 64), 2, "SAME", 1),
    ((3, 13, 14, 4), (2, 5, 4, 40), 1, "VALID", 1),
]


# The filter formats of each dtype: float32 filters are stored FILTER_KN (read in place) by the
# layout pass; FRACTAL_Z (gathered and kept, or per block) serves every float type.
FILTER_CASES = [(np.float32, FILTER_KN)] + [(d, FRACTAL_Z) for d in FLOAT_TYPES]
FILTER_IDS = ["float32-FILTER_KN"] + [f"{i}-FRACTAL_Z" for i in DTYPE_IDS]


@pytest.mark.parametrize("dtype,fmt", FILTER_CASES, ids=FILTER_IDS)
@pytest.mark.parametrize("xs,ws,s,pad,d", CONV_CASES)
def test_conv2d_5hd_matches_tf(xs, ws, s, pad, d, dtype, fmt):
    x, w = random(xs, dtype, -1, 1, seed=4), random(ws, dtype, -1, 1, seed=5)
    attrs = dict(strides=[1, s, s, 1], padding=pad, dilations=[1, d, d, 1], data_format="NHWC")
    ref = tf_cpu("Conv2D", input=to_f32(x), filter=to_f32(w), **attrs)
    got = run_5hd("Conv2D", [x, w], [NC1HWC0, fmt], dtype, ref.shape, **attrs)
    assert_float_close(got, ref, dtype)


@pytest.mark.parametrize("fmt", [FILTER_KN, FRACTAL_Z], ids=lambda f: f.name)
def test_conv2d_5hd_on_an_empty_batch(fmt):
    x, w = np.zeros((0, 4, 4, 3), np.float32), random((3, 3, 3, 5), seed=4)
    got = run_5hd("Conv2D", [x, w], [NC1HWC0, fmt], np.float32, (0, 4, 4, 5),
                  strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC")
    assert got.shape == (0, 4, 4, 5)


@pytest.mark.parametrize("xs,d,fmt", [((2, 9, 9, 21), 1, FILTER_KN), ((2, 9, 9, 5), 2, FILTER_KN),
                                      ((2, 9, 9, 21), 1, FRACTAL_Z), ((1, 3, 3, 21), 1, FRACTAL_Z)],
                         ids=["direct", "compact", "direct-kept", "per_block"])
def test_conv2d_5hd_ignores_nan_in_input_padding_lanes(xs, d, fmt):
    """NC1HWC0 padding lanes are unspecified (docs/layouts.md): NaN there must not reach the
    output, neither through the direct rows, the compact im2col (dilated) nor per-block GEMMs."""
    x, w = random(xs, seed=10), random((3, 3, xs[-1], 6), seed=11)
    storage = layout.pack(x, NC1HWC0).copy()
    storage[:, -1, ..., xs[-1] % 16:] = np.nan
    attrs = dict(strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC", dilations=[1, d, d, 1])
    ref = tf_cpu("Conv2D", input=x, filter=w, **attrs)
    g = GraphBuilder("Conv2D")
    sin, win = g.input(np.float32, storage.shape), g.input(np.float32, w.shape)
    xv = padded_value(g, np.float32, xs, NC1HWC0)
    raw = len(g.values)              # the storage of xv seen as ND, written by Neg
    g.values.append(mf.Value(dt_enum(np.float32), storage.shape, g.values[xv].nbytes,
                             mf.Kind.ARENA, g.values[xv].where, ND))
    g.kernel("Neg", [sin], [raw])
    y = padded_value(g, np.float32, ref.shape, NC1HWC0)
    g.kernel("Conv2D", [xv, to_format(g, win, np.float32, w.shape, fmt)], [y], **attrs)
    out = g.output(np.float32, ref.shape)
    g.kernel("TransData", [y], [out], T=1, src_format=int(NC1HWC0), dst_format=0)
    got = g.load().run([-storage, w])[0]
    assert_float_close(got, ref, np.float32)


@pytest.mark.parametrize("fmt", [FILTER_KN, FRACTAL_Z], ids=lambda f: f.name)
@pytest.mark.parametrize("activation", ["", "Relu", "Relu6", "Sigmoid", "Elu", "Swish"])
def test_fused_conv2d_5hd_matches_the_nd_fused_kernel(activation, fmt):
    x, w = random((2, 8, 8, 12), seed=6), random((3, 3, 12, 19), seed=7)
    b, r = random((19,), seed=8), random((2, 8, 8, 19), seed=9)
    attrs = dict(strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC", has_bias=True,
                 has_residual=True, activation=activation, alpha=0.2)
    ref = nd("NpuFusedConv2D", [x, w, b, r], np.float32, (2, 8, 8, 19), **attrs)
    got = run_5hd("NpuFusedConv2D", [x, w, b, r], [NC1HWC0, fmt, ND, NC1HWC0], np.float32,
                  (2, 8, 8, 19), **attrs)
    assert_float_close(got, ref, np.float32)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("xs,k,s,pad", [((2, 9, 9, 20), 3, 1, "SAME"), ((1, 8, 7, 32), 3, 2, "VALID"),
                                        ((1, 6, 6, 5), 5, 2, "SAME")])
def test_depthwise_5hd_matches_tf(xs, k, s, pad, dtype):
    x, w = random(xs, dtype, -1, 1, seed=10), random((k, k, xs[3], 1), dtype, -1, 1, seed=11)
    attrs = dict(strides=[1, s, s, 1], padding=pad, data_format="NHWC")
    ref = tf_cpu("DepthwiseConv2dNative", input=to_f32(x), filter=to_f32(w), **attrs)
    got = run_5hd("DepthwiseConv2dNative", [x, w], [NC1HWC0, ND], dtype, ref.shape, **attrs)
    assert_float_close(got, ref, dtype)


@pytest.mark.parametrize("activation,has_residual", [("Relu6", False), ("Relu", True), ("", True),
                                                     ("Swish", True)])
def test_fused_depthwise_5hd_matches_the_nd_fused_kernel(activation, has_residual):
    x, w, b = random((2, 7, 7, 24), seed=12), random((3, 3, 24, 1), seed=13), random((24,), seed=14)
    r = random((2, 4, 4, 24), seed=15)
    attrs = dict(strides=[1, 2, 2, 1], padding="SAME", data_format="NHWC", has_bias=True,
                 has_residual=has_residual, activation=activation, alpha=0.2)
    ins, formats = [x, w, b] + [r] * has_residual, [NC1HWC0, ND, ND] + [NC1HWC0] * has_residual
    ref = nd("NpuFusedDepthwiseConv2D", ins, np.float32, (2, 4, 4, 24), **attrs)
    got = run_5hd("NpuFusedDepthwiseConv2D", ins, formats, np.float32, (2, 4, 4, 24), **attrs)
    assert_float_close(got, ref, np.float32)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op", ["MaxPool", "AvgPool"])
@pytest.mark.parametrize("xs,k,s,pad", [((2, 8, 8, 3), 2, 2, "VALID"), ((1, 9, 9, 20), 3, 2, "SAME")])
def test_pool_5hd_matches_tf(op, xs, k, s, pad, dtype):
    x = random(xs, dtype, seed=15)
    attrs = dict(ksize=[1, k, k, 1], strides=[1, s, s, 1], padding=pad, data_format="NHWC")
    ref = tf_cpu(op, **{"input" if op == "MaxPool" else "value": to_f32(x)}, **attrs)
    got = run_5hd(op, [x], [NC1HWC0], dtype, ref.shape, **attrs)
    assert_float_close(got, ref, dtype)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op,shapes", [
    ("AddV2", [(2, 4, 4, 20), (2, 4, 4, 20)]), ("Mul", [(2, 4, 4, 20), (20,)]),
    ("Sub", [(2, 4, 4, 20), (1, 1, 1, 20)]), ("Maximum", [(2, 4, 4, 7), (2, 1, 4, 7)]),
    ("Relu", [(2, 3, 3, 17)]), ("Sigmoid", [(1, 5, 5, 33)]), ("AddN", [(1, 2, 2, 9)] * 3)])
def test_layout_agnostic_elementwise_5hd_matches_nd(op, shapes, dtype):
    xs = [random(s, dtype, seed=16 + i) for i, s in enumerate(shapes)]
    out_shape = tuple(np.broadcast_shapes(*shapes))
    ref = nd(op, xs, dtype, out_shape)
    got = run_5hd(op, xs, [NC1HWC0] * len(xs), dtype, out_shape)
    assert_float_close(got, ref, dtype)


def test_elementwise_5hd_with_an_nd_scalar():
    x, s = random((2, 3, 3, 18), seed=20), np.array(2.5, np.float32)
    got = run_5hd("Mul", [x, s], [NC1HWC0, ND], np.float32, x.shape)
    np.testing.assert_allclose(got, x * 2.5, rtol=1e-6)


def test_elementwise_5hd_rejects_a_channel_broadcast_with_a_clear_error():
    x, y = random((2, 3, 3, 18), seed=21), random((2, 3, 3, 1), seed=22)
    with pytest.raises(Exception, match="cannot run on the output's NC1HWC0 storage"):
        run_5hd("AddV2", [x, y], [NC1HWC0, NC1HWC0], np.float32, x.shape)


def test_bias_add_5hd():
    x, b = random((2, 5, 5, 21), seed=23), random((21,), seed=24)
    got = run_5hd("BiasAdd", [x, b], [NC1HWC0, ND], np.float32, x.shape, data_format="NHWC")
    np.testing.assert_allclose(got, x + b, rtol=1e-6)


@pytest.mark.parametrize("dtype", FLOAT_TYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op", ["Mean", "Sum"])
@pytest.mark.parametrize("keep", [False, True])
def test_spatial_reduction_5hd_matches_tf(op, keep, dtype):
    x = random((3, 5, 4, 19), dtype, seed=25)
    ref = tf_cpu(op, input=to_f32(x), axis=np.array([1, 2], np.int32), keep_dims=keep)
    got = run_5hd(op, [x], [NC1HWC0], dtype, ref.shape, out_format=NC1HWC0 if keep else ND,
                  reduction_indices=[1, 2], keep_dims=keep)
    assert_float_close(got, ref, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8], ids=["float32", "float16", "int8"])
def test_pad_5hd(dtype):
    x = random((2, 4, 5, 20), dtype, -50, 50, seed=26)
    pads = [[0, 0], [1, 2], [3, 0], [0, 0]]
    got = run_5hd("Pad", [x], [NC1HWC0], dtype, (2, 7, 8, 20), paddings=sum(pads, []))
    np.testing.assert_array_equal(got, np.pad(x, pads))


@pytest.mark.parametrize("channels", [[16, 32], [5, 16, 7], [20, 13]])
def test_concat_channels_5hd(channels):
    xs = [random((2, 3, 4, c), seed=27 + i) for i, c in enumerate(channels)]
    got = run_5hd("ConcatV2", xs, [NC1HWC0] * len(xs), np.float32, (2, 3, 4, sum(channels)), axis=3)
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=3))


def test_registered_kernels_include_transdata():
    assert "TransData" in C.registered_kernels()


@pytest.mark.parametrize("op", ops.having("layout_agnostic"))
def test_every_layout_agnostic_op_has_an_nc1hwc0_kernel(op):
    """The ops the layout passes run on NC1HWC0 (trait layout_agnostic) run there: the kernel's
    list comes from the generated op_traits.inc."""
    n = 3 if op == "AddN" else ops.get(op).arity
    xs = [random((1, 3, 2, 18), seed=40 + i, low=0.5, high=2.0) for i in range(n)]
    attrs = {"SrcT": 1, "DstT": 19} if op == "Cast" else {}
    out_dtype = np.float16 if op == "Cast" else np.float32
    ref = nd(op, xs, out_dtype, xs[0].shape, **attrs)
    got = run_5hd(op, xs, [NC1HWC0] * n, out_dtype, xs[0].shape, **attrs)
    np.testing.assert_array_equal(got, ref)
