"""Bidirectional LSTMs over padded tokens (keras.io bidirectional IMDB, small), validation data."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=5e-4, atol=5e-5)
MAX_COMPILES = 150
TIMEOUT = 400


def run(device):
    rng = np.random.default_rng(3)
    x = rng.integers(1, 300, (45, 20)).astype("int32")
    x[np.arange(20)[None, :] >= rng.integers(3, 20, 45)[:, None]] = 0
    y = rng.integers(0, 2, (45, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        inp = keras.Input((None,), dtype="int32")
        h = keras.layers.Embedding(300, 16, mask_zero=True)(inp)
        h = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(h)
        h = keras.layers.Bidirectional(keras.layers.GRU(4))(h)
        model = keras.Model(inp, keras.layers.Dense(1, activation="sigmoid")(h))
        model.compile("adam", "binary_crossentropy", metrics=["accuracy", keras.metrics.AUC()])
        hist = model.fit(x[:36], y[:36], batch_size=8, epochs=2, validation_data=(x[36:], y[36:]), verbose=0)
        return {"loss": hist.history["loss"], "val_loss": hist.history["val_loss"],
                "pred": model.predict(x, batch_size=16, verbose=0)}
