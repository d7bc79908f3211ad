"""npu_device/grappler_defaults.py: Grappler's memory optimizer is off for tf.functions (in a
process without GPUs) unless the user's config sets it, checked in Grappler's own log of the
optimizers it runs (meta_optimizer, VLOG 1)."""
from tests.conftest import run_python

GRAPPLER_LOG = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "meta_optimizer=1"}

PROGRAM = """
import sys
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.eager import context
RewriterConfig = rewriter_config_pb2.RewriterConfig
if {users_choice!r}:
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.memory_optimization = getattr(RewriterConfig, {users_choice!r})
    context.context()._config = config
import npu_device
import tensorflow as tf

with tf.device("/device:NPU:0"):
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])

@tf.function
def f(x):
    return tf.nn.relu(tf.matmul(x, x) - 10.0)

print("RESULT", f(x).numpy().tolist(), flush=True)
rewrite = context.context().config.graph_options.rewrite_options
print("MEMORY_OPTIMIZATION", RewriterConfig.MemOptType.Name(rewrite.memory_optimization))
"""


def _run(users_choice):
    r = run_python(PROGRAM.format(users_choice=users_choice), env=GRAPPLER_LOG, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RESULT [[0.0, 0.0], [5.0, 12.0]]" in r.stdout, r.stdout
    assert "PluggableGraphOptimizer" in r.stderr      # Grappler ran, and logged its optimizers
    return r


def test_the_memory_optimizer_is_off_for_tf_functions():
    r = _run(None)
    assert "MEMORY_OPTIMIZATION NO_MEM_OPT" in r.stdout
    assert "memory_optimizer" not in r.stderr


def test_a_memory_optimization_the_user_set_is_kept():
    r = _run("MANUAL")
    assert "MEMORY_OPTIMIZATION MANUAL" in r.stdout
    assert "memory_optimizer" in r.stderr
