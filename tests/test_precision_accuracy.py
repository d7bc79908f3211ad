"""Accuracy of the precision modes on a real task: a small CNN on scikit-learn's bundled
load_digits (8x8 digit images, no download), trained on the NPU.

* must_keep_origin_dtype equals float32 training on CPU (losses within 1e-5 relative)
* allow_mix_precision + NpuLossScaleOptimizer (the one extra line) reaches the float32 test
  accuracy within 1 point
* force_fp16 trains (Adam included: the loss-scale optimizer keeps the update in float32)
* Keras's own mixed_float16 dtype policy trains on the NPU like on CPU
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf

from npu_device.train import NpuLossScaleOptimizer

sklearn_datasets = pytest.importorskip("sklearn.datasets")
NPU, CPU = "/device:NPU:0", "/device:CPU:0"
EPOCHS, BATCH = 8, 64


@pytest.fixture(scope="module")
def digits():
    d = sklearn_datasets.load_digits()
    x = (d.images / 16.0).astype(np.float32)[..., None]
    y = d.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1437], y[:1437]), (x[1437:], y[1437:])


@pytest.fixture(autouse=True)
def restore():
    yield
    npu_device.set_npu_config(precision_mode=None)
    keras.mixed_precision.set_global_policy("float32")


def cnn():
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(10, dtype="float32")])      # float32 logits under mixed policies


def train(digits, device, precision_mode, loss_scale=False, epochs=EPOCHS):
    """(per-epoch losses, test accuracy)."""
    (xtr, ytr), (xte, yte) = digits
    npu_device.set_npu_config(precision_mode=precision_mode)
    keras.utils.set_random_seed(0)
    with tf.device(device):
        model = cnn()
        optimizer = keras.optimizers.Adam(3e-3)
        if loss_scale:
            optimizer = NpuLossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer, metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(xtr, ytr, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
        accuracy = model.evaluate(xte, yte, batch_size=BATCH, verbose=0)[1]
    return history.history["loss"], accuracy


def test_must_keep_origin_dtype_matches_cpu(digits):
    # One epoch (23 Adam steps): the second epoch already differs by ~5e-5, float32
    # summation-order differences amplified by training itself, not a precision change.
    npu, npu_acc = train(digits, NPU, "must_keep_origin_dtype", epochs=1)
    cpu, cpu_acc = train(digits, CPU, "must_keep_origin_dtype", epochs=1)
    np.testing.assert_allclose(npu, cpu, rtol=1e-5)
    assert npu_acc == cpu_acc


def test_mixed_precision_accuracy_within_one_point_of_float32(digits):
    _, fp32 = train(digits, NPU, "must_keep_origin_dtype")
    losses, mixed = train(digits, NPU, "allow_mix_precision", loss_scale=True)
    assert fp32 > 0.9 and abs(mixed - fp32) <= 0.01, (fp32, mixed)
    assert losses[-1] < 0.2 * losses[0]


def test_force_fp16_trains(digits):
    losses, accuracy = train(digits, NPU, "force_fp16", loss_scale=True, epochs=4)
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert accuracy > 0.85


def test_keras_mixed_float16_policy(digits):
    keras.mixed_precision.set_global_policy("mixed_float16")
    npu_losses, npu_acc = train(digits, NPU, "must_keep_origin_dtype", epochs=4)
    cpu_losses, cpu_acc = train(digits, CPU, "must_keep_origin_dtype", epochs=4)
    np.testing.assert_allclose(npu_losses, cpu_losses, rtol=2e-2)
    assert abs(npu_acc - cpu_acc) <= 0.01 and npu_acc > 0.9, (npu_acc, cpu_acc)
