"""Inference with several batch sizes: predict() with batch sizes 7 and 32 over 50 rows (last
batches of 1 and 18), predict() of a tf.data dataset, predict_on_batch and a direct call
model(x, training=False) on 5 rows."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=1e-5, atol=1e-6)
# compiles expected: the predict cluster at batch sizes 7, 1, 32, 18, 12, 2 and (predict_on_batch,
# the same predict function) 9, plus eager op compiles
MAX_COMPILES = 80
MAX_SIGNATURES_PER_CLUSTER = 7  # input shapes one cluster sees

ROWS = 50


def run(device):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(ROWS, 16)).astype("float32")
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    with tf.device(device):
        inputs = keras.Input(shape=(16,))
        h = keras.layers.Dense(32, activation="gelu")(inputs)
        h = keras.layers.LayerNormalization()(h)
        h = keras.layers.Dropout(0.5)(h)          # inactive at inference
        outputs = keras.layers.Dense(5, activation="softmax")(h)
        model = keras.Model(inputs, outputs)
        out = {
            "predict_bs7": model.predict(x, batch_size=7, verbose=0),
            "predict_bs32": model.predict(x, batch_size=32, verbose=0),
            "predict_dataset": model.predict(tf.data.Dataset.from_tensor_slices(x).batch(12),
                                             verbose=0),
            "predict_on_batch": model.predict_on_batch(x[:9]),
            "call": model(tf.constant(x[:5]), training=False),
        }
    return out
