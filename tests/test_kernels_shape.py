"""Data-movement kernels (reshape family, Transpose, ConcatV2, Pack/Unpack, Slice,
StridedSlice, Tile, BroadcastTo, Fill, ZerosLike/OnesLike) against TensorFlow on the CPU.
They move raw elements, so results must match exactly for every dtype."""
import ml_dtypes
import numpy as np
import pytest

from test_kernels_harness import GraphBuilder, random, run1, run_kernel, tf_cpu

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.int64, np.int8,
          np.uint8, np.bool_]
IDS = [np.dtype(d).name for d in DTYPES]


@pytest.mark.parametrize("op,out", [("Reshape", (6, 4)), ("Squeeze", (4, 6)), ("ExpandDims", (4, 1, 6)),
                                    ("Identity", (4, 6)), ("Snapshot", (4, 6)), ("StopGradient", (4, 6)),
                                    ("PreventGradient", (4, 6))])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_reshape_family_copies_bytes(op, out, dtype):
    x = random((4, 6) if op != "Squeeze" else (4, 1, 6), dtype, seed=1)
    got = run1(op, [x], dtype, out)
    np.testing.assert_array_equal(got, x.reshape(out))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("shape,perm", [((3, 4), [1, 0]), ((2, 3, 4, 5), [0, 3, 1, 2]),
                                        ((2, 3, 4, 5), [3, 2, 1, 0]), ((300, 500), [1, 0]),
                                        ((2, 3, 4), [0, 1, 2]), ((2, 3, 4), [-1, 0, 1])])
def test_transpose(shape, perm, dtype):
    x = random(shape, dtype, seed=2)
    ref = tf_cpu("Transpose", x=x, perm=np.array(perm, np.int32))
    np.testing.assert_array_equal(run1("Transpose", [x], dtype, ref.shape, perm=perm), ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_], ids=["f32", "f16", "i64", "bool"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis, dtype):
    shapes = [(3, 4, 5), (3, 4, 5), (3, 4, 5)]
    shapes = [tuple(s if i != axis % 3 else s + k for i, s in enumerate(sh)) for k, sh in enumerate(shapes)]
    xs = [random(s, dtype, seed=10 + k) for k, s in enumerate(shapes)]
    ref = tf_cpu("ConcatV2", values=xs, axis=axis)
    np.testing.assert_array_equal(run1("ConcatV2", xs, dtype, ref.shape, axis=[axis], N=3), ref)


def test_concat_with_an_empty_input():
    xs = [random((2, 3), np.float32, seed=3), np.zeros((2, 0), np.float32), random((2, 1), np.float32, seed=4)]
    np.testing.assert_array_equal(run1("ConcatV2", xs, np.float32, (2, 4), axis=[1]), np.concatenate(xs, 1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_pack_and_unpack(axis):
    xs = [random((3, 4), np.int32, -9, 9, seed=20 + k) for k in range(5)]
    ref = tf_cpu("Pack", values=xs, axis=axis)
    packed = run1("Pack", xs, np.int32, ref.shape, axis=axis, N=5)
    np.testing.assert_array_equal(packed, ref)
    parts = run_kernel("Unpack", [packed], [(np.int32, (3, 4))] * 5, {"axis": axis, "num": 5})
    for got, x in zip(parts, xs):
        np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("begin,size", [([0, 0, 0], [2, 3, 4]), ([1, 2, 0], [1, -1, 3]),
                                        ([0, 1, 2], [2, 0, 2])])
def test_slice(begin, size):
    x = random((2, 5, 4), np.float32, seed=5)
    ref = tf_cpu("Slice", input=x, begin=begin, size=size)
    np.testing.assert_array_equal(run1("Slice", [x], np.float32, ref.shape, begin=begin, size=size), ref)


STRIDED = [  # begin, end, strides, begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask
    ([1, 0, 0], [3, 4, 5], [1, 2, 2], 0, 0, 0, 0, 0),
    ([-1, 0, 0], [0, 4, 5], [-1, 1, -2], 0, 4, 0, 0, 0),
    ([0, 2], [0, 0], [1, 1], 1, 1, 0, 0, 2),            # x[:, 2]
    ([0, 1], [0, 3], [1, 1], 0, 0, 1, 0, 0),            # x[..., 1:3]
    ([0, 0, 1], [0, 0, 2], [1, 1, 1], 1, 1, 0, 2, 4),   # x[:, None, 1] (shrinks axis 1)
    ([1, 0, 0, 0], [2, 0, 0, 0], [1, 1, 1, 1], 14, 14, 0, 4, 1),  # x[1, :, None, :]
    ([-2], [-10], [-1], 0, 0, 0, 0, 0),                 # x[-2:-10:-1]
    ([10, -20], [-20, 10], [-3, 2], 0, 0, 0, 0, 0),     # clamped out-of-range bounds
    ([0], [0], [1], 0, 0, 1, 1, 0),                     # ellipsis and new axis in one spec
    ([3, 0], [1, 0], [1, 1], 0, 0, 0, 0, 0),            # empty result
]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8], ids=["f32", "i64", "u8"])
@pytest.mark.parametrize("spec", STRIDED, ids=[str(i) for i in range(len(STRIDED))])
def test_strided_slice(spec, dtype):
    begin, end, strides, bm, em, elm, nam, sam = spec
    x = random((4, 5, 6), dtype, 0, 100, seed=6)
    masks = dict(begin_mask=bm, end_mask=em, ellipsis_mask=elm, new_axis_mask=nam, shrink_axis_mask=sam)
    ref = tf_cpu("StridedSlice", input=x, begin=begin, end=end, strides=strides, **masks)
    got = run1("StridedSlice", [x], dtype, ref.shape, begin=begin, end=end, strides=strides, **masks)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.bool_], ids=["f32", "f16", "bool"])
@pytest.mark.parametrize("shape,multiples", [((2, 3), [2, 3]), ((2, 1, 3), [1, 4, 1]), ((5,), [0])])
def test_tile(shape, multiples, dtype):
    x = random(shape, dtype, seed=7)
    ref = tf_cpu("Tile", input=x, multiples=multiples)
    np.testing.assert_array_equal(run1("Tile", [x], dtype, ref.shape, multiples=multiples), ref)


@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((), (5, 2)), ((4,), (3, 4))])
def test_broadcast_to(shape, target):
    x = random(shape, np.int32, -5, 5, seed=8)
    got = run1("BroadcastTo", [x], np.int32, target, shape=list(target))
    np.testing.assert_array_equal(got, np.broadcast_to(x, target))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int8, np.bool_],
                         ids=["f32", "bf16", "i8", "bool"])
def test_fill_zeros_ones(dtype):
    value = np.array(3, dtype) if dtype != np.bool_ else np.array(True)
    np.testing.assert_array_equal(run1("Fill", [value], dtype, (3, 4), dims=[3, 4]),
                                  np.full((3, 4), value, dtype))
    x = random((5, 2), dtype, seed=9)
    np.testing.assert_array_equal(run1("ZerosLike", [x], dtype, (5, 2)), np.zeros((5, 2), dtype))
    np.testing.assert_array_equal(run1("OnesLike", [x], dtype, (5, 2)), np.ones((5, 2), dtype))


def test_reshape_in_place_is_a_no_op():
    """The compiler may alias a reshape's output with its input (same arena bytes)."""
    g = GraphBuilder("alias")
    x = g.input(np.float32, (4, 6))
    a = g.arena_value(np.float32, (4, 6))
    g.values.append(g.values[a].__class__(**{**g.values[a].__dict__, "dims": (24,)}))   # same offset
    b = len(g.values) - 1
    y = g.output(np.float32, (24,))
    g.kernel("Neg", [x], [a])
    g.kernel("Reshape", [a], [b], shape=[24])
    g.kernel("Identity", [b], [y])
    xv = random((4, 6), np.float32, seed=10)
    np.testing.assert_array_equal(g.load().run([xv])[0], -xv.reshape(24))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_], ids=["f32", "f16", "i64", "bool"])
@pytest.mark.parametrize("paddings", [[[1, 2], [0, 3]], [[0, 0], [2, 2]], [[3, 0], [0, 0]]])
def test_pad(paddings, dtype):
    x = random((3, 4), dtype, 1, 9, seed=40)
    flat = [p for pair in paddings for p in pair]
    ref = tf_cpu("Pad", input=x, paddings=paddings)
    np.testing.assert_array_equal(run1("Pad", [x], dtype, ref.shape, paddings=flat), ref)
    value = np.array(True if dtype == np.bool_ else 7, dtype)
    ref2 = tf_cpu("PadV2", input=x, paddings=paddings, constant_values=value)
    np.testing.assert_array_equal(run1("PadV2", [x, value], dtype, ref2.shape, paddings=flat), ref2)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_split(axis):
    x = random((6, 12, 3), np.float32, seed=41)
    ref = tf_cpu("Split", axis=axis, value=x, num_split=3)
    got = run_kernel("Split", [x], [(np.float32, r.shape) for r in ref], {"split_dim": [axis], "num_split": 3})
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("sizes", [[1, 2, 3], [2, -1, 1], [0, 6, 0]])
def test_split_v(sizes):
    x = random((4, 6), np.int32, -9, 9, seed=42)
    ref = tf_cpu("SplitV", value=x, size_splits=sizes, axis=1, num_split=3)
    got = run_kernel("SplitV", [x], [(np.int32, r.shape) for r in ref],
                     {"size_splits": sizes, "split_dim": [1], "num_split": 3})
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("spec", STRIDED, ids=[str(i) for i in range(len(STRIDED))])
def test_strided_slice_grad(spec):
    begin, end, strides, bm, em, elm, nam, sam = spec
    masks = dict(begin_mask=bm, end_mask=em, ellipsis_mask=elm, new_axis_mask=nam, shrink_axis_mask=sam)
    shape = [4, 5, 6]
    dy_shape = tf_cpu("StridedSlice", input=np.zeros(shape, np.float32), begin=begin, end=end,
                      strides=strides, **masks).shape
    dy = random(dy_shape, np.float32, seed=43)
    ref = tf_cpu("StridedSliceGrad", shape=shape, begin=begin, end=end, strides=strides, dy=dy, **masks)
    got = run1("StridedSliceGrad", [dy], np.float32, tuple(shape), shape=shape, begin=begin, end=end,
               strides=strides, **masks)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_], ids=["f32", "f16", "i64", "bool"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("params_shape,indices_shape,axis,batch_dims", [
    ((10, 4), (3, 2), 0, 0), ((3, 10, 4), (5,), 1, 0), ((3, 10, 4), (3, 6), 1, 1),
    ((2, 3, 10, 4), (2, 3, 2), -2, 2), ((5, 7), (), 1, 0),
])
def test_gather(params_shape, indices_shape, axis, batch_dims, dtype, index_dtype):
    params = random(params_shape, dtype, seed=44)
    indices = random(indices_shape, index_dtype, 0, params_shape[axis] - 1, seed=45)
    ref = tf_cpu("GatherV2", params=params, indices=indices, axis=axis, batch_dims=batch_dims)
    got = run1("GatherV2", [params, indices], dtype, ref.shape, axis=[axis], batch_dims=batch_dims)
    np.testing.assert_array_equal(got, ref)


def test_gather_index_out_of_range_is_an_error():
    with pytest.raises(RuntimeError, match=r"indices\[1\] = 10 is not in \[0, 10\)"):
        run1("GatherV2", [np.zeros((10, 2), np.float32), np.array([3, 10], np.int32)], np.float32, (2, 2),
             axis=[0], batch_dims=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32], ids=["f32", "f16", "i32"])
@pytest.mark.parametrize("data_shape,ids_shape", [((8, 5), (8,)), ((4, 3, 300), (4, 3)), ((9,), (9,))])
def test_unsorted_segment_sum(data_shape, ids_shape, dtype):
    data = random(data_shape, dtype, -4, 4, seed=46)
    ids = random(ids_shape, np.int32, -1, 4, seed=47)   # -1 drops the row, as in TF
    ref = tf_cpu("UnsortedSegmentSum", data=data, segment_ids=ids, num_segments=5)
    got = run1("UnsortedSegmentSum", [data, ids], dtype, ref.shape, num_segments=[5])
    if np.dtype(dtype) == np.float16:
        np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_identity_n_and_bitcast():
    a, b = random((3, 2), np.float32, seed=48), random((4,), np.int64, -5, 5, seed=49)
    got = run_kernel("IdentityN", [a, b], [(np.float32, (3, 2)), (np.int64, (4,))])
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[1], b)
    bits = run1("Bitcast", [a], np.int32, (3, 2), type=3)
    np.testing.assert_array_equal(bits, tf_cpu("Bitcast", input=a, type=np.int32))
