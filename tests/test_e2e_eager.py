"""End to end: eager ops on the NPU run as single-op models on the simulated NPU, ops the NPU
cannot run fall back to CPU with one warning naming them, and compiled ops are cached."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import logging

import numpy as np
import pytest
import tensorflow as tf

from npu_device import compiler_bridge, eager_fallback

NPU = "/device:NPU:0"


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    yield
    npu_device.set_npu_config(precision_mode=None)


def delta(before):
    after = npu_device.counters()
    return {k: after[k] - before[k] for k in after}


def test_eager_matmul_runs_on_the_sim():
    a = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    b = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    before = npu_device.counters()
    with tf.device(NPU):
        c = tf.matmul(a, b)
    d = delta(before)
    assert c.device.endswith("device:NPU:0")
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-6)
    assert d["models_run"] == 1 and d["kernels_executed"] >= 1, d


def test_eager_ops_with_constant_inputs():
    # The axis, perm and paddings inputs are host-memory constants folded into the model.
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    with tf.device(NPU):
        t = tf.constant(x)
        outs = [tf.reduce_sum(t, axis=1), tf.transpose(t, [2, 0, 1]),
                tf.concat([t, t], axis=-1), tf.pad(t, [[0, 0], [1, 2], [0, 1]])]
    with tf.device("/CPU:0"):
        want = [tf.reduce_sum(x, axis=1), tf.transpose(x, [2, 0, 1]),
                tf.concat([x, x], axis=-1), tf.pad(x, [[0, 0], [1, 2], [0, 1]])]
    for got, ref in zip(outs, want):
        assert got.device.endswith("device:NPU:0")
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)


def test_eager_compiles_once_per_signature():
    x = tf.constant(np.ones((4, 4), np.float32))
    wider = tf.constant(np.ones((4, 1031), np.float32))   # a shape no other test runs relu on
    with tf.device(NPU):
        tf.nn.relu(x)                                  # compiled and loaded here at the latest
        before = npu_device.counters()
        for _ in range(5):
            tf.nn.relu(x)
        assert delta(before)["models_loaded"] == 0
        tf.nn.relu(wider)                              # a new shape compiles a new model
        assert delta(before)["models_loaded"] == 1


def test_option_change_recompiles_eager_ops():
    x = tf.constant([[1.0001, 2.0], [3.0, 4.0]])
    with tf.device(NPU):
        tf.matmul(x, x)
        before = npu_device.counters()
        npu_device.set_npu_config(precision_mode="force_fp16")   # no explicit invalidation
        try:
            fp16 = tf.matmul(x, x)
        finally:
            npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
        fp32 = tf.matmul(x, x)
    assert delta(before)["models_loaded"] >= 2
    assert not np.array_equal(fp16.numpy(), fp32.numpy())  # fp16 rounding of 1.0001 shows


def test_cpu_fallback_is_logged_once_per_op_and_reason(caplog):
    eager_fallback.enable()
    x = tf.constant([1.5, -2.0])
    with caplog.at_level(logging.WARNING, logger="npu_device"):
        with tf.device(NPU):
            for _ in range(3):
                s = tf.raw_ops.Reverse(tensor=x, dims=[True])   # no NPU kernel (TF has a GPU one)
            tf.strings.as_string(x)                    # CPU-only in TF anyway: no warning
            tf.raw_ops.OptionalFromValue(components=[x])   # a host object (Keras' iterator)
            d = tf.cast(x, tf.float64) * 2.0           # float64: NPU kernels exist, not for it
            tf.reverse(tf.constant([1, 2], tf.int8), [0])  # its op name arrives as bytes
            y = x * 3.0                                # runs on the NPU: no warning
        with tf.device("/CPU:0"):
            tf.math.cumprod(x)                         # asked for CPU: no warning
    lines = [r.getMessage() for r in caplog.records if "ran on CPU" in r.getMessage()]
    assert sum("Reverse" in m and "no kernel" in m for m in lines) == 1, lines
    assert any("op ReverseV2 ran" in m for m in lines) and not any("b'" in m for m in lines), lines
    assert not any("AsString" in m or "Cumprod" in m or "Optional" in m for m in lines), lines
    assert any("Mul" in m and "DT_DOUBLE" in m for m in lines), lines
    assert not any("op Mul ran" in m and "DT_FLOAT'" in m for m in lines), lines
    assert s.device.endswith("CPU:0") and d.device.endswith("CPU:0")
    assert y.device.endswith("NPU:0")
    np.testing.assert_allclose(d.numpy(), [3.0, -4.0])


def test_cpu_fallback_logging_can_be_switched_off(caplog):
    eager_fallback.disable()
    try:
        with caplog.at_level(logging.WARNING, logger="npu_device"):
            with tf.device(NPU):
                tf.math.cumprod(tf.constant([7.0, 8.0]))     # would warn if enabled
        assert not [r for r in caplog.records if "ran on CPU" in r.getMessage()]
    finally:
        eager_fallback.enable()
