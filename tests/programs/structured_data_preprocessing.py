"""Structured data classification (keras.io): Normalization.adapt, StringLookup + one-hot,
IntegerLookup, Discretization, Hashing, concatenated features, fit with class_weight."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=2e-4, atol=2e-5)
MAX_COMPILES = 60
TIMEOUT = 300


def run(device):
    rng = np.random.default_rng(5)
    n = 37
    age = rng.uniform(20, 70, (n, 1)).astype("float32")
    chol = rng.normal(200, 30, (n, 1)).astype("float32")
    thal = tf.constant(rng.choice(["fixed", "normal", "reversible"], (n, 1)))
    cp = rng.integers(0, 4, (n, 1)).astype("int64")
    y = rng.integers(0, 2, (n, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        norm = keras.layers.Normalization(); norm.adapt(chol)
        disc = keras.layers.Discretization(num_bins=4); disc.adapt(age)
        lookup = keras.layers.StringLookup(output_mode="one_hot"); lookup.adapt(thal)
        ilookup = keras.layers.IntegerLookup(output_mode="one_hot"); ilookup.adapt(cp)
        hashing = keras.layers.Hashing(num_bins=8, output_mode="one_hot")
        i_age = keras.Input((1,)); i_chol = keras.Input((1,)); i_thal = keras.Input((1,), dtype="string")
        i_cp = keras.Input((1,), dtype="int64")
        feats = keras.layers.concatenate([
            norm(i_chol), keras.ops.cast(keras.layers.CategoryEncoding(4, output_mode="one_hot")(disc(i_age)), "float32"),
            lookup(i_thal), ilookup(i_cp), hashing(i_thal)])
        h = keras.layers.Dense(16, activation="relu")(feats)
        h = keras.layers.Dropout(0.3)(h)
        model = keras.Model([i_age, i_chol, i_thal, i_cp], keras.layers.Dense(1, activation="sigmoid")(h))
        model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
        inputs = [age, chol, thal, cp]
        hist = model.fit(inputs, y, batch_size=8, epochs=3, class_weight={0: 1.0, 1: 2.0}, verbose=0)
        return {"loss": hist.history["loss"], "pred": model.predict(inputs, batch_size=5, verbose=0),
                "eval": model.evaluate(inputs, y, verbose=0)}
