"""A denoising convolutional autoencoder with a U-Net skip (keras.io image denoising, small):
Conv2D, SeparableConv2D, MaxPooling2D, Conv2DTranspose (stride 2), UpSampling2D, Concatenate,
binary cross-entropy, a tf.data pipeline (map, cache, shuffle with seed, batch, prefetch)."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=5e-4, atol=5e-5)
MAX_COMPILES = 50
TIMEOUT = 300


def run(device):
    rng = np.random.default_rng(11)
    clean = rng.random((21, 16, 16, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        ds = (tf.data.Dataset.from_tensor_slices(clean)
              .map(lambda c: (tf.clip_by_value(c + 0.1 * tf.sin(c * 40.0), 0.0, 1.0), c))
              .cache().shuffle(32, seed=1).batch(6).prefetch(tf.data.AUTOTUNE))
        inp = keras.Input((16, 16, 1))
        e1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
        e2 = keras.layers.SeparableConv2D(16, 3, padding="same", activation="relu")(keras.layers.MaxPooling2D()(e1))
        d1 = keras.layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(e2)
        up = keras.layers.UpSampling2D()(keras.layers.Conv2D(8, 1)(e2))
        h = keras.layers.Concatenate()([d1, up, e1])
        model = keras.Model(inp, keras.layers.Conv2D(1, 3, padding="same", activation="sigmoid")(h))
        model.compile("adam", "binary_crossentropy")
        hist = model.fit(ds, epochs=2, verbose=0)
        return {"loss": hist.history["loss"], "pred": model.predict(clean[:9], verbose=0)}
