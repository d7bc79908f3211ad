"""End to end: Keras fit of an MLP and a small CNN on the NPU equals the same fit on CPU.

Same seed, same data, no shuffling: the per-epoch losses must agree within 1e-4 relative, the
runtime's counters must show the sim running every train step, and explain() of the train step
must show no math op left on CPU.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf

from npu_device.explain import explain

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
EPOCHS, BATCH, SAMPLES = 3, 32, 256
# Op types that compute; a train step that leaves one of them on CPU is not running on the NPU.
MATH_PREFIXES = ("MatMul", "BiasAdd", "Conv2D", "MaxPool", "Relu", "Softmax", "Sparse", "Mean",
                 "Sum", "Add", "Sub", "Mul", "RealDiv", "Div", "Sqrt", "Rsqrt", "Pow", "Square",
                 "Cast", "Neg", "Maximum", "Minimum", "Select", "Exp", "Log", "ArgMax", "Equal")


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    # Compare float32 training with float32 training (the default precision mode would run the
    # matrix ops in float16).
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    yield
    npu_device.set_npu_config(precision_mode=None)


def data(image):
    """Ten classes, each a fixed random pattern plus noise (no download)."""
    rng = np.random.default_rng(0)
    shape = (8, 8, 1) if image else (20,)
    patterns = rng.normal(size=(10,) + shape).astype(np.float32)
    y = rng.integers(0, 10, SAMPLES).astype(np.int32)
    x = patterns[y] + 0.5 * rng.normal(size=(SAMPLES,) + shape).astype(np.float32)
    return x, y


def mlp():
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(10)])


def cnn():
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(10)])


def fit(device, build, x, y):
    keras.utils.set_random_seed(0)
    with tf.device(device):
        model = build()
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, history.history["loss"]


@pytest.mark.parametrize("build", [mlp, cnn], ids=["mlp", "cnn"])
def test_fit_matches_cpu(build):
    x, y = data(image=build is cnn)
    before = npu_device.counters()
    model, npu_losses = fit(NPU, build, x, y)
    runs = npu_device.counters()["models_run"] - before["models_run"]
    _, cpu_losses = fit(CPU, build, x, y)

    np.testing.assert_allclose(npu_losses, cpu_losses, rtol=1e-4)
    assert npu_losses[-1] < npu_losses[0], npu_losses          # it did learn
    assert runs >= EPOCHS * SAMPLES // BATCH, runs              # a model run per train step

    with tf.device(NPU):
        xb, yb = tf.constant(x[:BATCH]), tf.constant(y[:BATCH])
    e = explain(lambda a, b: model.train_step((a, b)), xb, yb)
    on_cpu = [op for op in e.ops_on("cpu") if op.startswith(MATH_PREFIXES)]
    assert not on_cpu, f"train step ops on CPU: {on_cpu}\n{e}"
    assert {"MatMul", "BiasAddGrad"} <= set(e.ops_on("npu")), str(e)
    if build is cnn:
        assert {"Conv2D", "Conv2DBackpropFilter", "MaxPoolGrad"} <= set(e.ops_on("npu")), str(e)
