"""Profiles one model's NPU step: after compiling and two warm-up steps, `perf record` samples
this process over `--steps` steps, so the profile holds the steps only (the runtime has no
per-kernel timers; perf sees its C++ symbols), then prints the hottest symbols:

    PYTHONPATH=. python -m benchmarks.profile_step --model resnet50 --mode train --steps 10

Needs `perf` (linux-tools); without it, only the step time is printed.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(argv=None):
    from benchmarks import measure, workloads
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50", help=", ".join(workloads.WORKLOADS))
    p.add_argument("--mode", default="train", choices=measure.MODES)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--perf-data", default="/tmp/npu_step.perf", help="perf record's output file")
    p.add_argument("--top", type=int, default=40, help="symbols to print")
    a = p.parse_args(argv)
    (w,) = workloads.select([a.model])
    import npu_device  # noqa: F401  (loads the plugin before TensorFlow creates devices)
    import numpy as np
    import tensorflow as tf
    x, y = w.batch()
    with tf.device(measure.NPU):
        model = w.build()
        args = (tf.constant(x), tf.constant(y))
        step = tf.function(measure._step_fn(model, a.mode, w.from_logits, measure.NPU))
        np.asarray(step(*args))                  # compile
        np.asarray(step(*args))
        perf = _start_perf(a.perf_data)
        start = time.perf_counter()
        for _ in range(a.steps):
            np.asarray(step(*args))
        seconds = time.perf_counter() - start
    print(f"{a.model} {a.mode}: {a.steps} steps, {1000 * seconds / a.steps:.1f} ms/step")
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait()
        report = subprocess.run(["perf", "report", "-i", a.perf_data, "--no-children", "--stdio",
                                 "--sort", "dso,symbol", "-g", "none", "--percent-limit", "0.3"],
                                capture_output=True, text=True)
        rows = [line[:200] for line in report.stdout.splitlines() if "%" in line
                and not line.startswith("#")]
        print("\n".join(rows[:a.top]))
    return 0


def _start_perf(path):
    """perf record attached to this process, or None when perf is not installed."""
    if shutil.which("perf") is None:
        print("perf not found: no profile", file=sys.stderr)
        return None
    perf = subprocess.Popen(["perf", "record", "-F", "999", "-o", path, "-p", str(os.getpid())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)                              # perf attaches before the first timed step
    return perf


if __name__ == "__main__":
    sys.exit(main())
