"""Graph-engine benchmarks: per model and mode (training step, inference), what the graph engine
compiled and how fast the simulated NPU runs it next to TensorFlow on the CPU, in one process.

    PYTHONPATH=. python -m benchmarks.run                 # all models -> benchmarks/results/
    PYTHONPATH=. python -m benchmarks.run --quick         # mlp and cnn, fewer steps
    PYTHONPATH=. python -m benchmarks.run --models resnet50 --modes train --steps 3
    PYTHONPATH=. python -m benchmarks.run --update-doc    # also rewrite docs/benchmarks.md's table
    PYTHONPATH=. python -m benchmarks.run --first-step    # + time to first step (fresh processes)

Writes <out>.json (every number, see benchmarks/measure.py) and <out>.md (the table and the
issues' targets). Besides the NPU and TF-CPU columns, each row has TF-CPU with XLA
(jit_compile=True) unless --no-xla; the run also measures the machine's peak FP32 rate and the
GEMM micro-benchmark against it (benchmarks/roofline.py, gemm_bench.py, in a fresh process,
written to <out>_gemm.{json,md}) unless --no-gemm, and
with --first-step the first training step / inference call of each model in fresh processes
(benchmarks/first_step.py, also written to first_step.{json,md} next to <out>). A model that
fails is reported as failed; the others still run.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:                     # `python benchmarks/run.py` works too
    sys.path.insert(0, ROOT)

DOC = os.path.join(ROOT, "docs", "benchmarks.md")
DOC_BEGIN, DOC_END = "<!-- latest results: begin -->", "<!-- latest results: end -->"


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def environment():
    import tensorflow as tf
    from npu_device import _C  # noqa: F401  (the runtime the NPU numbers come from)
    return {"cpu": _cpu_name(), "cores": os.cpu_count(), "tensorflow": tf.__version__,
            "npu_threads": os.environ.get("NPU_NUM_THREADS", os.cpu_count()),
            "python": platform.python_version()}


def update_doc(md, path=DOC, begin=DOC_BEGIN, end=DOC_END):
    """Replaces a section of docs/benchmarks.md (between the markers `begin` and `end`; by
    default the latest results) with `md`."""
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise ValueError(f"{path} lacks the markers {begin} / {end}")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{md}\n{end}{tail}")


def parse_args(argv):
    from benchmarks import workloads
    from benchmarks.measure import MODES
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=None,
                   help=f"comma-separated subset of {','.join(workloads.WORKLOADS)} (default all)")
    p.add_argument("--modes", default=",".join(MODES), help="train, infer or both (default)")
    p.add_argument("--quick", action="store_true",
                   help=f"models {','.join(workloads.QUICK)} and 3 timed steps, unless given")
    p.add_argument("--steps", type=int, default=None, help="timed warm steps per device (20)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "latest"),
                   help="output path without extension (.json and .md are written)")
    p.add_argument("--update-doc", action="store_true",
                   help=f"rewrite the table in {DOC} (and the first-step section with "
                        f"--first-step)")
    p.add_argument("--no-xla", action="store_true", help="leave out the TF-CPU XLA column")
    p.add_argument("--no-gemm", action="store_true",
                   help="leave out the peak FLOP/s and GEMM roofline measurement")
    p.add_argument("--first-step", action="store_true",
                   help="also time each model's first step in fresh processes "
                        "(benchmarks/first_step.py)")
    a = p.parse_args(argv)
    names = a.models.split(",") if a.models else list(workloads.QUICK if a.quick
                                                      else workloads.WORKLOADS)
    try:
        a.workloads = workloads.select([n.strip() for n in names if n.strip()])
    except ValueError as e:
        p.error(str(e))
    a.mode_list = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.mode_list if m not in MODES]
    if bad or not a.mode_list:
        p.error(f"--modes {a.modes!r}: choose from {', '.join(MODES)}")
    a.steps = a.steps if a.steps is not None else (3 if a.quick else 20)
    if a.steps < 1:
        p.error(f"--steps must be at least 1, got {a.steps}")
    return a


def gemm_in_fresh_process(out):
    """benchmarks.gemm_bench (peak and GEMM rows) in a process of its own, like the first steps:
    the kernel's speed, not what the models measured before leave behind in this one (a heap of
    millions of objects, more threads; the smallest product read 39% of peak here against
    61-75% in runs of its own)."""
    r = subprocess.run([sys.executable, "-m", "benchmarks.gemm_bench", "--out", out], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                       timeout=1800)
    print(r.stdout, file=sys.stderr, flush=True)
    if r.returncode != 0:
        raise RuntimeError(f"benchmarks.gemm_bench failed (exit {r.returncode}): "
                           f"{r.stderr[-2000:]}")
    with open(out + ".json") as f:
        gemm = json.load(f)
    return gemm["peak"], gemm["rows"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    import npu_device  # noqa: F401  (loads the NPU plugin before TensorFlow creates devices)
    # Compile times are measured: every model compiles (python -m benchmarks.compile_cache
    # measures the disk cache).
    npu_device.set_npu_config(op_compiler_cache_mode="disable")
    from benchmarks import measure, report
    result = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m benchmarks.run " + " ".join(argv),
              "environment": environment(), "rows": []}
    for w in a.workloads:
        for mode in a.mode_list:
            print(f"[benchmarks] {w.name} {mode} ...", file=sys.stderr, flush=True)
            try:
                row = measure.measure(w, mode, a.steps, xla=not a.no_xla)
            except Exception as e:      # report the failure, keep measuring the others
                traceback.print_exc()
                # one line, no table separators: it goes into a markdown table cell
                text = " ".join(f"{type(e).__name__}: {e}".split()).replace("|", "/")
                row = {"model": w.name, "mode": mode, "error": text[:400]}
            result["rows"].append(row)
    if not a.no_gemm:
        print("[benchmarks] peak FLOP/s and GEMM ...", file=sys.stderr, flush=True)
        result["peak"], result["gemm"] = gemm_in_fresh_process(a.out + "_gemm")
    first_md = None
    if a.first_step:
        from benchmarks import first_step
        # fresh processes, after this one's measurements: they share no warm-up with it
        first = {k: result[k] for k in ("started", "command", "environment")}
        first["rows"] = first_step.measure_all(
            [w.name for w in a.workloads], a.mode_list,
            log=lambda m: print(m, file=sys.stderr, flush=True))
        result["first_step"] = first["rows"]
        first_md = first_step.markdown(first)
    md = report.markdown(result)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    if first_md is not None:
        base = os.path.join(os.path.dirname(os.path.abspath(a.out)), "first_step")
        with open(base + ".md", "w") as f:
            f.write(first_md)
        with open(base + ".json", "w") as f:
            json.dump(first, f, indent=1)
    if a.update_doc:
        update_doc(md)
        if first_md is not None:
            from benchmarks import first_step
            first_step.update_doc(first_md)
    print(md)
    if first_md is not None:
        print(first_md)
    failed = any("error" in r for r in result["rows"]) or any(
        "error" in r[s] for r in result.get("first_step", []) for s in ("npu", "cpu"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
