"""Time to first step: the first training step and the first inference call as a user sees them
(tracing, Grappler, partitioning, GE compile, load, run), NPU against TF on the CPU.

    PYTHONPATH=. python -m benchmarks.first_step                          # every model
    PYTHONPATH=. python -m benchmarks.first_step --models mlp,cnn --modes infer
    PYTHONPATH=. python -m benchmarks.first_step --update-doc             # + docs/benchmarks.md

Every (model, mode, side) runs in a fresh process, so that neither side profits from the other's
warm-up (TF's tracing caches, the compiler's imports, kernels' first-use costs). The NPU side
imports npu_device (disk compile cache off: every model compiles); the CPU side is plain
TensorFlow without npu_device, what the user would run instead. Importing TensorFlow, building
the model and its optimizer are not timed; timed is the first call of the step as a fresh
tf.function (benchmarks/measure.py's step: Adam training step or forward pass) with the output
fetched to the host, then a few warm calls (the run itself, for scale).

Where the NPU's first step went, from the compiler hook's events (npu_device.compiler_bridge)
and npu_device.compile_stats():
  partition   our Grappler optimizer partitioning the graphs (PartitionEvent seconds)
  GE passes   per pass of the compile pipeline, summed over the models compiled (the pass logs)
  import + serialize   the rest of each compile: reading the cluster's GraphDef and writing
              the model bytes (compile seconds less its logged passes)
  waited      of a model compiled ahead (npu_device/compile_ahead.py: while TF placed and
              instantiated the graph), the part of its compile the step still waited for
  load        loading the compiled models onto the device (compile_stats load_seconds)
  run         the step's own execution, taken as the median warm call
  TF          the rest of the first call: tf.function tracing, TF's own Grappler passes,
              placement, function instantiation, and the first run's extra cost over a warm
              one (first call less all of the above, a model compiled ahead counting with the
              time waited for it)

Inference also measures Keras `predict` at a new batch size after warm-up (issue 17: "every new
predict batch size compiles 5-6 models"): predict(x) twice at the workload's batch B, then
predict(x[:B-1]) timed, with the models it compiled and the predict function's traces.
"""
import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from graph_engine.compiler.cluster_op import CLUSTER_OPS  # noqa: E402

MARK = "FIRST_STEP_RESULT "
SIDES = ("npu", "cpu")
DOC_BEGIN, DOC_END = "<!-- first step: begin -->", "<!-- first step: end -->"
WARM_CALLS = 3


# --- the child process: one (model, mode, side) --------------------------------------------

class _NpuRecorder:
    """The compiler hook's events and compile counters over a span of the NPU process."""

    def __init__(self):
        import npu_device
        from npu_device import compiler_bridge
        self._bridge, self._npu = compiler_bridge, npu_device
        npu_device.compile_stats(reset=True)
        self._events = compiler_bridge.start_recording()

    def stop(self):
        self._bridge.stop_recording(self._events)
        stats = self._npu.compile_stats()
        b = self._bridge
        parts = [e for e in self._events if isinstance(e, b.PartitionEvent)]
        models = [e for e in self._events if isinstance(e, b.ModelEvent)]
        passes = collections.Counter()
        for e in models:
            for p in e.passes:
                if "ms" in p:                       # skipped passes have no time
                    passes[p["pass"]] += p["ms"] / 1000
        compile_s = sum(e.seconds for e in models)
        ahead = [e for e in models if e.waited is not None]
        return {"partitions": len(parts), "partition_s": sum(e.seconds for e in parts),
                "models": len(models), "compile_s": compile_s,
                "ahead": len(ahead), "waited_s": sum(e.waited for e in ahead),
                "ahead_s": sum(e.seconds for e in ahead),
                "passes_s": dict(passes.most_common()),
                "import_serialize_s": compile_s - sum(passes.values()),
                "load_s": stats.get("load_seconds", 0.0),
                "compile_failures": stats.get("compile_failures", 0),
                "fallbacks": stats.get("fallbacks", 0),
                "eager_op_models": sum(1 for e in models if e.op not in CLUSTER_OPS)}


def _new_batch(model, x, dev, side):
    """Keras predict at batch B (twice, warm-up), then timed at the new batch B - 1."""
    import tensorflow as tf
    b = len(x)
    with tf.device(dev):
        model.predict(x, batch_size=b, verbose=0)
        model.predict(x, batch_size=b, verbose=0)
        traces = _traces(model)
        rec = _NpuRecorder() if side == "npu" else None
        start = time.perf_counter()
        model.predict(x[:b - 1], batch_size=b - 1, verbose=0)
        seconds = time.perf_counter() - start
    out = {"batch": b - 1, "seconds": seconds, "jit_compile": bool(model.jit_compile)}
    after = _traces(model)
    out["traces"] = None if traces is None or after is None else after - traces
    if rec is not None:
        out.update(rec.stop())
    return out


def _traces(model):
    fn = getattr(model, "predict_function", None)
    count = getattr(fn, "experimental_get_tracing_count", None)
    return count() if count else None


def child(name, mode, side):
    """Measures one first step in this (fresh) process; prints MARK + its JSON."""
    import numpy as np
    if side == "npu":
        import npu_device
        npu_device.set_npu_config(op_compiler_cache_mode="disable")
    import tensorflow as tf
    from benchmarks import measure, workloads
    w = workloads.WORKLOADS[name]
    dev = measure.NPU if side == "npu" else measure.CPU
    model = measure._build(w, dev)
    x, y = w.batch()
    with tf.device(dev):
        args = (tf.constant(x), tf.constant(y))
    f = tf.function(measure._step_fn(model, mode, w.from_logits, dev))  # builds the optimizer
    rec = _NpuRecorder() if side == "npu" else None
    start = time.perf_counter()
    with tf.device(dev):
        np.asarray(f(*args))
    out = {"first_s": time.perf_counter() - start}
    if rec is not None:
        out.update(rec.stop())
    warm = []
    with tf.device(dev):
        for _ in range(WARM_CALLS):
            start = time.perf_counter()
            np.asarray(f(*args))
            warm.append(time.perf_counter() - start)
    out["warm_s"] = statistics.median(warm)
    if side == "npu":
        out["tf_s"] = out["first_s"] - (out["partition_s"] + out["compile_s"] - out["ahead_s"]
                                        + out["waited_s"] + out["load_s"]
                                        + out["warm_s"])
    if mode == "infer":
        try:
            out["new_batch"] = _new_batch(model, x, dev, side)
        except Exception as e:  # noqa: BLE001  (reported; the first-step numbers stand)
            out["new_batch"] = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:300]}
    print(MARK + json.dumps(out), flush=True)


# --- the parent: fresh processes, results, markdown ----------------------------------------

def run_child(name, mode, side, timeout):
    """One child's result dict, or {"error": ...} when it failed or ran out of time."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [sys.executable, "-m", "benchmarks.first_step", "--child", name, mode, side]
    start = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [line for line in p.stdout.splitlines() if line.startswith(MARK)]
    if p.returncode != 0 or not lines:
        tail = " ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
        return {"error": f"exit {p.returncode}: {tail}"[-400:]}
    return dict(json.loads(lines[-1][len(MARK):]), process_s=time.perf_counter() - start)


def measure_all(names, modes, timeout=1200, log=None):
    """Rows {"model", "mode", "npu": child result, "cpu": child result}. The side that runs
    first alternates from row to row, so that a slow spell of a shared machine does not always
    hit the same side."""
    rows = []
    for name in names:
        for mode in modes:
            order = SIDES if len(rows) % 2 == 0 else SIDES[::-1]
            row = {"model": name, "mode": mode}
            for side in order:
                if log:
                    log(f"[first_step] {name} {mode} {side} ...")
                row[side] = run_child(name, mode, side, timeout)
            rows.append(row)
    return rows


def meets_target(row):
    """NPU first step <= CPU first step; None when either side failed."""
    npu, cpu = row["npu"], row["cpu"]
    if "error" in npu or "error" in cpu:
        return None
    return npu["first_s"] <= cpu["first_s"]


def _s(seconds):
    return f"{seconds:.2f}" if abs(seconds) >= 1 else f"{seconds:.3f}"


def _ahead(npu):
    if not npu.get("ahead"):
        return ""
    return f"; {npu['ahead']} ahead, waited {_s(npu['waited_s'])}"


def table(rows):
    head = ["| model | mode | first step NPU (s) | first step CPU (s) | CPU/NPU | warm call NPU / "
            "CPU (ms) | NPU: partition | GE compile (models) | load | TF tracing, Grappler, "
            "rest | top GE passes (ms) |", "|" + "---|" * 11]
    lines = list(head)
    for r in rows:
        npu, cpu = r["npu"], r["cpu"]
        if "error" in npu or "error" in cpu:
            what = "; ".join(f"{s}: {r[s]['error']}" for s in SIDES if "error" in r[s])
            lines.append(f"| {r['model']} | {r['mode']} | failed: {what.replace('|', '/')} |")
            continue
        top = ", ".join(f"{p} {1000 * s:.0f}" for p, s in list(npu["passes_s"].items())[:3])
        lines.append(
            f"| {r['model']} | {r['mode']} | {_s(npu['first_s'])} | {_s(cpu['first_s'])} | "
            f"{cpu['first_s'] / npu['first_s']:.2f} | {1000 * npu['warm_s']:.1f} / "
            f"{1000 * cpu['warm_s']:.1f} | {_s(npu['partition_s'])} ({npu['partitions']}) | "
            f"{_s(npu['compile_s'])} ({npu['models']}; import+serialize "
            f"{_s(npu['import_serialize_s'])}{_ahead(npu)}) | {_s(npu['load_s'])} | "
            f"{_s(npu['tf_s'])} | "
            f"{top} |")
    return "\n".join(lines)


def new_batch_table(rows):
    lines = ["| model | batch B → B-1 | NPU (s) | models compiled (eager ops), partitions | "
             "CPU (s) | traces NPU / CPU | CPU/NPU |", "|" + "---|" * 7]
    for r in rows:
        if r["mode"] != "infer":
            continue
        n, c = r["npu"].get("new_batch"), r["cpu"].get("new_batch")
        if not n or not c or "error" in n or "error" in c:
            what = "; ".join(f"{s}: {(r[s].get('new_batch') or r[s]).get('error', 'none')}"
                             for s in SIDES)
            lines.append(f"| {r['model']} | failed: {what.replace('|', '/')} |")
            continue
        lines.append(f"| {r['model']} | {n['batch'] + 1} → {n['batch']} | {n['seconds']:.3f} | "
                     f"{n['models']} ({n['eager_op_models']}), {n['partitions']} | "
                     f"{c['seconds']:.3f} | {n['traces']} / {c['traces']} | "
                     f"{c['seconds'] / n['seconds']:.2f} |")
    return "\n".join(lines)


def markdown(result):
    rows = result["rows"]
    verdicts = [(r, meets_target(r)) for r in rows]
    met = [f"{r['model']}/{r['mode']}" for r, v in verdicts if v]
    missed = [f"{r['model']}/{r['mode']}" for r, v in verdicts if v is False]
    jit = {r["npu"]["new_batch"].get("jit_compile") for r in rows
           if isinstance(r["npu"].get("new_batch"), dict) and "jit_compile" in r["npu"]["new_batch"]}
    return "\n".join([
        f"Run {result['started']} on {result['environment']['cpu']} "
        f"({result['environment']['cores']} cores), TensorFlow "
        f"{result['environment']['tensorflow']}; command: `{result['command']}`", "",
        table(rows), "",
        f"Target (issue 17) first step NPU <= TF-CPU: met {', '.join(met) or '-'}; missed "
        f"{', '.join(missed) or '-'}.", "",
        "Keras `predict` at a new batch size after warm-up"
        + (f" (NPU process: Keras jit_compile={sorted(jit)[0]})" if len(jit) == 1 else "")
        + ":", "", new_batch_table(rows), ""])


def update_doc(md, path=None):
    from benchmarks import run
    run.update_doc(md, path or run.DOC, begin=DOC_BEGIN, end=DOC_END)


def parse_args(argv):
    from benchmarks import workloads
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=None,
                   help=f"comma-separated subset of {','.join(workloads.WORKLOADS)} (default "
                        f"all)")
    p.add_argument("--modes", default="train,infer", help="train, infer or both (default)")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per process (1200)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "first_step"),
                   help="output path without extension (.json and .md are written)")
    p.add_argument("--update-doc", action="store_true",
                   help="replace the first-step section of docs/benchmarks.md")
    p.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "SIDE"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    names = a.models.split(",") if a.models else list(workloads.FIRST_STEP)
    a.names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in a.names if n not in workloads.WORKLOADS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from "
                f"{', '.join(workloads.WORKLOADS)}")
    a.mode_list = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.mode_list or any(m not in ("train", "infer") for m in a.mode_list):
        p.error(f"--modes {a.modes!r}: choose from train, infer")
    if a.child and (a.child[1] not in ("train", "infer") or a.child[2] not in SIDES):
        p.error(f"--child {' '.join(a.child)}: MODE is train or infer, SIDE npu or cpu")
    return a


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a.child:
        child(*a.child)
        return 0
    from benchmarks import run
    result = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m benchmarks.first_step " + " ".join(argv),
              "environment": run.environment(), "rows": []}
    result["rows"] = measure_all(a.names, a.mode_list, a.timeout,
                                 log=lambda m: print(m, file=sys.stderr, flush=True))
    md = markdown(result)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    if a.update_doc:
        update_doc(md)
    print(md)
    return 1 if any("error" in r[s] for r in result["rows"] for s in SIDES) else 0


if __name__ == "__main__":
    sys.exit(main())
