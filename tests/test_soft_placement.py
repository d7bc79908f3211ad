"""npu_device/soft_placement.py: eager ops keep soft placement when TensorFlow's eager context is
first created inside a tf.function's trace (TF would otherwise turn it off for the process), so
Keras `fit` under the NPU's device scope still runs its input pipeline's ops on the CPU; a choice
the program made is kept. Each case needs a fresh process (the context is created once)."""
from tests.conftest import run_python

PROGRAM = """
import tensorflow as tf
if {users_choice!r} is not None:
    tf.config.set_soft_device_placement({users_choice!r})
import npu_device
import keras
import numpy as np

def step(x, w):                      # the first thing that creates the eager context: a trace
    with tf.GradientTape() as tape:
        tape.watch(w)
        loss = tf.reduce_sum(tf.matmul(x, w))
    return tape.gradient(loss, w)
tf.function(step).get_concrete_function(tf.TensorSpec([2, 3]), tf.TensorSpec([3, 4]))
print("SOFT", tf.config.get_soft_device_placement(), flush=True)
try:
    with tf.device("/device:NPU:0"):
        print("RANGE", [int(v) for v in tf.data.Dataset.range(3)], flush=True)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile("sgd", "mse")
        history = model.fit(np.ones((10, 4), np.float32), np.zeros((10, 2), np.float32),
                            batch_size=4, epochs=1, verbose=0)
    print("FIT", len(history.history["loss"]), flush=True)
except tf.errors.InvalidArgumentError as e:
    print("PLACEMENT ERROR", e.message.split(".")[0], flush=True)
"""


def _run(users_choice):
    r = run_python(PROGRAM.format(users_choice=users_choice), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_eager_ops_without_npu_kernels_run_on_the_cpu_after_a_first_trace():
    out = _run(None)
    assert "SOFT True" in out
    assert "RANGE [0, 1, 2]" in out, out
    assert "FIT 1" in out, out


def test_a_program_that_turned_soft_placement_off_keeps_it_off():
    out = _run(False)
    assert "SOFT False" in out
    assert "PLACEMENT ERROR Could not satisfy device specification" in out, out
