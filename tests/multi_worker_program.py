"""One worker of a MultiWorkerMirroredStrategy training run (tests/test_distribute.py starts
several on 127.0.0.1). Keras `fit` (tf_keras: Keras 3's fit cannot run this strategy, see
docs/distributed.md) on a distributed tf.data dataset, with BackupAndRestore; the chief saves the
weights. argv[1]: JSON with index, ports, device ("npu" or "cpu"), backup, epochs, die_at_epoch
(this worker exits abruptly when that epoch begins; -1 never), weights (where the chief saves),
out (JSON result path)."""
import json
import os
import sys

args = json.loads(sys.argv[1])
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"127.0.0.1:{p}" for p in args["ports"]]},
    "task": {"type": "worker", "index": args["index"]}})

import npu_device  # noqa: E402,F401,I001
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

if args["device"] == "cpu":
    tf.config.set_visible_devices([], "NPU")
strategy = tf.distribute.MultiWorkerMirroredStrategy()

rng = np.random.default_rng(0)
x = rng.standard_normal((200, 8)).astype(np.float32)   # 200 = 6 global batches of 32 + 8
y = rng.integers(0, 3, 200).astype(np.int32)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                              keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class DieAt(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == args["die_at_epoch"]:
            os._exit(17)              # a crash: no cleanup, no goodbye to the other workers


history = model.fit(dataset, epochs=args["epochs"], verbose=0,
                    callbacks=[keras.callbacks.BackupAndRestore(args["backup"]), DieAt()])
chief = args["index"] == 0
# Every worker saves (the strategy synchronizes them); the others write to a scratch path.
model.save_weights(args["weights"] if chief else f"{args['weights']}.worker{args['index']}")
with open(args["out"], "w") as f:
    json.dump({"loss": history.history["loss"], "epochs": history.epoch,
               "weights": [w.numpy().tolist() for w in model.weights],
               "devices": list(strategy.extended.worker_devices)}, f)
