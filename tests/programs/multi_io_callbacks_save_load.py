"""A functional model with two inputs and two outputs (keras.io functional API guide): losses and
metrics per output, loss_weights, sample weights per output, callbacks (ReduceLROnPlateau,
LearningRateScheduler, ModelCheckpoint, CSVLogger), save and reload, predict."""
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=2e-4, atol=2e-5)
MAX_COMPILES = 60
TIMEOUT = 300


def run(device):
    rng = np.random.default_rng(7)
    title = rng.integers(0, 100, (29, 6)).astype("int32")
    tags = rng.integers(0, 2, (29, 5)).astype("float32")
    prio = rng.random((29, 1)).astype("float32")
    dept = rng.integers(0, 3, (29,)).astype("int32")
    sw = rng.uniform(0.5, 1.5, 29).astype("float32")
    keras.utils.set_random_seed(0)
    d = tempfile.mkdtemp()
    with tf.device(device):
        t_in = keras.Input((6,), dtype="int32", name="title"); g_in = keras.Input((5,), name="tags")
        t = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(100, 8)(t_in))
        h = keras.layers.concatenate([t, g_in])
        h = keras.layers.LayerNormalization()(keras.layers.Dense(12, activation="relu")(h))
        out_p = keras.layers.Dense(1, name="priority")(h)
        out_d = keras.layers.Dense(3, name="department")(h)
        model = keras.Model({"title": t_in, "tags": g_in}, {"priority": out_p, "department": out_d})
        model.compile(keras.optimizers.Adam(0.01),
                      loss={"priority": "mse", "department": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
                      loss_weights={"priority": 1.0, "department": 0.5},
                      metrics={"department": ["accuracy"], "priority": ["mae"]})
        cbs = [keras.callbacks.ReduceLROnPlateau(patience=1, factor=0.5),
               keras.callbacks.LearningRateScheduler(lambda e, lr: lr * 0.9),
               keras.callbacks.ModelCheckpoint(os.path.join(d, "best.keras"), save_best_only=True, monitor="loss"),
               keras.callbacks.CSVLogger(os.path.join(d, "log.csv"))]
        hist = model.fit({"title": title, "tags": tags}, {"priority": prio, "department": dept},
                         sample_weight={"priority": sw, "department": sw}, batch_size=8, epochs=3, callbacks=cbs, verbose=0)
        reloaded = keras.models.load_model(os.path.join(d, "best.keras"))
        p1 = model.predict({"title": title, "tags": tags}, verbose=0)
        p2 = reloaded.predict({"title": title, "tags": tags}, batch_size=6, verbose=0)
        return {"loss": hist.history["loss"], "p_prio": p1["priority"], "p_dept": p1["department"],
                "r_prio": p2["priority"], "r_dept": p2["department"]}
