"""A served model's inference call: the benchmark MLP (Dense 784 -> 512 -> 256 -> 10, ReLU)
saved, frozen and compiled by npu-atc, run through `CannSession`, against TF on the CPU calling
the same SavedModel's signature in the same process (no server, no network on either side).

    PYTHONPATH=. python -m benchmarks.frozen_inference [--batches 1,64,256] [--out PATH]

A frozen model's weights are constants, so its MatMuls take the packed kernel (B packed at the
first call and kept: kernels/gemm_packed_impl.h). Per batch size: the best and median of
`repeat` rounds of 5 calls each side, taking turns by rounds (gemm_bench.timings), and the
best-time ratio CPU/NPU; the NPU's
result is checked against TF's.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import gemm_bench  # noqa: E402

LAYERS = ((784, 512), (512, 256), (256, 10))


def save_mlp(path):
    import tensorflow as tf
    rng = np.random.default_rng(0)

    class Mlp(tf.Module):
        def __init__(self):
            self.ws = [tf.Variable(rng.normal(size=s).astype(np.float32) / 16) for s in LAYERS]
            self.bs = [tf.Variable(rng.normal(size=s[1]).astype(np.float32)) for s in LAYERS]

        @tf.function(input_signature=[tf.TensorSpec([None, LAYERS[0][0]], tf.float32, name="x")])
        def __call__(self, x):
            for i, (w, b) in enumerate(zip(self.ws, self.bs)):
                x = tf.matmul(x, w) + b
                if i < len(LAYERS) - 1:
                    x = tf.nn.relu(x)
            return {"y": x}

    mlp = Mlp()
    with tf.device("/CPU:0"):
        tf.saved_model.save(mlp, path, signatures=mlp.__call__)


def bench(saved, batch, repeat, workdir):
    import tensorflow as tf
    from npu_device.serving import atc
    from npu_device.serving.session import CannSession
    graph, inputs, outputs = atc.load_saved_model(saved)
    om = os.path.join(workdir, f"mlp_{batch}.om")
    with open(om, "wb") as f:
        f.write(atc.compile_graph(graph, inputs, outputs, input_shape={"x": [batch, 784]},
                                  name="mlp"))
    session = CannSession(om)
    x = np.random.default_rng(1).normal(size=(batch, 784)).astype(np.float32)
    with tf.device("/CPU:0"):
        signature = tf.saved_model.load(saved).signatures["serving_default"]
        xt = tf.constant(x)
    calls = {"npu": lambda: session.run({"x": x})["y"],       # the first call packs the weights
             "cpu": lambda: signature(x=xt)["y"].numpy()}
    want, got = calls["cpu"](), calls["npu"]()
    times = dict(zip(calls, gemm_bench.timings(list(calls.values()), repeat, run=5)))
    session.close()
    best = {side: min(t) for side, t in times.items()}
    return {"batch": batch, "max_rel_error": float(np.abs(got - want).max() / np.abs(want).max()),
            "npu_us": 1e6 * best["npu"], "cpu_us": 1e6 * best["cpu"],
            "npu_median_us": 1e6 * float(np.median(times["npu"])),
            "cpu_median_us": 1e6 * float(np.median(times["cpu"])),
            "ratio": best["cpu"] / best["npu"]}


TABLE_HEAD = ["| batch | NPU session best / median (us) | TF-CPU signature best / median (us) "
              "| CPU/NPU (best) |", "|---|---|---|---|"]


def table_line(r):
    return (f"| {r['batch']} | {r['npu_us']:.0f} / {r['npu_median_us']:.0f} "
            f"| {r['cpu_us']:.0f} / {r['cpu_median_us']:.0f} | {r['ratio']:.2f} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="1,64,256", help="comma-separated batch sizes")
    p.add_argument("--repeat", type=int, default=40, help="rounds of 5 timed calls a side")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "frozen_inference"))
    a = p.parse_args(argv)
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        p.error(f"--batches must be comma-separated integers, got {a.batches!r}")
    if a.repeat < 1 or min(batches) < 1:
        p.error("--repeat and every batch size must be at least 1")
    import npu_device  # noqa: F401  (loads the plugin before TensorFlow creates devices)
    with tempfile.TemporaryDirectory() as workdir:
        saved = os.path.join(workdir, "saved_model")
        save_mlp(saved)
        print("\n".join(TABLE_HEAD), flush=True)
        rows = []
        for batch in batches:
            rows.append(bench(saved, batch, a.repeat, workdir))
            print(table_line(rows[-1]), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(TABLE_HEAD + [table_line(r) for r in rows]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
