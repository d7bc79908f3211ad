import os
import subprocess
import sys
import textwrap

import pytest

# The suite checks the engine itself: a cluster it cannot compile fails the test instead of
# quietly running on CPU (tests of the fallback turn it back on). Subprocesses inherit this.
os.environ.setdefault("NPU_CPU_FALLBACK", "0")
# Every test compiles what it runs (compile counts are asserted; a model from an earlier run's
# disk cache would hide the compiler). tests/test_disk_compile_cache.py turns the cache on.
os.environ.setdefault("NPU_OP_COMPILER_CACHE_MODE", "disable")
# TensorFlow on the CPU is the reference, and it must be the same computation on every machine:
# Intel builds otherwise swap in oneDNN kernels, which differ from TF's own (Eigen) ones in edge
# cases (empty inputs give wrong shapes or errors, NCHW pooling is accepted). Subprocesses inherit
# this; the benchmarks compare against TF as users run it, oneDNN included.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

# Load the NPU plugin before any test runs a TensorFlow op: once TF's eager context exists the
# plugin can no longer join the process (an installed package is auto-loaded by TF anyway).
import npu_device  # noqa: F401,E402


def run_python(code, env=None, timeout=300):
    """Runs `code` in a fresh interpreter (import order and process aborts need one)."""
    full_env = dict(os.environ)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def python_subprocess():
    return run_python


@pytest.fixture
def no_soft_placement():
    """Every op a test runs on the NPU must have an NPU kernel: one without fails instead of
    running on the CPU. Soft placement comes back afterwards (Keras' fit needs it)."""
    import tensorflow as tf
    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    yield
    tf.config.set_soft_device_placement(soft)
