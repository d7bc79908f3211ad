"""npu_device.explain(fn, *args): which ops of a function run on the NPU, which on CPU, and why.

    report = npu_device.explain(train_step, x, y)
    print(report)                  # one table per graph compiled for the call
    report.ops_on("cpu")           # {"StringFormat": 1, ...}
    report.fallbacks()             # NodeReports of every op that is not in an NPU cluster

`fn` runs once, as a fresh tf.function (a tf.function's Python function is traced anew), so
TensorFlow optimizes its graphs during the call and the graph engine partitions them now. The
report holds what was compiled during the call: partitioned graphs (node by node: the NPU
cluster it joined, or where it stayed and the partitioner's reason) and, per cluster, the
compiled model's kernel list. Compiles that other threads run at the same time are included.
"""
import collections
import dataclasses
import functools

from graph_engine.compiler.cluster_op import CLUSTER_OPS
from npu_device import compiler_bridge

PLACEMENT_TEXT = {"npu": "NPU", "npu_unclustered": "NPU (op by op)", "cpu": "CPU"}


@dataclasses.dataclass
class GraphExplanation:
    report: object                     # graph_engine.compiler.reports.PartitionReport
    models: dict                       # cluster name -> [compiler_bridge.ModelEvent]
    cpu_fallbacks: dict = dataclasses.field(default_factory=dict)  # name -> [FailureEvent]

    def summary(self):
        r = self.report
        counts = collections.Counter(n.placement for n in r.nodes)
        return (f"graph {r.graph_id}: {len(r.nodes)} nodes, {len(r.clusters)} NPU cluster(s); "
                + ", ".join(f"{PLACEMENT_TEXT.get(p, p.upper())}: {c}"
                            for p, c in sorted(counts.items())))

    def table(self):
        r = self.report
        lines = [self.summary()]
        for name, members in r.clusters.items():
            lines.append(f"  cluster {name}: {len(members)} ops")
            for m in self.models.get(name, ()):
                mem = m.memory()
                lines.append(f"    model for inputs {m.input_shapes}: {len(m.kernels)} kernels; "
                             f"memory {mem['arena_bytes']} bytes planned, lower bound "
                             f"{mem['lower_bound_bytes']}, {mem['no_reuse_bytes']} without reuse")
                lines.append("      kernels: " + ", ".join(m.kernels))
            for f in self.cpu_fallbacks.get(name, ()):
                lines.append(f"    runs on CPU (cannot compile): {f.message}")
        rows = [(n.node, n.op, PLACEMENT_TEXT.get(n.placement, n.placement.upper())
                 + (f" [{n.cluster}]" if n.cluster and n.placement == "npu" else ""),
                 _why(n)) for n in r.nodes]
        header = ("node", "op", "runs on", "why")
        widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(3)]
        for row in [header] + rows:
            cells = [str(c).ljust(w) for c, w in zip(row[:3], widths)] + [row[3]]
            lines.append("  " + "  ".join(cells).rstrip())
        return "\n".join(lines)


class Explanation:
    """What the graph engine did for one call (see the module docstring)."""

    def __init__(self, events, outputs):
        self.outputs = outputs
        self.graphs = []
        self.op_models = [e for e in events
                          if isinstance(e, compiler_bridge.ModelEvent) and e.key is None]
        self.failures = [e for e in events if isinstance(e, compiler_bridge.FailureEvent)]
        seen = set()
        for e in events:
            if not isinstance(e, compiler_bridge.PartitionEvent) or _revisit(e.report, seen):
                continue
            models = {name: compiler_bridge.models_for(key) for name, key in e.clusters.items()}
            cpu = {name: compiler_bridge.fallbacks_for(key) for name, key in e.clusters.items()}
            self.graphs.append(GraphExplanation(e.report, models, cpu))

    def nodes(self):
        return [n for g in self.graphs for n in g.report.nodes]

    def ops_on(self, placement):
        """Op type -> count of nodes with that placement ("npu", "npu_unclustered", "cpu")."""
        return dict(collections.Counter(n.op for n in self.nodes() if n.placement == placement))

    def fallbacks(self):
        """Nodes outside NPU clusters, each with the partitioner's reason."""
        return [n for g in self.graphs for n in g.report.fallbacks()]

    def summary(self):
        """One line per graph: how many nodes went where."""
        return "\n".join(g.summary() for g in self.graphs)

    def __str__(self):
        parts = [f"npu_device.explain: {len(self.graphs)} graph(s) partitioned for this call"]
        parts += [g.table() for g in self.graphs]
        if self.op_models:
            parts.append("ops compiled one by one: " + ", ".join(
                f"{m.op} {m.input_shapes}" for m in self.op_models))
        parts += [f"FAILED: {f.summary()}" + (" (TensorFlow ran the graph unpartitioned)"
                                               if f.kind == compiler_bridge.PARTITION else "")
                  for f in self.failures if not f.fell_back]
        parts += [f"CPU FALLBACK: {f.summary()}" for f in self.failures if f.fell_back]
        return "\n".join(parts)

    __repr__ = __str__


def _why(node):
    """The partitioner's reason; for an op the plugin runs with its own NPU kernel (variable
    updates, ops whose output shape depends on values) the graph engine has no class, which
    is not a fallback."""
    if node.placement == "npu_unclustered" and node.op in _plugin_kernels():
        return "runs as its own NPU kernel (not a graph-engine op: no clusters)"
    return node.reason or ""


@functools.lru_cache(maxsize=1)
def _plugin_kernels():
    from tensorflow.python.framework import kernels
    from graph_engine import ops
    return frozenset(k.op for k in kernels.get_all_registered_kernels().kernel
                     if k.device_type == "NPU" and ops.get(k.op) is None)


def _revisit(report, seen):
    """True for Grappler's second pass over a graph: it only finds the clusters of the first
    (and for a graph without clusters, the same nodes again)."""
    names = frozenset((n.node, n.op, n.placement) for n in report.nodes)
    again = names in seen or (not report.clusters and any(n.op in CLUSTER_OPS
                                                           for n in report.nodes))
    seen.add(names)
    return again


def explain(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) once as a fresh tf.function; returns an Explanation (print it
    for the tables). The outputs of the call are in `.outputs`."""
    import tensorflow as tf
    python_fn = getattr(fn, "python_function", fn)  # a tf.function: retrace its Python function
    if not callable(python_fn):
        raise TypeError(f"explain() needs a function or tf.function, got {type(fn).__name__}")
    fresh = tf.function(python_fn, input_signature=getattr(fn, "input_signature", None))
    events = compiler_bridge.start_recording()
    try:
        outputs = fresh(*args, **kwargs)
    finally:
        compiler_bridge.stop_recording(events)
    return Explanation(events, outputs)
