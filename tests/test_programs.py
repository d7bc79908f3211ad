"""Real user programs (tests/programs/*.py) give on the NPU what they give on TensorFlow's CPU.

Each program is a short keras.io-style script: Keras fit/evaluate/predict with partial last
batches, validation_split, TextVectorization, structured-data preprocessing layers, recurrent
and bidirectional layers, an LSTM seq2seq decoding step by step, ConvLSTM2D, a Transformer
encoder, a mini GPT generating token by token, a U-Net-style autoencoder on a tf.data pipeline,
CTC over STFT spectrograms, an MS-SSIM training loss, a graph neural network (gather and segment sums along edges),
augmentation layers, a VAE with a custom train_step, a two-input two-output model saved and
reloaded, mixed precision, callbacks, and lower-level TensorFlow (TF1 Session feeds, shape-less
tf.function signatures, map_fn/scan/cond/while_loop inside a layer, softmax cross-entropy, Prod
and sparse embedding gradients). Each runs in a fresh interpreter (tests/programs/_harness.py):
npu_device imported first, the program's run() on /device:CPU:0, then on /device:NPU:0 (float32
precision mode unless the program says otherwise), one JSON result. The test then checks

* the CPU run worked (a program broken on TF-CPU is a broken test, said as such),
* the NPU run raised nothing and every result matches the CPU within the program's TOLERANCE,
* the NPU really ran compiled models,
* with npu_device.compile_stats(): no cluster compile fell back to CPU (fallbacks <=
  MAX_FALLBACKS, default 0) and compiles <= the program's MAX_COMPILES.

Every subprocess has a timeout, so a hang fails the test instead of blocking the run.
Run one program by hand: python tests/programs/_harness.py <name> --compare
"""
import json
import os
import subprocess
import sys
import warnings

import pytest

PROGRAMS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
sys.path.insert(0, PROGRAMS_DIR)
import _harness  # noqa: E402  (tests/programs/_harness.py: runner and comparison)

sys.path.remove(PROGRAMS_DIR)

DEFAULT_TIMEOUT = 150    # seconds per program (CPU and NPU run, interpreter start included)


def run_program(name):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
    cmd = [sys.executable, os.path.join(PROGRAMS_DIR, "_harness.py"), name]
    timeout = getattr(_harness.load(name), "TIMEOUT", DEFAULT_TIMEOUT)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-3000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        pytest.fail(f"program {name} did not finish within {timeout} s (hang?)\n{tail}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_harness.RESULT_MARKER)]
    if not lines:
        pytest.fail(f"program {name} printed no result (exit code {proc.returncode}, crash?)\n"
                    f"stdout tail:\n{proc.stdout[-2000:]}\nstderr tail:\n{proc.stderr[-6000:]}")
    return json.loads(lines[-1][len(_harness.RESULT_MARKER):])


@pytest.mark.parametrize("name", _harness.program_names())
def test_program_matches_cpu(name):
    result = run_program(name)
    notes = _harness.compare(name, result)
    for note in notes:
        warnings.warn(f"{name}: {note}", UserWarning, stacklevel=1)


def test_suite_is_complete():
    """The issue asks for at least 15 programs, each with stated tolerances and bounds."""
    names = _harness.program_names()
    assert len(names) >= 15, names
    for name in names:
        module = _harness.load(name)
        assert callable(module.run), name
        assert {"rtol", "atol"} <= set(module.TOLERANCE), name
        assert isinstance(module.MAX_COMPILES, int), name
