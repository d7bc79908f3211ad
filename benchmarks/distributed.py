"""MirroredStrategy scaling: step time, all-reduce bytes and time, and scaling efficiency for 1, 2
and 4 replicas, on NPUs and on as many logical CPU devices (TF on CPU, the reference), each
configuration in its own process (device counts are fixed before TensorFlow starts).

    python -m benchmarks.distributed                      # mlp and resnet50_small, 1/2/4 replicas
    python -m benchmarks.distributed --models mlp --replicas 1,2 --steps 5

Per row: the median wall time of a synchronous training step (per-replica batch fixed, so the
global batch grows with the replicas), the bytes one step all-reduces (the gradients) and the
median time of that all-reduce alone (tensors of the gradients' shapes, made on each replica,
through ReplicaContext.all_reduce),
and the scaling efficiency: throughput with N replicas / (N x throughput with one). All replicas
share this machine's cores, so efficiency measures the overhead of replication and collectives,
not the speed-up separate NPUs would give.
"""
import argparse
import json
import subprocess
import sys

MODELS = ("mlp", "resnet50_small")
PER_REPLICA_BATCH = {"mlp": 64, "resnet50_small": 4}

WORKER = r"""
import json, sys, time
import npu_device
import numpy as np
import tensorflow as tf
import keras

model_name, kind, n, steps, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if kind == "npu":
    npu_device.set_npu_config(device_count=n)
    devices = [f"/device:NPU:{i}" for i in range(n)]
else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    devices = [f"/device:CPU:{i}" for i in range(n)]
strategy = tf.distribute.MirroredStrategy(devices)
keras.utils.set_random_seed(0)
with strategy.scope():
    if model_name == "mlp":
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                                  keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
        shape = (256,)
    else:
        model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        shape = (32, 32, 3)
    opt = keras.optimizers.SGD(0.01)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=model_name == "mlp",
                                                     reduction="none")
global_batch = batch * n
rng = np.random.default_rng(0)
x = rng.standard_normal((global_batch,) + shape).astype(np.float32)
y = rng.integers(0, 10, global_batch).astype(np.int32)
data = next(iter(strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch))))

@tf.function
def step(xb, yb):
    def replica(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)),
                                              global_batch_size=global_batch)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(replica, args=(xb, yb)), axis=None)

shapes = [tuple(v.shape) for v in model.trainable_variables]
reduce_bytes = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in model.trainable_variables)

@tf.function
def all_reduce():
    def replica():
        # gradient-shaped values made on each replica's own device (a captured tensor would
        # be copied to every replica first, and that copy would be timed too)
        ctx = tf.distribute.get_replica_context()
        reduced = ctx.all_reduce("SUM", [tf.fill(s, 1.0) for s in shapes])
        # one element of each result: fetching all of them would time host copies instead
        return tf.reduce_sum(tf.stack([tf.reshape(r, [-1])[0] for r in reduced]))
    return strategy.run(replica)

def median(fn, *args):
    fn(*args)                                     # compile / warm up
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        out = fn(*args)
        tf.nest.map_structure(lambda v: v.numpy() if hasattr(v, "numpy") else v,
                              strategy.experimental_local_results(out))
        times.append(time.perf_counter() - t)
    return float(np.median(times))

print("RESULT " + json.dumps({"step_s": median(step, *data),
                              "all_reduce_s": median(all_reduce) if n > 1 else 0.0,
                              "all_reduce_bytes": reduce_bytes if n > 1 else 0,
                              "global_batch": global_batch}))
"""


def measure(model, kind, n, steps):
    p = subprocess.run([sys.executable, "-c", WORKER, model, kind, str(n), str(steps),
                        str(PER_REPLICA_BATCH[model])], capture_output=True, text=True,
                       timeout=1800)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{model} {kind} x{n} failed:\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--replicas", default="1,2,4")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    rows = []
    for model in args.models.split(","):
        base = {}
        for n in map(int, args.replicas.split(",")):
            for kind in ("npu", "cpu"):
                r = measure(model, kind, n, args.steps)
                throughput = r["global_batch"] / r["step_s"]
                base.setdefault(kind, throughput / n)
                rows.append(dict(r, model=model, device=kind, replicas=n,
                                 efficiency=throughput / (n * base[kind])))
    print("| model | device | replicas | global batch | step (ms) | all-reduce bytes/step | "
          "all-reduce (ms) | scaling efficiency |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['device']} | {r['replicas']} | {r['global_batch']} | "
              f"{r['step_s'] * 1e3:.1f} | {r['all_reduce_bytes']} | "
              f"{r['all_reduce_s'] * 1e3:.2f} | {r['efficiency']:.2f} |")
    return rows


if __name__ == "__main__":
    main()
