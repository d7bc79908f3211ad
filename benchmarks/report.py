"""Markdown for benchmark results, with the issues' targets next to the measured values."""
import math

# (what, target text, check(row) -> bool or None when it does not apply)
TARGETS = [
    ("planned peak / lower bound", "<= 1.05 on every model",
     lambda r: None if r["worst_graph_peak_over_bound"] is None
     else r["worst_graph_peak_over_bound"] <= 1.05),
    ("TransData of activations in a pure-CNN inference graph", "<= 2",
     lambda r: r["transdata"] <= 2 if r["mode"] == "infer" and r["model"] != "bert"
     and r["model"] != "mlp" else None),
    ("standalone BiasAdd kernels (a contraction's bias belongs in its epilogue)", "0",
     lambda r: r["bias_add_kernels"] == 0),
    ("kernels per training step / TF ops on CPU", "<= 0.5",
     lambda r: r["launches_over_cpu_ops"] <= 0.5 if r["mode"] == "train" else None),
    ("GE compile of the ResNet50 training graph", "<= 2 s",
     lambda r: r["compile_seconds_cold"] <= 2 if (r["model"], r["mode"]) == ("resnet50", "train")
     else None),
    ("NPU speed vs TF on CPU (CPU time / NPU time)", ">= 0.5 on every model (aim: 1)",
     lambda r: r["speed_ratio"] >= 0.5),
]

COLUMNS = [
    ("model", lambda r: r["model"]), ("mode", lambda r: r["mode"]),
    ("batch", lambda r: r["batch"]),
    ("GE nodes before→after", lambda r: f"{r['nodes_before']}→{r['nodes_after']}"),
    ("kernels compiled", lambda r: r["kernels"]),
    ("NPU launches/step (kernels+TF ops)",
     lambda r: f"{r['npu_launches_per_step']} ({r['npu_kernels_per_step']}+"
               f"{r['npu_tf_ops_outside_clusters']})"),
    ("TF ops/step on CPU", lambda r: r["cpu_tf_ops_per_step"]),
    ("launches / TF ops", lambda r: f"{r['launches_over_cpu_ops']:.2f}"),
    ("TransData (+ weights)", lambda r: f"{r['transdata']} (+{r['weight_transdata']})"),
    ("peak / lower bound (MiB)", lambda r: f"{r['arena_bytes'] / 2**20:.1f} / "
                                           f"{r['lower_bound_bytes'] / 2**20:.1f}"
                                           + (f" ({r['worst_graph_peak_over_bound']:.2f}x worst)"
                                              if r["worst_graph_peak_over_bound"] else "")),
    ("compile cold / warm (s)",
     lambda r: f"{r['compile_seconds_cold']:.2f} / {r['compile_seconds_warm']:.2f}"),
    ("step NPU / CPU / XLA (ms)",
     lambda r: f"{1000 * r['npu_step_seconds']:.1f} / {1000 * r['cpu_step_seconds']:.1f} / "
               + (f"{1000 * r['xla_step_seconds']:.1f}" if "xla_step_seconds" in r
                  else "failed" if "xla_error" in r else "-")),
    ("CPU/NPU ratio", lambda r: f"{r['speed_ratio']:.2f}"),
    ("XLA/NPU ratio", lambda r: f"{r['xla_over_npu']:.2f}" if "xla_over_npu" in r else "-"),
]


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def geomeans(rows):
    """Geometric means (None without rows): CPU/NPU over every measured row, XLA/NPU and CPU/XLA
    over the rows XLA measured; `rows` and `xla_rows` say how many."""
    ok = [r for r in rows if "error" not in r]
    xla = [r for r in ok if "xla_over_npu" in r]
    return {"rows": len(ok), "xla_rows": len(xla),
            "cpu_over_npu": geomean(r["speed_ratio"] for r in ok),
            "xla_over_npu": geomean(r["xla_over_npu"] for r in xla),
            "cpu_over_xla": geomean(r["cpu_step_seconds"] / r["xla_step_seconds"] for r in xla)}


def _aggregate(ok, text):
    return (text, "-") if ok else ("-", text)


def targets17(result):
    """Issue 17's targets: per row (met/missed lists) or over all rows (the value)."""
    rows = [r for r in result["rows"] if "error" not in r]
    g = geomeans(result["rows"])
    lines = ["| target | goal | met | missed |", "|---|---|---|---|"]

    def per_row(what, goal, check, items=rows, name=lambda r: f"{r['model']}/{r['mode']}"):
        met, missed = [], []
        for r in items:
            verdict = check(r)
            if verdict is not None:
                (met if verdict else missed).append(name(r))
        lines.append(f"| {what} | {goal} | {', '.join(met) or '-'} | {', '.join(missed) or '-'} |")

    def overall(what, goal, value, ok):
        met, missed = _aggregate(ok, value) if value is not None else ("-", "not measured")
        lines.append(f"| {what} | {goal} | {met} | {missed} |")

    per_row("NPU speed vs TF on CPU (CPU time / NPU time)", ">= 1.0 on every model and mode",
            lambda r: r["speed_ratio"] >= 1.0)
    cpu_g, xla_g, cx_g = g["cpu_over_npu"], g["xla_over_npu"], g["cpu_over_xla"]
    overall("geometric mean of CPU/NPU over all rows", ">= 1.3",
            None if cpu_g is None else f"{cpu_g:.2f} ({g['rows']} rows)",
            cpu_g is not None and cpu_g >= 1.3)
    overall("geometric mean of CPU/NPU vs XLA's (CPU/XLA)",
            ">= XLA's, i.e. geometric mean of XLA/NPU >= 1",
            None if xla_g is None else f"CPU/NPU {cpu_g:.2f} vs CPU/XLA {cx_g:.2f} "
                                       f"(XLA/NPU {xla_g:.2f}, {g['xla_rows']} rows)",
            xla_g is not None and xla_g >= 1.0)
    first = result.get("first_step")
    if first is None:
        lines.append("| first step NPU vs TF-CPU (fresh processes) | NPU <= CPU on every model "
                     "| - | not measured in this run (--first-step; benchmarks/first_step.py) |")
    else:
        from benchmarks.first_step import meets_target
        per_row("first step NPU vs TF-CPU (fresh processes)", "NPU <= CPU on every model",
                meets_target, items=first)
    per_row("per-step weight TransData (the \"(+N)\" of TransData)", "0",
            lambda r: r["weight_transdata"] == 0)
    per_row("GE compile of the ResNet50 training graph (cold)", "<= 2 s",
            lambda r: r["compile_seconds_cold"] <= 2
            if (r["model"], r["mode"]) == ("resnet50", "train") else None)
    gemm = result.get("gemm")
    if gemm is None:
        lines.append("| GEMM vs measured peak FP32 | >= 70% | - | not measured in this run |")
    else:
        per_row("GEMM vs measured peak FP32 (benchmarks/gemm_bench.py shapes)", ">= 70%",
                lambda r: r["npu_pct_of_peak"] >= 70, items=gemm,
                name=lambda r: f"{r['m']}x{r['n']}x{r['k']} {r['npu_pct_of_peak']:.0f}%")
    return "\n".join(lines)


def table(rows):
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['mode']} | failed: {r['error']} |")
            continue
        lines.append("| " + " | ".join(str(fn(r)) for _, fn in COLUMNS) + " |")
    return "\n".join(lines)


def targets(rows):
    ok_rows = [r for r in rows if "error" not in r]
    lines = ["| target | goal | met | missed |", "|---|---|---|---|"]
    for what, goal, check in TARGETS:
        met, missed = [], []
        for r in ok_rows:
            verdict = check(r)
            if verdict is not None:
                (met if verdict else missed).append(f"{r['model']}/{r['mode']}")
        lines.append(f"| {what} | {goal} | {', '.join(met) or '-'} | {', '.join(missed) or '-'} |")
    return "\n".join(lines)


def markdown(result):
    env = result["environment"]
    g = geomeans(result["rows"])
    means = []
    if g["cpu_over_npu"] is not None:
        means.append(f"CPU/NPU {g['cpu_over_npu']:.2f} over {g['rows']} rows")
    if g["xla_over_npu"] is not None:
        means.append(f"XLA/NPU {g['xla_over_npu']:.2f} and CPU/XLA {g['cpu_over_xla']:.2f} over "
                     f"{g['xla_rows']} rows")
    lines = [
        f"Run {result['started']} on {env['cpu']} ({env['cores']} cores), TensorFlow "
        f"{env['tensorflow']}, NPU threads {env['npu_threads']}; command: `{result['command']}`",
        "", table(result["rows"]), ""]
    if means:
        lines += ["Geometric means: " + "; ".join(means) + ".", ""]
    failed_xla = [f"{r['model']}/{r['mode']}: {r['xla_error']}" for r in result["rows"]
                  if "xla_error" in r]
    if failed_xla:
        lines += ["XLA could not compile: " + "; ".join(failed_xla).replace("|", "/"), ""]
    if result.get("peak"):
        from benchmarks import roofline
        lines += [roofline.line(result["peak"], result.get("gemm")) + ".", ""]
    return "\n".join(lines + [
        "Targets (issue 17):", "", targets17(result), "",
        "Targets (issue 5):", "", targets(result["rows"]), ""])
