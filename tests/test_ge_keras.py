"""A Keras 3 train step (model.train_step traced in a tf.function: forward, backward, optimizer
update, metrics) placed on the NPU and partitioned; the partitioned graph runs with TF on CPU
for the variable ops and the compiled clusters on the reference executor. Loss, metrics and
every variable after the step must match Keras running the same step on CPU."""
import numpy as np
import pytest
import tensorflow as tf
import keras
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler import reports
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.devtools import place, run_graph

# What may legitimately stay outside clusters in a train step; anything else (notably
# "op X has no NPU implementation") means the registry misses a Keras op.
ALLOWED_FALLBACKS = {"resource op stays in TF", "graph input/output stays in TF",
                     "constant: copied into the clusters that read it",
                     "kept by Grappler (fetch or preserved node)", "control-only op stays in TF"}


def cnn():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(4, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.AveragePooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(4),
    ])


def mlp():
    return keras.Sequential([
        keras.Input((12,)),
        keras.layers.Dense(16, activation="sigmoid"),
        keras.layers.BatchNormalization(),
        keras.layers.Dense(8, activation="relu6"),
        keras.layers.Dense(4, activation="softmax"),
    ])


def mobilenet_like():
    return keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False),
        keras.layers.BatchNormalization(),
        keras.layers.ReLU(6.0),
        keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2),
        keras.layers.ReLU(),
        keras.layers.Conv2D(6, 1),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(3, activation="softmax"),
    ])


# Dropout's random numbers come from ops the NPU does not implement; they stay TF ops.
RANDOM_OPS = {f"op {op} has no NPU implementation"
              for op in ("StatelessRandomUniformV2", "StatelessRandomGetKeyCounter")}

CONFIGS = {
    "cnn_adam_sparse_xent": (cnn, lambda: keras.optimizers.Adam(1e-2),
                             keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                             (8, 8, 8, 3), lambda r: r.integers(0, 4, 8).astype(np.int32)),
    "mlp_sgd_momentum_xent": (mlp, lambda: keras.optimizers.SGD(0.1, momentum=0.9),
                              "categorical_crossentropy", (8, 12),
                              lambda r: np.eye(4, dtype=np.float32)[r.integers(0, 4, 8)]),
    "mobilenet_like_rmsprop": (mobilenet_like, lambda: keras.optimizers.RMSprop(1e-2),
                               "sparse_categorical_crossentropy", (4, 12, 12, 3),
                               lambda r: r.integers(0, 3, 4).astype(np.int32)),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_keras_train_step_through_npu_clusters(config):
    make_model, make_opt, loss, x_shape, make_y = CONFIGS[config]
    keras.utils.set_random_seed(0)
    r = np.random.default_rng(0)
    model = make_model()
    model.compile(optimizer=make_opt(), loss=loss, metrics=["accuracy"], jit_compile=False)
    x, y = r.standard_normal(x_shape).astype(np.float32), make_y(r)

    step = tf.function(lambda x, y: model.train_step((x, y)))
    cf = step.get_concrete_function(tf.TensorSpec(x.shape), tf.TensorSpec(y.shape, y.dtype))
    state = model.variables + model.optimizer.variables + \
        [v for m in model.metrics for v in m.variables]
    captured = {}
    for external, internal in cf.graph.captures:
        for v in state:
            if v.value.handle is external:
                captured[internal.op.name] = (v, v.numpy())
    assert len(captured) == len(cf.graph.captures)
    fetches = [t.name for t in cf.outputs]

    placed = place(cf.graph.as_graph_def(), fetches=[f.split(":")[0] for f in fetches])
    part = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    report = reports.last()
    assert report.clusters
    assert {n.reason for n in report.fallbacks()} <= ALLOWED_FALLBACKS | RANDOM_OPS

    got, final = run_graph(part, {"x": x, "y": y}, fetches,
                           {name: init for name, (_, init) in captured.items()})
    want = step(x, y)                                    # Keras on CPU updates the variables
    for g, w in zip(got, [np.asarray(w) for w in tf.nest.flatten(want)]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for name, (v, _) in captured.items():
        np.testing.assert_allclose(final[name], v.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=v.path)
