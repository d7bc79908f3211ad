"""Float status, fp16 overflow modes and NpuLossScaleOptimizer on the NPU.

Saturation mode stores fp16 overflow as ±65504: gradients stay finite, so only the float-status
flag reveals the overflow (Keras's own LossScaleOptimizer misses it). inf_nan mode stores ±inf.
In both modes a deliberately exploding loss scale is backed off, the overflowing steps are
skipped and training recovers.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf

from npu_device import precision
from npu_device.train import NpuLossScaleOptimizer

BATCH, SAMPLES, EPOCHS = 64, 512, 4
STEPS = EPOCHS * SAMPLES // BATCH


@pytest.fixture(autouse=True)
def mixed_precision():
    npu_device.set_npu_config(precision_mode="allow_mix_precision")
    yield
    npu_device.set_npu_config(precision_mode=None)
    precision.set_overflow_mode("saturation")
    precision.clear_float_status()


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 20)).astype(np.float32)
    return x, x[:, :10].argmax(1).astype(np.int32)


def fit(optimizer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, history.history["loss"]


@pytest.mark.parametrize("mode,stored", [("saturation", 65504.0), ("inf_nan", np.inf)])
def test_fp16_overflow_mode_and_float_status(mode, stored):
    precision.set_overflow_mode(mode)
    assert precision.overflow_mode() == mode
    precision.clear_float_status()
    x = tf.constant([40000.0, -40000.0, 1.5])
    with tf.device("/device:NPU:0"):
        y = tf.cast(x * 2.0, tf.float16)
    assert "NPU" in y.device
    np.testing.assert_array_equal(y.numpy().astype(np.float32), [stored, -stored, 3.0])
    assert precision.float_status() == {"overflow": True, "nan": False}
    assert precision.clear_float_status() == {"overflow": True, "nan": False}
    assert precision.float_status() == {"overflow": False, "nan": False}
    with tf.device("/device:NPU:0"):
        tf.cast(tf.constant([np.nan, 1.0]) + 1.0, tf.float16).numpy()
    assert precision.clear_float_status() == {"overflow": False, "nan": True}


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="overflow_mode 'wrap' is not allowed; allowed: "
                                         "saturation, inf_nan"):
        precision.set_overflow_mode("wrap")
    with pytest.raises(ValueError, match="initial_scale must be > 0"):
        NpuLossScaleOptimizer(keras.optimizers.SGD(), initial_scale=0)
    with pytest.raises(TypeError, match="inner_optimizer must be a keras.optimizers.Optimizer"):
        NpuLossScaleOptimizer("adam")


@pytest.mark.parametrize("mode", ["saturation", "inf_nan"])
def test_exploding_scale_backs_off_skips_and_recovers(mode):
    precision.set_overflow_mode(mode)
    opt = NpuLossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=2.0**30,
                                dynamic_growth_steps=5)
    _, losses = fit(opt)
    applied = int(opt.iterations.numpy())
    # 2**30 overflows fp16 (max 65504 ~ 2**16): about 14 halvings, each a skipped step
    assert 10 <= STEPS - applied < STEPS // 2
    assert float(opt.dynamic_scale.numpy()) < 2.0**30
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0]


def test_keras_loss_scale_optimizer_sees_saturated_overflow():
    """Keras's own LossScaleOptimizer scans gradients for inf/NaN, and saturated ones pass: it
    would apply every step (with garbage) and keep its scale. npu_device gives it the float
    status check NpuLossScaleOptimizer has, so it backs off and skips as that one does."""
    precision.set_overflow_mode("saturation")
    plain = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2),
                                                initial_scale=2.0**30)
    _, losses = fit(plain)
    assert 10 <= STEPS - int(plain.iterations.numpy()) < STEPS // 2
    assert float(plain.dynamic_scale.numpy()) < 2.0**30
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0]


def test_mixed_float16_policy_fit_matches_the_cpu():
    """keras.io's mixed precision recipe (policy mixed_float16: Keras wraps the optimizer in its
    LossScaleOptimizer): targets of ~1000 overflow float16 at the initial scale 2**15, so the
    first steps are skipped while the scale halves, on the CPU as on the NPU (where the
    overflow saturates, in the default mode); then the same steps are applied."""
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 8)).astype(np.float32)          # 3 batches of 32, the last 16
    y = (rng.normal(size=(80, 2)) * 1000).astype(np.float32)
    runs = []
    keras.config.set_dtype_policy("mixed_float16")
    try:
        for device in ("/device:NPU:0", "/CPU:0"):
            with tf.device(device):
                keras.utils.set_random_seed(0)
                model = keras.Sequential([keras.Input((8,)),
                                          keras.layers.Dense(16, activation="relu"),
                                          keras.layers.Dense(2, dtype="float32")])
                model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
                losses = model.fit(x, y, batch_size=32, epochs=8, shuffle=False,
                                   verbose=0).history["loss"]
                runs.append((losses, float(model.optimizer.dynamic_scale.numpy()),
                             int(model.optimizer.iterations.numpy()), model.get_weights()))
    finally:
        keras.config.set_dtype_policy("float32")
    (npu_losses, npu_scale, npu_steps, npu_w), (cpu_losses, cpu_scale, cpu_steps, cpu_w) = runs
    assert (npu_scale, npu_steps) == (cpu_scale, cpu_steps)
    assert 0 < cpu_steps < 24 and cpu_scale < 2.0**15          # some skipped, some applied
    np.testing.assert_allclose(npu_losses, cpu_losses, rtol=1e-4)
    for got, want in zip(npu_w, cpu_w):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)      # float16 math


def test_npu_loss_scale_optimizer_saves_and_loads(tmp_path):
    for dynamic in (True, False):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(NpuLossScaleOptimizer(keras.optimizers.Adam(1e-3), initial_scale=256.0,
                                            dynamic=dynamic), "mse")
        model.fit(np.ones((8, 4), np.float32), np.ones((8, 1), np.float32), verbose=0)
        model.save(tmp_path / "model.keras")
        loaded = keras.models.load_model(tmp_path / "model.keras")
        assert isinstance(loaded.optimizer, NpuLossScaleOptimizer)
        assert loaded.optimizer.dynamic == dynamic
        assert float(loaded.optimizer.dynamic_scale.numpy()) == 256.0
        x = np.ones((2, 4), np.float32)
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_dynamic_growth_and_fixed_scale():
    opt = NpuLossScaleOptimizer(keras.optimizers.SGD(0.05), initial_scale=1.0,
                                dynamic_growth_steps=8)
    _, losses = fit(opt)
    assert int(opt.iterations.numpy()) == STEPS
    assert float(opt.dynamic_scale.numpy()) == 2.0 ** (STEPS // 8)
    assert losses[-1] < losses[0]

    fixed = NpuLossScaleOptimizer(keras.optimizers.SGD(0.05), initial_scale=2.0**30,
                                  dynamic=False)
    model, _ = fit(fixed)
    assert float(fixed.dynamic_scale.numpy()) == 2.0**30       # never changes
    assert int(fixed.iterations.numpy()) == 0                  # every step overflowed: skipped
    fixed_ok = NpuLossScaleOptimizer(keras.optimizers.SGD(0.05), initial_scale=128.0,
                                     dynamic=False)
    _, losses = fit(fixed_ok)
    assert int(fixed_ok.iterations.numpy()) == STEPS and losses[-1] < losses[0]
    assert NpuLossScaleOptimizer.from_config(fixed.get_config()).dynamic is False
