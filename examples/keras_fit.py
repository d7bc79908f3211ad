"""Quickstart: train Keras models on the NPU with unmodified Keras code.

    python examples/keras_fit.py

Importing npu_device loads the NPU into TensorFlow and makes it the default device; Keras's
train step then runs as graphs compiled by the NPU graph engine (here on the simulated NPU,
which computes real results on the host CPU). The script trains an MLP and a small CNN on
synthetic data, then prints the losses, what the NPU runtime executed, and where the train
step's ops ran.
"""
import npu_device  # first: loads the NPU plugin before TensorFlow sets up its devices

import keras
import numpy as np


def synthetic_data(shape, classes=10, samples=512, seed=0):
    """Each class is a fixed random pattern plus noise: learnable, and nothing to download."""
    rng = np.random.default_rng(seed)
    patterns = rng.normal(size=(classes,) + shape).astype(np.float32)
    y = rng.integers(0, classes, samples).astype(np.int32)
    x = patterns[y] + 0.7 * rng.normal(size=(samples,) + shape).astype(np.float32)
    return x, y


def mlp():
    return keras.Sequential([
        keras.Input((32,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10)])


def cnn():
    return keras.Sequential([
        keras.Input((12, 12, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.AveragePooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(10)])


def train(name, model, x, y, epochs=4):
    keras.utils.set_random_seed(0)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    before = npu_device.counters()
    history = model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    ran = {k: v - before[k] for k, v in npu_device.counters().items()}

    print(f"\n== {name}: {model.count_params()} parameters")
    for epoch, (loss, acc) in enumerate(zip(history.history["loss"],
                                            history.history["accuracy"]), 1):
        print(f"  epoch {epoch}: loss {loss:.4f}  accuracy {acc:.3f}")
    print(f"  NPU runtime: {ran['models_run']} compiled-model runs, "
          f"{ran['kernels_executed']} kernels, {ran['models_loaded']} models loaded")

    # Where did the train step's ops run? explain() compiles one step again and reports it.
    report = npu_device.explain(lambda a, b: model.train_step((a, b)), x[:32], y[:32])
    print("  train step:", report.summary().replace("\n", "\n              "))
    off_npu = {n.op: n.reason for n in report.fallbacks()
               if n.placement == "cpu" and not n.op.startswith("_")}   # _Arg: a graph input
    for op, reason in sorted(off_npu.items()):
        print(f"    on CPU: {op} ({reason})")


if __name__ == "__main__":
    print("devices:", [d["name"] + " (" + d["soc_version"] + ")" for d in npu_device.info()])
    train("MLP", mlp(), *synthetic_data((32,)))
    train("CNN", cnn(), *synthetic_data((12, 12, 1)))
