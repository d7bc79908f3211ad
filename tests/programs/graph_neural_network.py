"""Graph neural network node classification (keras.io GNN on Cora, small): messages gathered
along edges (tf.gather), weighted and summed per target node (tf.math.unsorted_segment_sum),
normalized by degree, two graph-conv layers in a subclassed keras.Model, node indices as the
inputs, fit with a partial batch and validation_split."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=5e-4, atol=5e-5)
MAX_COMPILES = 50
TIMEOUT = 300
NODES, FEATURES, CLASSES = 30, 6, 3


class GraphConv(keras.layers.Layer):
    def __init__(self, units, edges, weights, **kw):
        super().__init__(**kw)
        self.dense = keras.layers.Dense(units, activation="relu")
        self.edges, self.edge_weights = edges, weights

    def call(self, h):
        messages = tf.gather(self.dense(h), self.edges[1]) * self.edge_weights[:, None]
        summed = tf.math.unsorted_segment_sum(messages, self.edges[0], NODES)
        degree = tf.math.unsorted_segment_sum(self.edge_weights, self.edges[0], NODES)
        return tf.concat([h, summed / (degree[:, None] + 1.0)], axis=1)


class GNN(keras.Model):
    def __init__(self, features, edges, weights):
        super().__init__()
        self.features = features
        self.conv1 = GraphConv(8, edges, weights)
        self.conv2 = GraphConv(8, edges, weights)
        self.out = keras.layers.Dense(CLASSES)

    def call(self, node_ids):
        h = self.conv2(self.conv1(self.features))
        return self.out(tf.gather(h, tf.reshape(node_ids, [-1])))


def run(device):
    rng = np.random.default_rng(23)
    features = rng.normal(size=(NODES, FEATURES)).astype("float32")
    edges = rng.integers(0, NODES, (2, 80)).astype("int32")
    weights = rng.uniform(0.5, 1.5, 80).astype("float32")
    labels = rng.integers(0, CLASSES, NODES).astype("int32")
    ids = np.arange(NODES, dtype="int32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        model = GNN(tf.constant(features), tf.constant(edges), tf.constant(weights))
        model.compile(keras.optimizers.Adam(0.01),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        hist = model.fit(ids, labels, batch_size=7, epochs=3, validation_split=0.2, verbose=0)
        return {"loss": hist.history["loss"], "val_loss": hist.history["val_loss"],
                "logits": model.predict(ids, batch_size=9, verbose=0)}
