"""Keras 3 on the NPU: jit_compile="auto" must not route to XLA (which has no NPU backend), and
an explicit jit_compile=True warns and falls back; a tf.function(jit_compile=True) placed on the
NPU runs through the graph engine (docs/options.md, "Keras and XLA").

Each test runs in a fresh interpreter that only does `import npu_device`, like a user program.
"""
from tests.conftest import run_python

MODEL = """
    import warnings
    import numpy as np
    import tensorflow as tf
    import keras
    import npu_device

    assert tf.config.list_physical_devices("NPU"), "no NPU device"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    true_w = np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    y = x @ true_w + 0.25

    def make_model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
"""


def _run(code):
    result = run_python(MODEL + code)
    assert result.returncode == 0 and "OK" in result.stdout, \
        result.stdout[-2000:] + result.stderr[-4000:]
    return result


def test_default_jit_compile_fits_without_xla():
    _run("""
    from keras.src.trainers import trainer as trainer_lib
    model = make_model()
    # Without npu_device's hook Keras would pick XLA here: an NPU (non-CPU) device exists and
    # every layer supports XLA.
    assert trainer_lib.model_supports_jit(model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")     # jit_compile="auto"
    assert model.jit_compile is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                 # and no warning
        history = model.fit(x, y, batch_size=16, epochs=30, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < 0.01 * losses[0], losses
    w, b = model.layers[0].get_weights()
    # The trained model matches a numpy evaluation of its own weights (fp16 matrix tolerance).
    np.testing.assert_allclose(model.predict(x, verbose=0), x @ w + b, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(w, true_w, atol=0.1)
    assert model.layers[0].kernel.value.device.endswith("NPU:0"), model.layers[0].kernel.device
    print("OK")
    """)


def test_uncompiled_model_predicts_without_xla():
    # Reading jit_compile before compile() resolves "auto" through the same hook.
    _run("""
    model = make_model()
    assert model.jit_compile is False
    out = model.predict(x[:8], verbose=0)
    w, b = model.layers[0].get_weights()
    np.testing.assert_allclose(out, x[:8] @ w + b, rtol=2e-2, atol=2e-2)
    print("OK")
    """)


def test_explicit_jit_compile_true_warns_and_falls_back():
    _run("""
    model = make_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    ours = [w for w in caught if "XLA has no NPU backend" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "compiles the model's graphs with its own graph engine" in str(ours[0].message)
    assert ours[0].filename == "<string>"            # points at the user's compile() call
    assert model.jit_compile is False
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    print("OK")
    """)


def test_tf_function_jit_compile_true_runs_on_the_npu_and_with_xla_on_cpu():
    # Documented: a tf.function(jit_compile=True) that TensorFlow places on the NPU runs through
    # the graph engine (XLA has no NPU backend); under tf.device("/CPU:0") XLA compiles it as
    # before (it rejects an op it cannot compile, which proves it is XLA).
    _run("""
    f = tf.function(lambda a: tf.matmul(a, a) + 1.0, jit_compile=True)
    a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    y = f(a)
    assert y.device.endswith("NPU:0"), y.device
    np.testing.assert_allclose(y.numpy(), a.numpy() @ a.numpy() + 1.0, rtol=1e-6)
    with tf.device("/CPU:0"):
        np.testing.assert_allclose(f(a).numpy(), a.numpy() @ a.numpy() + 1.0, rtol=1e-6)
        try:
            tf.function(lambda v: tf.strings.as_string(v), jit_compile=True)(a)
        except tf.errors.InvalidArgumentError as e:
            assert "XLA_CPU_JIT" in str(e), e
        else:
            raise AssertionError("XLA did not compile the CPU function")
    print("OK")
    """)
