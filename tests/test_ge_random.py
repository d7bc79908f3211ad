"""TF's stateless random ops on the NPU (graph_engine/ops/random.py, kernels/random.cc): bit for
bit what TensorFlow draws on the CPU, eagerly, inside compiled functions, and as Keras Dropout
masks, with uint64 key/counter tensors end to end."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf

from graph_engine import ops
from graph_engine.compiler import reference_executor
from graph_engine.compiler.compile import compile_model
from graph_engine.compiler.devtools import op_request
from npu_device.explain import explain

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
V2 = ("StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2")
V1 = ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal")
DTYPES = (tf.float32, tf.float16, tf.bfloat16)


@pytest.fixture(autouse=True)
def _npu_kernels_only(no_soft_placement):
    """Every test here: its NPU ops must have NPU kernels (conftest.no_soft_placement)."""


def on(device, fn):
    with tf.device(device):
        out = fn()
    outs = out if isinstance(out, (list, tuple)) else [out]
    if device == NPU:
        assert all(t.device.endswith("NPU:0") for t in outs), [t.device for t in outs]
    return [t.numpy() for t in outs]


def assert_same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("seed_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("seed", [[3, -7], [0, 0], [2**31 - 1, -2**31]])
def test_key_counter_matches_cpu(seed, seed_dtype):
    s = tf.constant(seed, seed_dtype)
    cpu = on(CPU, lambda: tf.raw_ops.StatelessRandomGetKeyCounter(seed=s))
    npu = on(NPU, lambda: tf.raw_ops.StatelessRandomGetKeyCounter(seed=s))
    for c, n in zip(cpu, npu):
        assert n.dtype == np.uint64
        np.testing.assert_array_equal(n, c)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", V2)
def test_v2_draws_equal_cpu_bit_for_bit(op, dtype):
    # 1001 values: 250 full groups of four and a partial one; alg 3 (auto) is Philox
    def draw():
        key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant([11, 42]))
        return getattr(tf.raw_ops, op)(shape=[7, 143], key=key, counter=counter, alg=3, dtype=dtype)
    assert_same_bits(on(NPU, draw)[0], on(CPU, draw)[0])


def test_counter_carry_and_huge_counters():
    key = tf.constant([0xFFFFFFFFFFFFFFFF], tf.uint64)
    counter = tf.constant([0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF], tf.uint64)   # wraps to 0
    draw = lambda: tf.raw_ops.StatelessRandomUniformV2(shape=[64], key=key, counter=counter, alg=1)
    assert_same_bits(on(NPU, draw)[0], on(CPU, draw)[0])


@pytest.mark.parametrize("op", V1)
def test_v1_seeded_ops_equal_cpu(op):
    draw = lambda: getattr(tf.raw_ops, op)(shape=[5, 9], seed=tf.constant([7, -3], tf.int64))
    assert_same_bits(on(NPU, draw)[0], on(CPU, draw)[0])


def test_unsupported_algorithm_is_a_clear_error():
    key, counter = tf.constant([1], tf.uint64), tf.constant([2, 3], tf.uint64)
    with tf.device(NPU), pytest.raises((tf.errors.InvalidArgumentError, tf.errors.InternalError,
                                        tf.errors.UnimplementedError)) as e:
        tf.raw_ops.StatelessRandomUniformV2(shape=[4], key=key, counter=counter, alg=2)
    assert "algorithm" in str(e.value) and "Philox" in str(e.value)


def test_numpy_reference_matches_tensorflow():
    """The reference (constant folding, reference executor): exact for the key/counter and
    uniform values, within an ulp for normals (numpy's float32 log/sin differ from glibc's)."""
    seed = np.array([9, -1], np.int64)
    want = [t.numpy() for t in tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)]
    nd, inputs = op_request("StatelessRandomGetKeyCounter", {"seed": seed})
    got = reference_executor.run(compile_model(nd.SerializeToString()), inputs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    for op in V2:
        for dtype in DTYPES:
            args = {"shape": np.array([3, 6], np.int32), "key": want[0], "counter": want[1],
                    "alg": np.int32(1)}
            expected = getattr(tf.raw_ops, op)(**args, dtype=dtype).numpy()
            nd, inputs = op_request(op, args, dtype=dtype)
            (got,) = reference_executor.run(compile_model(nd.SerializeToString()), inputs)
            assert got.dtype == expected.dtype
            if op == "StatelessRandomUniformV2":
                assert_same_bits(got, expected)
            else:
                np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                           rtol=1e-6, atol=1e-6)


def test_keras_dropout_masks_equal_cpu_and_run_on_npu():
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)

    def two_dropouts():                     # two draws: the seed generator's state advances
        keras.utils.set_random_seed(5)
        layer = keras.layers.Dropout(0.4, seed=1)
        return lambda a: layer(a, training=True) + layer(a, training=True)

    with tf.device(NPU):
        report = explain(two_dropouts(), x)
    with tf.device(CPU):
        cpu = tf.function(two_dropouts())(x).numpy()
    npu = report.outputs.numpy()
    np.testing.assert_array_equal(npu == 0, cpu == 0)          # the same masks
    np.testing.assert_allclose(npu, cpu, rtol=1e-6)
    assert not set(report.ops_on("cpu")) - {"_Arg", "_Retval"}, str(report)
    assert {"StatelessRandomGetKeyCounter", "StatelessRandomUniformV2"} <= set(report.ops_on("npu")), str(report)


def test_registry_has_the_random_ops():
    assert set(V1 + V2 + ("StatelessRandomGetKeyCounter",)) <= set(ops.registered())
