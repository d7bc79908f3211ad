"""Markdown for benchmark results, with the issue's targets next to the measured values."""

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
    ("step NPU / CPU (ms)",
     lambda r: f"{1000 * r['npu_step_seconds']:.1f} / {1000 * r['cpu_step_seconds']:.1f}"),
    ("CPU/NPU ratio", lambda r: f"{r['speed_ratio']:.2f}"),
]


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
    return "\n".join([
        f"Run {result['started']} on {env['cpu']} ({env['cores']} cores), TensorFlow "
        f"{env['tensorflow']}, NPU threads {env['npu_threads']}; command: `{result['command']}`",
        "", table(result["rows"]), "", "Targets (issue 5):", "", targets(result["rows"]), ""])
