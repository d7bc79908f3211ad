"""Fixed costs of the NPU path: one tf.function call, and one iteration of a tf.while_loop.

    PYTHONPATH=. python -m benchmarks.loop_overhead
    PYTHONPATH=. python -m benchmarks.loop_overhead --iterations 500 --calls 1000

The same two functions run on TF's CPU and on the NPU in one process, from the same weights:
`call` is a [16, 64] x [64, 64] MatMul + 1 + Tanh called `--calls` times; `loop` runs that body
`--iterations` times in a tf.while_loop (lowered, so TF's executor drives the loop and the NPU
runs the body's clusters each iteration). Reported: median time per call and per iteration over
`--repeats` timed rounds, after two warm-up calls, and the CPU/NPU ratio (above 1: the NPU is
faster). The work is tiny on purpose: what is measured is launch and loop overhead.
"""
import argparse
import statistics
import time


def measure(device, iterations, calls, repeats):
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)
    with tf.device(device):
        w = tf.Variable(rng.standard_normal((64, 64)).astype(np.float32) * 0.1)
        x = tf.constant(rng.standard_normal((16, 64)).astype(np.float32))

        @tf.function
        def call(x):
            return tf.tanh(tf.matmul(x, w) + 1.0)

        @tf.function
        def loop(x):
            return tf.while_loop(lambda i, v: i < iterations,
                                 lambda i, v: (i + 1, tf.tanh(tf.matmul(v, w) + 1.0)),
                                 (tf.constant(0), x))[1]
        out = {}
        for name, fn, reps, per in (("call", call, calls, 1), ("loop", loop, 5, iterations)):
            fn(x).numpy()
            fn(x).numpy()
            rounds = []
            for _ in range(repeats):
                start = time.perf_counter()
                for _ in range(reps):
                    fn(x).numpy()
                rounds.append((time.perf_counter() - start) / reps / per)
            out[name] = statistics.median(rounds)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    import npu_device  # noqa: F401  (registers the NPU before TF creates its devices)
    cpu = measure("/device:CPU:0", a.iterations, a.calls, a.repeats)
    npu = measure("/device:NPU:0", a.iterations, a.calls, a.repeats)
    print("| what | NPU (µs) | CPU (µs) | CPU/NPU |")
    print("|---|---|---|---|")
    for name, label in (("call", "tf.function call"),
                        ("loop", f"while_loop iteration ({a.iterations} iterations)")):
        print(f"| {label} | {npu[name] * 1e6:.1f} | {cpu[name] * 1e6:.1f} | "
              f"{cpu[name] / npu[name]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
