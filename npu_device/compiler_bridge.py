"""Connects the TF plugin to the graph-engine compiler, and remembers what it compiled.

The plugin (tf_plugin_cc/compile_bridge.cc) calls the native hook from TensorFlow's threads;
npu_device._C turns the call into `_compile(kind, request_bytes)` here, with the GIL held, and
any exception into an error message for TensorFlow. Importing this module registers the hook;
the plugin imports it by itself when a program never imported npu_device.

Every compile is also an event: `log_compile_summary` (or NPU_LOG_COMPILE_SUMMARY) logs one
line per event, and npu_device.explain() records the events of one call.
"""
import atexit
import collections
import dataclasses
import json
import hashlib
import logging
import os
import threading
import time

from npu_device import _C

PARTITION, COMPILE_MODEL = 0, 1        # npurtCompileKind (npurt/compiler_hook.h)
_log = logging.getLogger("npu_device")


@dataclasses.dataclass
class PartitionEvent:
    report: object                     # graph_engine.compiler.reports.PartitionReport
    clusters: dict                     # NpuGraphOp node name -> cluster key (see cluster_key)
    seconds: float

    def summary(self):
        r = self.report
        counts = collections.Counter(n.placement for n in r.nodes)
        off = collections.Counter(f"{n.op} ({n.reason})" for n in r.fallbacks()
                                  if n.placement != "npu" and n.reason)
        text = (f"graph {r.graph_id}: {len(r.nodes)} nodes, {len(r.clusters)} new NPU "
                f"cluster(s); " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if off:
            text += "; off-cluster: " + ", ".join(f"{k} x{v}" for k, v in off.most_common(5))
        return f"{text}; {self.seconds * 1e3:.1f} ms"


@dataclasses.dataclass
class ModelEvent:
    node: str                          # the NpuGraphOp or eager op node
    op: str
    input_shapes: list
    kernels: list                      # kernel names, in execution order
    arena_bytes: int
    key: str                           # cluster key for NpuGraphOp, else None
    seconds: float
    metadata: dict = dataclasses.field(default_factory=dict)   # the compiler's model metadata

    @property
    def passes(self):
        """Per pass: name, nodes after it, milliseconds and its statistics."""
        return self.metadata.get("passes", [])

    def memory(self):
        """Planned working memory: arena (peak), lower bound and total without reuse, bytes."""
        m = self.metadata
        return {"arena_bytes": self.arena_bytes,
                "lower_bound_bytes": m.get("live_bytes_lower_bound"),
                "no_reuse_bytes": m.get("no_reuse_bytes")}

    def summary(self):
        what = "cluster" if self.op == "NpuGraphOp" else f"op {self.op}"
        mem = self.memory()
        bound = (f" (lower bound {mem['lower_bound_bytes']}, without reuse "
                 f"{mem['no_reuse_bytes']})" if mem["lower_bound_bytes"] is not None else "")
        transdata = self.kernels.count("TransData")
        return (f"compiled {what} {self.node!r} for inputs {self.input_shapes}: "
                f"{len(self.kernels)} kernel(s)"
                + (f", {transdata} TransData" if transdata else "")
                + f", arena {self.arena_bytes} bytes{bound}; {self.seconds * 1e3:.1f} ms")


@dataclasses.dataclass
class FailureEvent:
    kind: int
    message: str

    def summary(self):
        what = "partitioning a graph" if self.kind == PARTITION else "compiling a model"
        return f"{what} failed: {self.message}"


_lock = threading.Lock()
_recorders = []                        # lists that explain() is filling
_models_by_cluster = {}                # cluster key -> [ModelEvent]: the plugin caches models,
                                       # so explain finds a cluster's model here, not in a compile


def cluster_key(cluster_bytes, options_bytes):
    return hashlib.sha256(bytes(cluster_bytes) + b"\0" + bytes(options_bytes)).hexdigest()


def models_for(key):
    with _lock:
        return list(_models_by_cluster.get(key, ()))


def start_recording():
    events = []
    with _lock:
        _recorders.append(events)
    return events


def stop_recording(events):
    with _lock:
        _recorders.remove(events)


def _log_summaries():
    try:
        from npu_device.configuration import current
        return bool(current().log_compile_summary)
    except (ImportError, AttributeError):
        return os.environ.get("NPU_LOG_COMPILE_SUMMARY", "").lower() in ("1", "true")


def _partition(request):
    from graph_engine.compiler.graphdef import export_graph_def, import_graph_def
    from graph_engine.compiler.partition import partition
    from tensorflow.core.framework import graph_pb2
    start = time.perf_counter()
    g = import_graph_def(request)
    changed, report = partition(g)
    out = export_graph_def(g).SerializeToString() if changed else bytes(request)
    clusters = {}
    if changed:
        gd = graph_pb2.GraphDef.FromString(out)
        clusters = {n.name: cluster_key(n.attr["cluster"].s, n.attr["options"].s)
                    for n in gd.node if n.op == "NpuGraphOp"}
    return out, PartitionEvent(report, clusters, time.perf_counter() - start)


def _compile_model(request):
    from graph_engine.compiler import model_format
    from graph_engine.compiler.api import compile_model
    from tensorflow.core.framework import node_def_pb2
    start = time.perf_counter()
    out = compile_model(request)
    seconds = time.perf_counter() - start
    nd = node_def_pb2.NodeDef.FromString(bytes(request))
    model = model_format.deserialize(out)
    shapes = [[d.size for d in s.dim] for s in nd.attr["_input_shapes"].list.shape]
    key = cluster_key(nd.attr["cluster"].s, nd.attr["options"].s) if nd.op == "NpuGraphOp" else None
    event = ModelEvent(nd.name, nd.op, shapes, [k.kernel for k in model.kernels],
                       model.arena_bytes, key, seconds, json.loads(model.metadata or "{}"))
    if key is not None:
        with _lock:
            _models_by_cluster.setdefault(key, []).append(event)
    return out, event


def _compile(kind, request):
    """The hook: kind 0 partitions a GraphDef, kind 1 compiles a NodeDef into a model."""
    out, failure = None, None
    try:
        if kind == PARTITION:
            out, event = _partition(request)
        elif kind == COMPILE_MODEL:
            out, event = _compile_model(request)
        else:
            raise ValueError(f"unknown compile kind {kind}; expected {PARTITION} (partition a "
                             f"GraphDef) or {COMPILE_MODEL} (compile a NodeDef)")
    except Exception as e:  # recorded for explain, then reported to TF by the native bridge
        failure = e
        event = FailureEvent(kind, f"{type(e).__name__}: {e}")
    with _lock:
        for events in _recorders:
            events.append(event)
    if _log_summaries():
        # Asked for explicitly: shown at whatever level the npu_device logger is set to.
        _log.log(max(logging.INFO, _log.getEffectiveLevel()), "npu_device: %s", event.summary())
    if failure is not None:
        raise failure
    return out


def options_changed():
    """Tells the loaded TF plugin that compile options changed, so eager ops compile again
    instead of reusing models built with the old options (clusters carry their own options).
    Returns False when no plugin is loaded in this process."""
    import ctypes
    from npu_device import _loader
    for path in _loader.plugin_candidates():
        try:  # RTLD_NOLOAD: only a copy that TensorFlow already loaded
            plugin = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        plugin.NpuPluginOptionsChanged()
        return True
    return False


def register():
    """Makes the TF plugin compile through this module (idempotent)."""
    _C.set_compiler(_compile)


register()
# Compiles that TF threads start during interpreter shutdown get a clear error instead.
atexit.register(_C.set_compiler, None)
