"""Grappler runs the plugin's optimizer twice over every graph (two meta-optimizer iterations);
a graph the partitioner returned comes back unchanged from the second call without being
partitioned again (tf_plugin_cc/optimizer.cc). For that, the partitioner leaves out what TF's
passes would remove in between: a default attr left unset, control edges a data edge implies."""
import numpy as np
import tensorflow as tf

import npu_device  # noqa: F401  (registers the NPU)
from graph_engine.compiler.cluster_op import CLUSTER_OPS
from npu_device import compiler_bridge

R = np.random.default_rng(5)


def _train(device, weights, batches):
    with tf.device(device):
        model = tf.keras.Sequential([tf.keras.Input((6,)),
                                     tf.keras.layers.Dense(8, activation="relu"),
                                     tf.keras.layers.Dense(3)])
        model.set_weights(weights)
        opt = tf.keras.optimizers.Adam(0.01)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                    y, model(x), from_logits=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))
            return loss

        events = compiler_bridge.start_recording()
        try:
            losses = [float(step(x, y)) for x, y in batches]
        finally:
            compiler_bridge.stop_recording(events)
    return losses, [e for e in events if isinstance(e, compiler_bridge.PartitionEvent)]


def test_a_keras_training_step_is_partitioned_once_and_trains_as_on_cpu():
    weights = [R.standard_normal(s).astype(np.float32) * 0.5 for s in ((6, 8), (8,), (8, 3), (3,))]
    batches = [(R.standard_normal((5, 6)).astype(np.float32), R.integers(0, 3, 5))
               for _ in range(4)]
    npu, partitions = _train("/device:NPU:0", weights, batches)
    cpu, _ = _train("/device:CPU:0", weights, batches)
    # the step's graph (Keras' variable initializers partition too, with nothing to cluster)
    step = [p for p in partitions if any(n.op in CLUSTER_OPS or n.cluster for n in p.report.nodes)]
    assert len(step) == 1, [p.summary() for p in step]
    assert step[0].report.clusters
    np.testing.assert_allclose(npu, cpu, rtol=1e-4, atol=1e-5)
