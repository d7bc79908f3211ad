"""Measures one workload in one mode ("train" or "infer") on the NPU and on TF's CPU.

What each number is (docs/benchmarks.md has the long form):
  * GE numbers come from the compile reports (graph_engine.compiler.compile.recent_compiles())
    of the NPU clusters compiled for the step, summed over clusters: nodes before = the cluster
    graph as imported (pass log entry of infer_shapes, which adds or removes nothing), nodes
    after = the graph the last optimization pass leaves (the log entry before `lower`),
    kernels and TransData from the compiled kernel lists, arena_bytes / live_bytes_lower_bound
    from the memory plan.
  * cold compile = GE compile seconds of the step's first compile in this process; warm
    compile = the same graphs compiled again by a fresh tf.function (what a recompile costs
    once the compiler is warm).
  * kernels per step = the executor's kernels_executed counter over one warm step, plus the TF
    ops the NPU step still runs outside NPU clusters (variable reads/updates, ...); TF ops on CPU
    = the nodes of the step's post-Grappler partition graphs (TF's RunMetadata of the step's
    first call), both without _Arg/_Retval/NoOp plumbing.
  * step time = median wall time of N warm steps (output fetched to the host each step), on each
    device, after the same warm-up on each (WARMUP_STEPS steps and at least WARMUP_SECONDS:
    on a 2-vCPU VM, the first ~20 steps of a small model ran up to 2x slower, as if on one
    core, on both devices), NPU and CPU timed in alternating rounds (ROUNDS); ratio = CPU
    time / NPU time (> 1: the simulated NPU is faster).
  * XLA = the same step as tf.function(jit_compile=True) on TF's CPU (a third model built from
    the same initial weights, the same inputs): a stronger CPU reference; xla_over_npu = XLA time
    / NPU time (> 1: the NPU is faster than XLA too). Its first call (XLA's compile) is kept as
    xla_first_call_seconds. A step XLA cannot compile is reported as xla_error.
"""
import collections
import statistics
import time

import numpy as np

from graph_engine.compiler.cluster_op import CLUSTER_OPS

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
WARMUP_STEPS, WARMUP_SECONDS, ROUNDS = 20, 0.5, 5
# Untimed steps at the start of each round, at least this many and this long: the other
# device's round leaves its threads behind. Measured on the 2-vCPU VM (mlp inference, medians
# over rounds): the NPU's first steps after a CPU round took 475, 426, 394 us, then 375 (TF's
# pool threads still held the cores); the CPU's first after an NPU round 443, 402, 393, then
# 465 (the NPU pool's polling workers had kept the idle vCPUs awake, which TF alone does not).
SETTLE_STEPS, SETTLE_SECONDS = 3, 0.05
PLUMBING = {"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "NoOp"}
MODES = ("train", "infer")


def _build(workload, dev, weights=None):
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(0)
    with tf.device(dev):
        model = workload.build()
    if weights is not None:
        model.set_weights(weights)
    return model


def _twins(workload):
    """The model built on each device from the same weights, and those initial weights."""
    models = {CPU: _build(workload, CPU)}
    weights = models[CPU].get_weights()
    models[NPU] = _build(workload, NPU, weights)
    return models, weights


def _step_fn(model, mode, from_logits, dev):
    """A Python step function: one Adam training step returning the loss, or a forward pass."""
    import keras
    import tensorflow as tf
    if mode == "infer":
        return lambda x, y: model(x, training=False)
    with tf.device(dev):
        opt = keras.optimizers.Adam(1e-3)
        opt.build(model.trainable_variables)

    def train(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                y, model(x, training=True), from_logits=from_logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train


def _first_call(fn, args, dev, record_graphs, jit_compile=False):
    """Calls a fresh tf.function of fn once on `dev`; returns (the function, wall seconds, the
    compile reports of the clusters it compiled, executed-op counts of its partition graphs)."""
    import tensorflow as tf
    from graph_engine.compiler import compile as ge
    from tensorflow.python.eager import context
    f = tf.function(fn, jit_compile=jit_compile)
    ge.clear_recent()
    ctx = context.context()
    if record_graphs:
        ctx.enable_run_metadata()
        ctx.export_run_metadata()                 # drop what earlier calls left
    try:
        start = time.perf_counter()
        with tf.device(dev):
            np.asarray(f(*args))
        seconds = time.perf_counter() - start
        ops = collections.Counter()
        if record_graphs:
            for fg in ctx.export_run_metadata().function_graphs:
                for pg in fg.partition_graphs:
                    ops.update(n.op for n in pg.node if n.op not in PLUMBING)
    finally:
        if record_graphs:
            ctx.disable_run_metadata()
    reports = [r for r in ge.recent_compiles() if r.get("source") == "cluster"]
    return f, seconds, reports, ops


def _warm_up(f, args, dev):
    import tensorflow as tf
    with tf.device(dev):
        start, done = time.perf_counter(), 0
        while done < WARMUP_STEPS or time.perf_counter() - start < WARMUP_SECONDS:
            np.asarray(f(*args))
            done += 1


def _median_steps(runs, steps, rounds=ROUNDS):
    """Median step seconds of each (f, args, dev) in `runs`, each warmed up, then timed in
    `rounds` alternating rounds of about steps/rounds steps: a machine whose speed drifts
    (another process, CPU frequency) shifts every device alike instead of the one timed then.
    Each round first settles (SETTLE_STEPS untimed steps and SETTLE_SECONDS), so that it times
    its device's steady state, not the other device's leftovers."""
    import tensorflow as tf
    for f, args, dev in runs:
        _warm_up(f, args, dev)
    times = [[] for _ in runs]
    per_round = max(1, -(-steps // rounds))
    for _ in range(rounds):
        for (f, args, dev), out in zip(runs, times):
            with tf.device(dev):
                start, settled = time.perf_counter(), 0
                while settled < SETTLE_STEPS or time.perf_counter() - start < SETTLE_SECONDS:
                    np.asarray(f(*args))
                    settled += 1
                for _ in range(per_round):
                    start = time.perf_counter()
                    np.asarray(f(*args))
                    out.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def _nodes_after(log):
    names = [p["pass"] for p in log]
    i = names.index("lower") - 1 if "lower" in names else len(log) - 1
    return log[i]["nodes"]


def graph_stats(reports):
    """GE numbers summed over the step's compiled clusters."""
    kernels = collections.Counter(k for r in reports for k in r["kernels"])
    arena = sum(r["arena_bytes"] for r in reports)
    bound = sum(r["live_bytes_lower_bound"] for r in reports)
    worst = max((r["arena_bytes"] / r["live_bytes_lower_bound"] for r in reports
                 if r["live_bytes_lower_bound"]), default=None)
    return {
        "graphs": len(reports),
        "nodes_before": sum(r["passes"][0]["nodes"] for r in reports),
        "nodes_after": sum(_nodes_after(r["passes"]) for r in reports),
        "kernels": sum(kernels.values()),
        # activation conversions: weight conversions run per step or once (cached) are apart
        "transdata": kernels.get("TransData", 0) - sum(r.get("weight_transdata", 0)
                                                      + r.get("cached_weight_transdata", 0)
                                                      for r in reports),
        "weight_transdata": sum(r.get("weight_transdata", 0) for r in reports),
        "bias_add_kernels": kernels.get("BiasAdd", 0),
        "arena_bytes": arena,
        "lower_bound_bytes": bound,
        "no_reuse_bytes": sum(r.get("no_reuse_bytes", 0) for r in reports),
        "peak_over_bound": arena / bound if bound else None,
        "worst_graph_peak_over_bound": worst,
        "compile_seconds_cold": sum(r["compile_seconds"] for r in reports),
        "top_kernels": dict(kernels.most_common(12)),
    }


def _measure_xla(workload, mode, weights, args, steps, row):
    """The XLA reference (see the module doc) into `row`."""
    model = _build(workload, CPU, weights)
    fn = _step_fn(model, mode, workload.from_logits, CPU)
    try:
        f, first_s, _, _ = _first_call(fn, args, CPU, record_graphs=False, jit_compile=True)
    except Exception as e:  # noqa: BLE001  (a step XLA cannot compile: reported, row kept)
        row["xla_error"] = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return
    row["xla_first_call_seconds"] = first_s
    row["xla_step_seconds"], = _median_steps([(f, args, CPU)], steps)
    row["xla_over_npu"] = row["xla_step_seconds"] / row["npu_step_seconds"]


def measure(workload, mode, steps, xla=True):
    """One result row (a dict) for `workload` in `mode`; `xla`: also the XLA reference."""
    import npu_device
    import tensorflow as tf
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: choose from {', '.join(MODES)}")
    models, weights = _twins(workload)
    x, y = workload.batch()
    row = {"model": workload.name, "mode": mode, "batch": int(x.shape[0]),
           "input_shape": list(x.shape[1:]), "steps_timed": steps}
    args = {}
    for dev in (CPU, NPU):
        with tf.device(dev):
            args[dev] = (tf.constant(x), tf.constant(y))
    fns = {dev: _step_fn(models[dev], mode, workload.from_logits, dev) for dev in (CPU, NPU)}

    # NPU: cold compile, then a fresh function (warm compile) that the timed steps use
    _, first_s, cold, _ = _first_call(fns[NPU], args[NPU], NPU, record_graphs=False)
    if not cold:
        raise RuntimeError(f"{workload.name} {mode}: no NPU cluster was compiled for the step")
    f_npu, _, warm, npu_ops = _first_call(fns[NPU], args[NPU], NPU, record_graphs=True)
    row.update(graph_stats(cold))
    row["compile_seconds_warm"] = sum(r["compile_seconds"] for r in warm)
    row["first_call_seconds"] = first_s
    with tf.device(NPU):
        np.asarray(f_npu(*args[NPU]))
        before = npu_device.counters()
        np.asarray(f_npu(*args[NPU]))
        after = npu_device.counters()
    row["npu_kernels_per_step"] = after["kernels_executed"] - before["kernels_executed"]
    row["npu_models_per_step"] = after["models_run"] - before["models_run"]
    row["npu_tf_ops_outside_clusters"] = sum(c for op, c in npu_ops.items() if op not in CLUSTER_OPS)
    row["npu_launches_per_step"] = row["npu_kernels_per_step"] + row["npu_tf_ops_outside_clusters"]
    f_cpu, _, _, cpu_ops = _first_call(fns[CPU], args[CPU], CPU, record_graphs=True)
    row["cpu_tf_ops_per_step"] = sum(cpu_ops.values())
    row["npu_step_seconds"], row["cpu_step_seconds"] = _median_steps(
        [(f_npu, args[NPU], NPU), (f_cpu, args[CPU], CPU)], steps)
    row["launches_over_cpu_ops"] = row["npu_launches_per_step"] / max(1, row["cpu_tf_ops_per_step"])
    row["speed_ratio"] = row["cpu_step_seconds"] / row["npu_step_seconds"]
    if xla:
        _measure_xla(workload, mode, weights, args[CPU], steps, row)
    return row
