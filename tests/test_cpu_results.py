"""Function results made on the CPU are returned from the CPU (partition/cpu_results.py): the
Optional in which Keras' train and test functions return their logs, and any other
value a CPU op makes, no longer crosses to the NPU and back. Values are checked against TF on
the CPU; the partition reports say which results moved."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import npu_device  # noqa: F401  (registers the NPU)
from graph_engine.compiler import reports
from graph_engine.compiler.partition import cpu_results

pytestmark = pytest.mark.timeout(300)
NPU, CPU = "/device:NPU:0", "/device:CPU:0"
X = np.random.default_rng(3).standard_normal((37, 10)).astype(np.float32)


def moved_results():
    return [n.node for r in reports.recent() for n in r.nodes if n.reason == cpu_results.REASON]


def device_type(name):
    return tf.DeviceSpec.from_string(name).device_type


def test_an_optional_of_npu_results_made_on_the_cpu_is_returned_from_the_cpu():
    """As Keras returns its logs: an inner function (inlined, its side effects gating its
    outputs) computes on the NPU, the outer one wraps the results in an Optional."""
    reports.clear()
    with tf.device(NPU):
        total = tf.Variable(0.0)
        w = tf.Variable(np.ones((10, 10), np.float32))

        @tf.function
        def step(t):
            total.assign_add(tf.reduce_sum(t))
            w.assign_add(tf.ones_like(w) * 0.5)
            return {"loss": tf.reduce_mean(tf.matmul(t, w)), "total": total.read_value()}

        wrapped = tf.function(lambda t: tf.experimental.Optional.from_value(step(t)))
        results = [wrapped(tf.constant(X)) for _ in range(3)]
    assert "identity_RetVal" in moved_results()
    assert device_type(results[-1]._variant_tensor.backing_device) == "CPU"
    for i, optional in enumerate(results):
        logs = optional.get_value()
        weights = np.ones((10, 10), np.float32) + 0.5 * (i + 1)
        np.testing.assert_allclose(logs["loss"].numpy(), (X @ weights).mean(), rtol=1e-5)
        np.testing.assert_allclose(logs["total"].numpy(), X.sum() * (i + 1), rtol=1e-5)


def test_a_cpu_value_also_read_on_the_npu_and_an_npu_result_keep_their_paths():
    with tf.device(NPU):
        text = tf.constant(["a", "bcd", "efghij"])

        @tf.function
        def f(s, t):
            with tf.device(CPU):
                n = tf.strings.length(s)                  # made on the CPU (int32)
            return n, tf.gather(t * 2.0, n)

        lengths, picked = f(text, tf.constant(np.arange(8, dtype=np.float32)))
    np.testing.assert_array_equal(lengths.numpy(), [1, 3, 6])
    np.testing.assert_allclose(picked.numpy(), [2.0, 6.0, 12.0])
    assert device_type(picked.backing_device) == "NPU"


def test_keras_fit_evaluate_and_predict_match_the_cpu():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((45, 10)).astype(np.float32)      # 45: partial last batches
    y = rng.integers(0, 3, 45)
    results = {}
    for device in (CPU, NPU):
        with tf.device(device):
            keras.utils.set_random_seed(5)
            model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"),
                                      keras.layers.Dense(3)])
            model.compile(keras.optimizers.SGD(0.1),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          metrics=["accuracy"])
            history = model.fit(x, y, batch_size=8, epochs=2, validation_split=0.2,
                                verbose=0).history
            results[device] = (history, model.evaluate(x, y, batch_size=16, verbose=0,
                                                       return_dict=True),
                               model.predict(x, batch_size=16, verbose=0))
    (cpu_fit, cpu_eval, cpu_pred), (npu_fit, npu_eval, npu_pred) = results[CPU], results[NPU]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(npu_fit[key], cpu_fit[key], rtol=1e-4, atol=1e-5)
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(npu_eval[key], cpu_eval[key], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(npu_pred, cpu_pred, rtol=1e-4, atol=1e-5)
    assert moved_results()                 # the train/test functions' Optional of logs
