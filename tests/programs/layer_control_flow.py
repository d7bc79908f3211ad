"""Layers with their own control flow in call(): tf.map_fn over a batch, tf.scan (a cumulative
sum), tf.cond on a tensor value, a tf.while_loop with a data-dependent trip count; trained with a
custom GradientTape loop in tf.function and a partial last batch."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=2e-4, atol=2e-5)
MAX_COMPILES = 90
TIMEOUT = 300


class Flow(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], shape[-1]), initializer="glorot_uniform")

    def call(self, x):
        h = tf.map_fn(lambda r: tf.tanh(tf.linalg.matvec(self.w, r, transpose_a=True)), x)
        h = tf.transpose(tf.scan(lambda a, r: a + r, tf.transpose(h, [1, 0, 2])), [1, 0, 2])
        h = tf.cond(tf.reduce_mean(h) > 0.0, lambda: h * 0.5, lambda: h - 0.1)
        n = tf.cast(tf.reduce_sum(tf.cast(tf.reduce_max(tf.abs(h)) > 0.1, tf.int32)) + 2, tf.int32)
        _, h = tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 0.9 + 0.01), (0, h))
        return h


def run(device):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(23, 5, 4)).astype("float32")
    y = rng.integers(0, 3, 23).astype("int32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        model = keras.Sequential([keras.Input((5, 4)), Flow(), keras.layers.Flatten(), keras.layers.Dense(3)])
        opt = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        losses = []
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        for _ in range(2):
            for xb, yb in ds:
                losses.append(float(step(xb, yb)))
        return {"losses": losses, "out": model(x).numpy()}
