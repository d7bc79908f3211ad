"""tf.switch_case / keras.ops.switch in functions on the NPU.

TF lowers a Case to a _SwitchN (the branch index picks the live output) and a Merge. The
partitioner must treat _SwitchN as the branch point it is (partition/contexts.py): when it
did not, the branches' ops shared one cluster, and a switch_case returned an empty tensor, a
Keras step using it failed (a float where an Optional was expected) or hung."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import npu_device  # noqa: F401  (registers the NPU)

pytestmark = pytest.mark.timeout(300)
NPU, CPU = "/device:NPU:0", "/device:CPU:0"
Z = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]], np.float32)


def branches(z):
    return [lambda: z * 2.0, lambda: tf.nn.relu(z) / 2.0, lambda: tf.reduce_sum(z, 0) + z]


@tf.function
def pick(i, z):
    return tf.switch_case(i, branches(z))


@tf.function
def pick_in_a_loop(z):
    """A switch_case per iteration of a while loop, its index computed in the loop."""
    def body(k, acc):
        return k + 1, acc + tf.switch_case(k % 3, branches(acc))
    return tf.while_loop(lambda k, acc: k < 5, body, (tf.constant(0), z))[1]


@tf.function
def loss_and_grad(i, z):
    with tf.GradientTape() as tape:
        tape.watch(z)
        loss = tf.reduce_sum(tf.switch_case(i, branches(z)) ** 2)
    return loss, tape.gradient(loss, z)


def on(device, fn, *args):
    with tf.device(device):
        return tf.nest.map_structure(lambda t: t.numpy(), fn(*args))


@pytest.mark.parametrize("index", [0, 1, 2, 7])        # 7: out of range takes the last branch
def test_switch_case_in_a_function_matches_the_cpu(index):
    i, z = tf.constant(index), tf.constant(Z)
    for fn in (pick, loss_and_grad):
        got, want = on(NPU, fn, i, z), on(CPU, fn, i, z)
        tf.nest.map_structure(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-6), got, want)
    np.testing.assert_allclose(on(NPU, pick_in_a_loop, tf.constant(Z)),
                               on(CPU, pick_in_a_loop, tf.constant(Z)), rtol=1e-6)


class Switched(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = keras.layers.Dense(3), keras.layers.Dense(1)

    def call(self, x):
        h = self.hidden(x)
        index = keras.ops.cast(keras.ops.sum(h) > 0, "int32")
        h = keras.ops.switch(index, [lambda v: v * 2.0, lambda v: keras.ops.relu(v) / 2.0], h)
        return self.out(h)


def test_keras_fit_with_ops_switch_matches_the_cpu():
    x = np.random.default_rng(0).normal(size=(37, 4)).astype(np.float32)   # partial batches
    y = x.sum(1, keepdims=True)
    results = {}
    for device in (NPU, CPU):
        with tf.device(device):
            keras.utils.set_random_seed(0)
            model = Switched()
            model.compile(keras.optimizers.SGD(0.05), "mse")
            history = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history["loss"]
            results[device] = history, model.predict(x, verbose=0)
    np.testing.assert_allclose(results[NPU][0], results[CPU][0], rtol=1e-5)
    np.testing.assert_allclose(results[NPU][1], results[CPU][1], rtol=1e-5, atol=1e-6)
