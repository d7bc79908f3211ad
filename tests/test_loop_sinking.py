"""Loop sinking: option iterations_per_loop (and Ascend's npu_device.set_npu_loop_size) makes
Keras models compiled on the NPU run N steps per call of their train/test/predict functions
(steps_per_execution), unless the program chose steps_per_execution itself."""
import math

import numpy as np
import pytest

import npu_device

keras = pytest.importorskip("keras")

SAMPLES, BATCH = 100, 8            # 13 batches per epoch, the last one of 4 samples
STEPS = math.ceil(SAMPLES / BATCH)


@pytest.fixture(autouse=True)
def _default_loop_size():
    npu_device.set_npu_config(iterations_per_loop=None)
    yield
    npu_device.set_npu_config(iterations_per_loop=None)


def _data():
    rng = np.random.RandomState(0)
    x = rng.rand(SAMPLES, 8).astype("float32")
    return x, (x.sum(1) > 4).astype("int32")


def _model(**compile_kwargs):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], **compile_kwargs)
    return model


class Recorder(keras.callbacks.Callback):
    """Counts calls of the model's train_function (host calls) and the callbacks Keras makes."""

    def __init__(self):
        super().__init__()
        self.calls, self.batch_ends, self.epoch_ends = 0, [], 0

    def on_train_begin(self, logs=None):
        self.original = f = self.model.train_function

        def counted(iterator):
            self.calls += 1
            return f(iterator)
        self.model.train_function = counted

    def on_train_end(self, logs=None):
        self.model.train_function = self.original

    def on_train_batch_end(self, batch, logs=None):
        assert "loss" in logs
        self.batch_ends.append(batch)

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ends += 1


def _fit(model, epochs=2):
    x, y = _data()
    rec = Recorder()
    history = model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                        callbacks=[rec])
    return rec, history.history


def test_iterations_per_loop_sets_steps_per_execution_and_matches_one_step():
    baseline = _model()
    assert baseline.steps_per_execution == 1
    rec1, hist1 = _fit(baseline)
    assert rec1.calls == 2 * STEPS

    npu_device.set_npu_config(iterations_per_loop=4)
    model = _model()
    assert model.steps_per_execution == 4
    rec4, hist4 = _fit(model)
    # 13 batches per epoch in calls of 4: 4 host calls, the last running the one batch left.
    assert rec4.calls == 2 * math.ceil(STEPS / 4)
    assert len(rec4.batch_ends) == rec4.calls and rec4.epoch_ends == 2
    for w1, w4 in zip(baseline.get_weights(), model.get_weights()):
        np.testing.assert_allclose(w4, w1, rtol=1e-5, atol=1e-6)
    for name in hist1:
        np.testing.assert_allclose(hist4[name], hist1[name], rtol=1e-5, atol=1e-6)
    # The saved compile config says what the program wrote, so a saved model stays portable.
    assert model.get_compile_config()["steps_per_execution"] == 1


def test_evaluate_and_predict_run_in_loops_with_a_partial_last_batch():
    x, y = _data()
    baseline = _model()
    expected_pred = baseline.predict(x, batch_size=BATCH, verbose=0)
    expected_eval = baseline.evaluate(x, y, batch_size=BATCH, verbose=0)
    npu_device.set_npu_config(iterations_per_loop=4)
    model = _model()
    np.testing.assert_allclose(model.predict(x, batch_size=BATCH, verbose=0), expected_pred,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=BATCH, verbose=0),
                               expected_eval, rtol=1e-5, atol=1e-6)


def test_explicit_steps_per_execution_wins():
    npu_device.set_npu_config(iterations_per_loop=4)
    assert _model(steps_per_execution=2).steps_per_execution == 2
    assert _model(steps_per_execution=1).steps_per_execution == 1
    rec, _ = _fit(_model(steps_per_execution=1), epochs=1)
    assert rec.calls == STEPS


def test_run_eagerly_keeps_one_step_per_call():
    npu_device.set_npu_config(iterations_per_loop=4)
    assert _model(run_eagerly=True).steps_per_execution == 1


def test_option_is_read_when_the_model_compiles():
    model = _model()
    npu_device.set_npu_config(iterations_per_loop=4)
    assert model.steps_per_execution == 1         # compiled before: unchanged
    model = _model()
    assert model.steps_per_execution == 4
    npu_device.set_npu_config(iterations_per_loop=None)
    assert model.steps_per_execution == 4         # compiled with 4: keeps it


def test_set_npu_loop_size_is_the_ascend_alias():
    npu_device.set_npu_loop_size(16)
    assert npu_device.get_npu_config()["iterations_per_loop"] == 16
    assert _model().steps_per_execution == 16
    for bad in (0, -3, 2.5, "many"):
        with pytest.raises(ValueError, match="iterations_per_loop.*Allowed: an integer >= 1"):
            npu_device.set_npu_loop_size(bad)
    assert npu_device.get_npu_config()["iterations_per_loop"] == 16


def test_benchmark_script_runs(tmp_path):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-m", "benchmarks.loop_sinking", "--models", "mlp",
                        "--loops", "1,2", "--steps", "4", "--epochs", "1"],
                       cwd=root, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=root))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    rows = [line for line in p.stdout.splitlines() if line.startswith("| mlp |")]
    assert [r.split("|")[4:6] for r in rows] == [[" 1 ", " 4 "], [" 2 ", " 2 "]], p.stdout


def test_step_counts_keras_would_round_up_are_warned_about():
    """Keras runs whole calls: steps_per_epoch=7 with 4 steps per call runs 8 batches of a
    repeated dataset. A user who never chose steps_per_execution hears it, once per argument."""
    import warnings
    tf = pytest.importorskip("tensorflow")
    x, y = _data()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
    npu_device.set_npu_config(iterations_per_loop=4)
    model = _model()
    with pytest.warns(UserWarning) as seen:
        model.fit(data, steps_per_epoch=7, epochs=2, validation_data=data, validation_steps=3,
                  shuffle=False, verbose=0)
        model.evaluate(data, steps=5, verbose=0)
    texts = [str(w.message) for w in seen if "npu_device" in str(w.message)]
    assert len(texts) == 3, texts                # once each, not per epoch nor for fit's evaluate
    assert "steps_per_epoch=7" in texts[0] and "8 steps" in texts[0]
    assert "validation_steps=3" in texts[1] and "steps=5" in texts[2]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="npu_device")
        model.fit(data, steps_per_epoch=8, epochs=1, shuffle=False, verbose=0)   # 2 calls
        _model(steps_per_execution=4).evaluate(data, steps=5, verbose=0)  # the user's choice
