"""Sparse resource-variable ops on NPU variables (tf_plugin_cc/resource_ops.cc).

ResourceGather, ResourceGatherNd, ResourceScatter{Add,Sub,Mul,Div,Min,Max,Update} and
ResourceScatterNd{Add,Sub,Update,Min,Max} have NPU kernels, so embedding lookups and sparse
(IndexedSlices) optimizer updates of variables that live on the NPU can be placed. Each case runs
the same code with the variable on CPU and on the NPU: results must be bit-identical (these ops
use TF's CPU functors on the simulated NPU's host memory) and invalid input must raise the same
error class with the same message (out-of-range and negative indices included, never a crash).
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
R = tf.raw_ops
BF16 = tf.bfloat16.as_numpy_dtype
DTYPES = [np.float32, np.float16, BF16, np.float64, np.int32, np.int64]
INDEX_DTYPES = [np.int32, np.int64]
SCATTER_OPS = ["ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterMul",
               "ResourceScatterDiv", "ResourceScatterMin", "ResourceScatterMax",
               "ResourceScatterUpdate"]
SCATTER_ND_OPS = ["ResourceScatterNdAdd", "ResourceScatterNdSub", "ResourceScatterNdUpdate",
                  "ResourceScatterNdMin", "ResourceScatterNdMax"]


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    # The ops around the lookups (gradients, losses) compile on the NPU: keep float32 there.
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    yield
    npu_device.set_npu_config(precision_mode=None)


def table(dtype, shape=(5, 3)):
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + 1).astype(dtype)


def message(err):
    """The error's message without the device-specific function name and op suffix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(err))
    return text.split(" [Op:")[0].strip()


def run_on(device, fn):
    with tf.device(device):
        try:
            out = fn()
        except tf.errors.OpError as err:
            return type(err), message(err), None
    out = out if isinstance(out, (list, tuple)) else [out]
    return None, [np.asarray(t) for t in out], out


def same_on_cpu_and_npu(fn, npu_outputs_on_npu=True, rtol=0.0):
    """Runs fn on CPU and on the NPU; returns the CPU results (or the error class). Results are
    bit-identical, or within rtol where it is given."""
    cpu_err, cpu, _ = run_on(CPU, fn)
    npu_err, npu, tensors = run_on(NPU, fn)
    assert cpu_err == npu_err, (cpu_err, cpu, npu_err, npu)
    if cpu_err is not None:
        assert cpu == npu, (cpu, npu)
        return cpu_err, cpu
    assert len(cpu) == len(npu)
    for c, n in zip(cpu, npu):
        assert c.dtype == n.dtype and c.shape == n.shape, (c, n)
        # bit-identical (bfloat16 and half compared through float64, exactly)
        wide = np.float64 if c.dtype.kind == "V" or c.dtype in (np.float16, BF16) else c.dtype
        if rtol:
            np.testing.assert_allclose(n.astype(wide), c.astype(wide), rtol=rtol)
        else:
            np.testing.assert_array_equal(c.astype(wide), n.astype(wide))
    if npu_outputs_on_npu:
        for t in tensors:
            if isinstance(t, tf.Tensor):
                assert t.device.endswith("device:NPU:0"), t.device
    return None, cpu


# --- gather ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather(dtype, index_dtype):
    def fn():
        v = tf.Variable(table(dtype))
        ids = np.array([4, 0, 4, 2], index_dtype)                  # duplicates
        ids2 = np.array([[1, 1], [3, 0], [2, 4]], index_dtype)     # 2-D indices
        return [tf.gather(v, ids), tf.nn.embedding_lookup(v, ids2), v.sparse_read(ids[0]),
                R.ResourceGather(resource=v.handle, indices=ids2, dtype=v.dtype,
                                 validate_indices=False)]
    # TF has no NPU (DEVICE_DEFAULT) VarHandleOp for int32, as for GPUs: such variables stay on
    # CPU, and so do their lookups.
    same_on_cpu_and_npu(fn, npu_outputs_on_npu=dtype != np.int32)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_batch_dims(index_dtype):
    params = table(np.float32, (2, 3, 4))

    def gather(indices, batch_dims):
        return lambda: R.ResourceGather(resource=tf.Variable(params).handle,
                                        indices=np.array(indices, index_dtype),
                                        batch_dims=batch_dims, dtype=tf.float32)
    same_on_cpu_and_npu(gather([[0, 2, 2], [1, 0, 1]], 1))
    same_on_cpu_and_npu(gather(np.arange(12).reshape(2, 3, 2) % 4, 2))
    # TF checks an index against all batches together (offset indices): these are accepted
    same_on_cpu_and_npu(gather([[0, 5], [1, -1]], 1))
    err, msg = same_on_cpu_and_npu(gather([[0, 2], [1, 3]], 1))
    assert err is tf.errors.InvalidArgumentError and msg == "indices[1,1] = 6 is not in [0, 2)"


def test_inputs_that_tf_cpu_does_not_check():
    # TF's CPU kernels CHECK-fail (abort the process) here; the NPU kernels report them.
    with tf.device(NPU):
        v = tf.Variable(table(np.float32, (2, 3, 4)))
        for indices, batch_dims in [(np.zeros((3, 2), np.int32), 1), (np.zeros((2,), np.int32), 2),
                                    (np.zeros((2, 3, 4), np.int32), 3)]:
            with pytest.raises(tf.errors.InvalidArgumentError, match="batch_dims"):
                R.ResourceGather(resource=v.handle, indices=indices, batch_dims=batch_dims,
                                 dtype=tf.float32)
        with pytest.raises(tf.errors.InvalidArgumentError, match="wrong dtype"):
            R.ResourceGather(resource=v.handle, indices=[0], dtype=tf.int32)
        with pytest.raises(tf.errors.InvalidArgumentError, match="wrong dtype"):
            R.ResourceGatherNd(resource=v.handle, indices=[[0]], dtype=tf.float64)
        with pytest.raises(tf.errors.InvalidArgumentError, match="does not match"):
            R.ResourceScatterNdAdd(ref=v.handle, indices=[[0]],
                                   updates=np.ones((1, 3, 4), np.float64))


@pytest.mark.parametrize("indices,want", [
    ([1, 5], "indices[1] = 5 is not in [0, 5)"),
    ([[1], [-1]], "indices[1,0] = -1 is not in [0, 5)"),
    (7, "indices = 7 is not in [0, 5)"),
])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_out_of_range(indices, want, index_dtype):
    err, msg = same_on_cpu_and_npu(
        lambda: tf.gather(tf.Variable(table(np.float32)), np.array(indices, index_dtype)))
    assert err is tf.errors.InvalidArgumentError and msg == want


def test_gather_empty_indices():
    for shape in [(0,), (2, 0), (0, 3)]:
        _, out = same_on_cpu_and_npu(
            lambda: tf.gather(tf.Variable(table(np.float32)), np.zeros(shape, np.int64)))
        assert out[0].shape == shape + (3,)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64], ids=lambda d: np.dtype(d).name)
def test_gather_nd(dtype):
    def fn():
        v = tf.Variable(table(dtype, (4, 3, 2)))
        return [tf.gather_nd(v, [[1, 2], [3, 0], [1, 2]]), tf.gather_nd(v, [[[2]], [[0]]]),
                R.ResourceGatherNd(resource=v.handle, indices=np.zeros((2, 0), np.int64),
                                   dtype=v.dtype)]
    same_on_cpu_and_npu(fn)
    err, msg = same_on_cpu_and_npu(lambda: tf.gather_nd(tf.Variable(table(dtype, (4, 3))),
                                                        [[1, 2], [-1, 0], [3, 3]]))
    assert err is tf.errors.InvalidArgumentError and "does not index into param shape" in msg


# --- scatter --------------------------------------------------------------------------------

def scatter(op, dtype, indices, updates, index_dtype=np.int32, shape=(5, 3)):
    def fn():
        v = tf.Variable(table(dtype, shape))
        getattr(R, op)(resource=v.handle, indices=np.array(indices, index_dtype),
                       updates=np.array(updates, dtype))
        return v.read_value()
    return fn


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", SCATTER_OPS)
def test_scatter(op, dtype):
    index_dtype = np.int64 if dtype in (np.float32, np.int64) else np.int32
    updates = (np.arange(12).reshape(4, 3) % 5 + 1).astype(dtype)          # no zero (div)
    # duplicate indices: add/sub accumulate, mul/div/min/max compose, update keeps the last
    same_on_cpu_and_npu(scatter(op, dtype, [3, 0, 3, 3], updates, index_dtype))
    same_on_cpu_and_npu(scatter(op, dtype, [[1, 4], [1, 2]], updates.reshape(2, 2, 3),
                                index_dtype))
    same_on_cpu_and_npu(scatter(op, dtype, [2, 2], np.array(3, dtype), index_dtype))  # scalar
    same_on_cpu_and_npu(scatter(op, dtype, np.zeros([0], index_dtype),
                                np.zeros((0, 3), dtype), index_dtype))               # empty


def test_large_gather_and_scatter():
    # TF's CPU functors shard work over threads from here on (parallel scatter: >= 1024 indices);
    # integer-valued updates keep the sums exact in any order.
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, size=20000)
    updates = rng.integers(-3, 4, size=(20000, 16)).astype(np.float32)

    def fn():
        v = tf.Variable(np.zeros((1000, 16), np.float32))
        v.scatter_add(tf.IndexedSlices(updates, ids))
        v.scatter_max(tf.IndexedSlices(updates, ids[::-1]))
        return tf.gather(v, ids[:5000]), v.read_value()
    same_on_cpu_and_npu(fn)


@pytest.mark.parametrize("op", SCATTER_OPS)
def test_scatter_out_of_range(op):
    for indices, want in [([1, 5, 2], "indices[1] = 5 is not in [0, 5)"),
                          ([[0], [-2]], "indices[1,0] = -2 is not in [0, 5)")]:
        updates = np.ones(np.shape(indices) + (3,), np.float32) * 2
        err, msg = same_on_cpu_and_npu(scatter(op, np.float32, indices, updates))
        assert err is tf.errors.InvalidArgumentError and msg == want
    # the updates before the bad index stay applied, as on CPU
    results = {}
    for device in (CPU, NPU):
        with tf.device(device):
            v = tf.Variable(table(np.float32))
            with pytest.raises(tf.errors.InvalidArgumentError):
                getattr(R, op)(resource=v.handle, indices=[1, 5, 2],
                               updates=np.full((3, 3), 2, np.float32))
            results[device] = v.numpy()
    np.testing.assert_array_equal(results[CPU], results[NPU])


def test_scatter_invalid_updates():
    cases = [
        (scatter("ResourceScatterDiv", np.float32, [1], np.zeros((1, 3), np.float32)),
         "updates must not contain 0"),
        (scatter("ResourceScatterAdd", np.float32, [1, 2], np.zeros((3, 3), np.float32)),
         "must be a prefix of the shape of updates"),
        (scatter("ResourceScatterAdd", np.float32, [1], np.zeros((1, 3, 1), np.float32)),
         "Must have updates.shape = indices.shape + params.shape[1:]"),
    ]
    for fn, want in cases:
        err, msg = same_on_cpu_and_npu(fn)
        assert err is tf.errors.InvalidArgumentError and want in msg, msg

    def mismatch():
        v = tf.Variable(table(np.float32))
        R.ResourceScatterAdd(resource=v.handle, indices=[0], updates=np.ones((1, 3), np.float64))
    err, msg = same_on_cpu_and_npu(mismatch)
    assert err is tf.errors.InvalidArgumentError and "does not match" in msg
    # an inner size that differs from the variable's row: TF's CPU kernel would write past the
    # row, the NPU kernel refuses
    with tf.device(NPU):
        v = tf.Variable(table(np.float32))
        with pytest.raises(tf.errors.InvalidArgumentError, match="Must have updates.shape"):
            R.ResourceScatterUpdate(resource=v.handle, indices=[4], updates=np.ones((1, 5), np.float32))
        np.testing.assert_array_equal(v.numpy(), table(np.float32))


@pytest.mark.parametrize("op", SCATTER_ND_OPS)
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int64], ids=lambda d: np.dtype(d).name)
def test_scatter_nd(op, dtype):
    def nd(indices, updates, **attrs):
        def fn():
            v = tf.Variable(table(dtype, (4, 3)))
            getattr(R, op)(ref=v.handle, indices=np.array(indices, np.int64),
                           updates=np.array(updates, dtype), **attrs)
            return v.read_value()
        return fn
    same_on_cpu_and_npu(nd([[1], [1], [3]], np.arange(9).reshape(3, 3) + 1))
    same_on_cpu_and_npu(nd([[1, 2], [1, 2], [3, 0]], [5, 2, 9]))
    same_on_cpu_and_npu(nd(np.zeros((0, 1)), np.zeros((0, 3))))
    same_on_cpu_and_npu(nd([[1], [7], [3]], np.ones((3, 3)), bad_indices_policy="IGNORE"))
    err, msg = same_on_cpu_and_npu(nd([[1], [7], [-1], [3]], np.ones((4, 3))))
    assert err is tf.errors.InvalidArgumentError and "does not index into shape" in msg


def test_scatter_copies_a_shared_buffer():
    """A value read before a sparse update keeps its contents (copy-on-write)."""
    for device in (CPU, NPU):
        with tf.device(device):
            v = tf.Variable(np.zeros((3, 2), np.float32))
            before = v.read_value()
            v.scatter_add(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1])))
            middle = v.read_value()
            v.scatter_update(tf.IndexedSlices(tf.fill([2, 2], 5.0), tf.constant([0, 1])))
            np.testing.assert_array_equal(before.numpy(), np.zeros((3, 2)))
            np.testing.assert_array_equal(middle.numpy(), [[0, 0], [1, 1], [0, 0]])
            np.testing.assert_array_equal(v.numpy(), [[5, 5], [5, 5], [0, 0]])


# --- graphs and training --------------------------------------------------------------------

def test_in_tf_function():
    def fn():
        v = tf.Variable(table(np.float32, (6, 4)))

        @tf.function
        def step(ids, rows):
            # indices computed on the device, so the kernels must wait for the NPU stream
            ids = tf.math.floormod(ids * 3 + 1, 6)
            got = tf.gather(v, ids)
            v.scatter_add(tf.IndexedSlices(rows * 0.5, ids))
            v.scatter_max(tf.IndexedSlices(rows, tf.reverse(ids, [0])))
            v.scatter_nd_sub(tf.reshape(ids[:2], [2, 1]), rows[:2])
            return got, tf.gather_nd(v, tf.stack([ids, ids % 4], axis=1)), v.read_value()

        ids = tf.constant([0, 3, 2, 3], tf.int64)
        rows = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) - 5)
        return [*step(ids, rows), *step(ids + 1, rows)]
    same_on_cpu_and_npu(fn)

    def bad():
        v = tf.Variable(table(np.float32, (6, 4)))
        return tf.function(lambda ids: tf.gather(v, ids))(tf.constant([1, 6]))
    err, msg = same_on_cpu_and_npu(bad)
    assert err is tf.errors.InvalidArgumentError and "indices[1] = 6 is not in [0, 6)" in msg


def train(device, steps=3):
    rng = np.random.default_rng(7)
    emb_init = rng.normal(size=(12, 4)).astype(np.float32)
    w_init = rng.normal(size=(4, 1)).astype(np.float32)
    ids = np.array([[3, 7, 3], [0, 11, 5]], np.int64)
    y = np.array([[1.0], [-1.0]], np.float32)
    with tf.device(device):
        emb = tf.Variable(emb_init)
        emb2 = tf.Variable(emb_init * 2)
        w = tf.Variable(w_init)
        opt = keras.optimizers.SGD(0.1)
        assert emb.device.endswith(device[len("/device:"):])   # the lookups run beside it

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                x = tf.reduce_mean(tf.gather(emb, ids), axis=1)
                x2 = tf.reduce_sum(tf.nn.embedding_lookup(emb2, ids), axis=1)
                loss = tf.reduce_mean(tf.square(tf.matmul(x + x2, w) - y))
            g_emb, g_emb2, g_w = tape.gradient(loss, [emb, emb2, w])
            assert isinstance(g_emb, tf.IndexedSlices) and isinstance(g_emb2, tf.IndexedSlices)
            opt.apply_gradients([(g_emb, emb), (g_w, w)])
            emb2.scatter_sub(tf.IndexedSlices(g_emb2.values * 0.1, g_emb2.indices))
            return loss

        losses = [float(step()) for _ in range(steps)]
        return losses, emb.numpy(), emb2.numpy(), w.numpy()


def test_sparse_gradients_with_optimizer():
    cpu, npu = train(CPU), train(NPU)
    for c, n in zip(cpu, npu):
        np.testing.assert_allclose(n, c, rtol=1e-6, atol=1e-6)
    assert not np.allclose(cpu[1], train(CPU, steps=0)[1])   # the table really changed


def test_safe_embedding_lookup_sparse():
    def fn():
        rng = np.random.default_rng(3)
        t = tf.Variable(rng.normal(size=(10, 4)).astype(np.float32))
        # rows: {2, 5}, {}, {7, -1 (invalid, pruned), 7}, {0}
        idx = tf.constant([[0, 0], [0, 1], [2, 0], [2, 1], [2, 2], [3, 0]], tf.int64)
        sp_ids = tf.SparseTensor(idx, tf.constant([2, 5, 7, -1, 7, 0], tf.int64), [4, 3])
        sp_w = tf.SparseTensor(idx, tf.constant([1.0, 0.5, 2.0, 1.0, 1.0, 3.0]), [4, 3])
        with tf.GradientTape() as tape:
            out = tf.nn.safe_embedding_lookup_sparse([t], sp_ids, sp_w, combiner="mean",
                                                     default_id=1)
            loss = tf.reduce_sum(out * tf.range(1.0, 5.0)[:, None])
        grad = tape.gradient(loss, t)
        assert isinstance(grad, tf.IndexedSlices)
        return out, tf.convert_to_tensor(grad)
    cpu_err, cpu, _ = run_on(CPU, fn)
    npu_err, npu, _ = run_on(NPU, fn)
    assert cpu_err is None and npu_err is None, (cpu, npu)
    for c, n in zip(cpu, npu):
        np.testing.assert_allclose(n, c, rtol=1e-6, atol=1e-6)
