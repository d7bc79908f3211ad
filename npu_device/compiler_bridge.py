"""Connects the TF plugin to the graph-engine compiler, and remembers what it compiled.

The plugin (tf_plugin_cc/python_compiler.cc) calls the native hook from TensorFlow's threads;
npu_device._C turns the call into `_compile(kind, request_bytes)` here, with the GIL held, and
any exception into an error message for TensorFlow. Importing this module registers the hook;
the plugin imports it by itself when a program never imported npu_device.

Each call goes straight to graph_engine.compiler.api (partition_graph_with_report,
compile_model_with_report) with the compile options of the configuration of the moment; a
cluster is known by the `cluster_key` attr the partitioner wrote into its NpuGraphOp.

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

from graph_engine.compiler.cluster_op import CLUSTER_OPS
from graph_engine.ops import errors
from npu_device import _C, compile_ahead, configuration, observability

PARTITION, COMPILE_MODEL = 0, 1        # npurtCompileKind (npurt/compiler_hook.h)
_log = logging.getLogger("npu_device")


@dataclasses.dataclass
class PartitionEvent:
    report: object                     # graph_engine.compiler.reports.PartitionReport
    clusters: dict                     # NpuGraphOp node name -> its attr cluster_key
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
    key: str                           # NpuGraphOp: its attr cluster_key; eager op: None
    seconds: float
    metadata: dict = dataclasses.field(default_factory=dict)   # the compiler's model metadata
    from_disk: bool = False            # loaded from the disk compile cache, not compiled
    waited: float = None               # compiled ahead (compile_ahead.py): seconds the request
                                       # waited for it; None: compiled on request

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
        what = "cluster" if self.op in CLUSTER_OPS else f"op {self.op}"
        mem = self.memory()
        bound = (f" (lower bound {mem['lower_bound_bytes']}, without reuse "
                 f"{mem['no_reuse_bytes']})" if mem["lower_bound_bytes"] is not None else "")
        transdata = self.kernels.count("TransData")
        how = (f"loaded {what} {self.node!r} from the disk compile cache" if self.from_disk
               else f"compiled {what} {self.node!r}")
        return (f"{how} for inputs {self.input_shapes}: "
                f"{len(self.kernels)} kernel(s)"
                + (f", {transdata} TransData" if transdata else "")
                + f", arena {self.arena_bytes} bytes{bound}; {self.seconds * 1e3:.1f} ms"
                + ("" if self.waited is None else
                   f" ahead of its first run, which waited {self.waited * 1e3:.1f} ms"))


@dataclasses.dataclass
class FailureEvent:
    kind: int
    message: str
    node: str = None                   # the NpuGraphOp or eager op node
    fell_back: bool = False            # it ran on CPU instead (not the program's invalid input)

    def summary(self):
        what = "partitioning a graph" if self.kind == PARTITION else "compiling a model"
        if self.fell_back:
            return (f"{what} for {self.node!r} failed, so it runs its TensorFlow ops on CPU "
                    f"instead: {self.message}")
        return f"{what} failed: {self.message}"


_lock = threading.Lock()
_recorders = []                        # lists that explain() is filling
_models_by_cluster = {}                # cluster key -> [ModelEvent]: the plugin caches models,
                                       # so explain finds a cluster's model here, not in a compile
_fallbacks_by_cluster = {}             # cluster key -> [FailureEvent] (same reason as above)
_signatures = collections.Counter()    # cluster key -> signatures compiled (or tried)
_value_signatures = collections.Counter()  # (cluster key, input shapes) -> value signatures
_first_shapes = {}                      # cluster key -> input shapes of its first signature
_warned = set()                        # (what, cluster key or node, reason) already warned about
_fallbacks = 0                         # signatures that could not compile and run on CPU
_disk_caches = {}                      # op_compiler_cache_dir -> graph_engine DiskCache
_disk_cache_writes = 0                 # compiled models stored in the disk cache
# Codes with which NpuGraphOp does not fall back: the program's own invalid input (TF's error
# class for it), and an interpreter shutting down (graph_engine/ops/errors.py).
_NO_FALLBACK = (errors.INVALID_ARGUMENT, errors.OUT_OF_RANGE, 14)


def _cluster_key(nd):
    """The cluster key of an NpuGraphOp NodeDef (attr cluster_key), None for an eager op."""
    return nd.attr["cluster_key"].s.decode() if nd.op in CLUSTER_OPS else None


def models_for(key):
    with _lock:
        return list(_models_by_cluster.get(key, ()))


def fallbacks_for(key):
    """The failed compiles of a cluster that made it run on CPU (FailureEvents)."""
    with _lock:
        return list(_fallbacks_by_cluster.get(key, ()))


def start_recording():
    events = []
    with _lock:
        _recorders.append(events)
    return events


def stop_recording(events):
    with _lock:
        _recorders.remove(events)


def _compile_options(snapshot):
    """What the graph engine compiles with: the options of `snapshot` marked `compile`, plus
    `precision` and the memory of one NPU device, which no value or model may exceed."""
    return dict(snapshot.compile_options(), device_memory_bytes=int(_C.get_config()["hbm_bytes"]))


def _partition(request):
    from graph_engine.compiler import api
    start = time.perf_counter()
    opts = configuration.current()
    result = api.partition_graph_with_report(request, _compile_options(opts))
    for name, (shapes, compile_request) in result.requests.items():
        compile_ahead.submit(result.clusters[name], shapes, compile_request,
                             lambda r, opts=opts, name=name: _build(r, opts, name))
    return result.graph_def, PartitionEvent(result.report, result.clusters,
                                            time.perf_counter() - start)


def _warn_once(what, subject, message):
    with _lock:
        if (what, subject, message) in _warned:
            return
        _warned.add((what, subject, message))
    _log.warning("npu_device: %s", message)


def _changed_shapes(first, shapes, most=6):
    """The inputs whose shapes differ from the cluster's first signature, as text (a cluster
    of a transformer step has a hundred inputs; the few that vary are the news)."""
    changed = [f"input {i} {s} (first {f})" for i, (f, s) in enumerate(zip(first, shapes))
               if f != s]
    if not changed:
        return "new values of an input that fixes a shape, at the first signature's shapes"
    more = f" and {len(changed) - most} more" if len(changed) > most else ""
    return f"{len(changed)} of {len(shapes)} inputs changed shape: {', '.join(changed[:most])}{more}"


def _count_signature(nd, key, shapes, opts):
    """Accounts one new signature of a cluster: the recompile warning, and the bound on
    compiles for values of its run-time shape inputs (raises UnsupportedError past it: the
    kernel then runs those values on CPU instead of compiling one model per step)."""
    n_values = len(nd.attr["_const_inputs"].list.tensor) if "_const_inputs" in nd.attr else 0
    name = nd.attr["cluster_name"].s.decode() or nd.name
    with _lock:
        _signatures[key] += 1
        compiled = _signatures[key]
        first = _first_shapes.setdefault(key, shapes)
        if n_values:
            _value_signatures[key, str(shapes)] += 1
            specializations = _value_signatures[key, str(shapes)]
    if compiled == opts.recompile_warning_threshold + 1:
        _warn_once("recompile", key, (
            f"NPU cluster {name!r} ({nd.name}) has compiled {compiled} signatures (now "
            f"{_changed_shapes(first, shapes)}). Each new input shape, or new value of an input "
            f"that fixes a shape, compiles again; pad inputs to a few shapes (e.g. fixed batch "
            f"and sequence lengths, drop_remainder=True) to avoid it. Option "
            f"recompile_warning_threshold sets when this is said."))
    if n_values and specializations > opts.max_value_specializations:
        raise errors.UnsupportedError(
            f"the values of its {n_values} run-time shape input(s) changed from call to call "
            f"more than max_value_specializations ({opts.max_value_specializations}) times at "
            f"input shapes {shapes}; new values run on CPU instead of compiling each one",
            nd.name, nd.op)


def _disk_cache(opts):
    """(DiskCache, mode) for options op_compiler_cache_*, or (None, "disable")."""
    mode = opts.op_compiler_cache_mode
    if mode == "disable":
        return None, mode
    from graph_engine.compiler import disk_cache
    with _lock:
        cache = _disk_caches.get(opts.op_compiler_cache_dir)
        if cache is None:
            cache = _disk_caches[opts.op_compiler_cache_dir] = disk_cache.DiskCache(
                opts.op_compiler_cache_dir, log=_log)
    return cache, mode


_runtime_digest = None


def _runtime_identity():
    """A hash of the native runtime library this process loaded: it interprets the compiled
    models (kernel names and attributes), so a model stored by another build is not reused."""
    global _runtime_digest
    from graph_engine.compiler import disk_cache
    if os.environ.get(disk_cache.VERSION_ENV):   # test hook: the compiler version is pinned
        return "pinned"
    if _runtime_digest is None:
        path = None
        try:
            with open("/proc/self/maps") as f:
                path = next((line.split(None, 5)[5].strip() for line in f
                             if line.rstrip().endswith("/libnpu_runtime.so")), None)
        except (OSError, IndexError):
            pass
        path = path or os.path.join(os.path.dirname(__file__), "_lib", "libnpu_runtime.so")
        try:
            with open(path, "rb") as f:
                _runtime_digest = hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            _runtime_digest = "unknown"
    return _runtime_digest


def _disk_key(request, compile_options):
    """The disk cache key of a compile request: the request, the compile options (the device
    memory among them), the compiler version and the runtime that will run the model."""
    from graph_engine.compiler import disk_cache
    return disk_cache.request_key(request, compile_options, f"runtime={_runtime_identity()}")


def _from_disk(cache, key):
    """The compiled model stored under `key`, as an api.CompileResult, or None."""
    from graph_engine.compiler import api, model_format
    data = cache.get(key)
    if data is None:
        return None
    try:
        model = model_format.deserialize(data)
    except Exception as e:  # noqa: BLE001  (sha256 matched but the model does not parse)
        cache.discard(key, f"the compiled model does not load: {e}")
        return None
    return api.CompileResult(data, [k.kernel for k in model.kernels], model.arena_bytes,
                             json.loads(model.metadata or "{}"))


def _mark_from_disk():
    """Tells the plugin (same thread) that the model it gets back was loaded, not compiled."""
    plugin = _plugin()
    mark = getattr(plugin, "NpuPluginCompileFromDiskCache", None) if plugin is not None else None
    if mark is not None:
        mark()


def _compile_model(request):
    from tensorflow.core.framework import node_def_pb2
    try:
        nd = node_def_pb2.NodeDef.FromString(bytes(request))
    except Exception as e:
        raise errors.CompileError(f"compile request is not a serialized tensorflow.NodeDef: "
                                  f"{e}") from None
    shapes = [[d.size for d in s.dim] for s in nd.attr["_input_shapes"].list.shape]
    opts = configuration.current()
    key = _cluster_key(nd)
    if key is not None:
        _count_signature(nd, key, shapes, opts)
    ahead = compile_ahead.take(key, shapes) if key is not None else None
    if ahead is not None:
        (result, from_disk, seconds), waited = ahead
    else:
        result, from_disk, seconds = _build(request, opts, nd.name)
        waited = None
    if from_disk:
        _mark_from_disk()
    event = ModelEvent(nd.name, nd.op, shapes, result.kernels, result.arena_bytes, key, seconds,
                       result.metadata, from_disk, waited)
    if key is not None:
        with _lock:
            _models_by_cluster.setdefault(key, []).append(event)
    return result.model, event


def _build(request, opts, name):
    """(api.CompileResult, from the disk cache?, seconds) of a compile request for node `name`
    (for the log), through the disk compile cache of options `opts`."""
    global _disk_cache_writes
    from graph_engine.compiler import api
    compile_options = _compile_options(opts)
    cache, mode = _disk_cache(opts)
    disk_key = result = None
    start = time.perf_counter()
    if cache is not None:
        try:
            disk_key = _disk_key(request, compile_options)
        except Exception as e:  # noqa: BLE001  (compile_model below reports a bad request)
            _log.debug("npu_device: no disk cache key for %r: %s", name, e)
            cache = None
    # A compile that dumps its graphs (dump_graph_path) runs, so that the dumps are written.
    if cache is not None and mode == "enable" and not opts.dump_graph_path:
        result = _from_disk(cache, disk_key)
    from_disk = result is not None
    if from_disk:
        _log.debug("npu_device: %r loaded from the disk compile cache (%s)", name,
                   cache.path(disk_key))
    else:
        result = api.compile_model_with_report(request, compile_options)
        if cache is not None and cache.put(disk_key, result.model,
                                           opts.op_compiler_cache_max_size):
            with _lock:
                _disk_cache_writes += 1
            _log.debug("npu_device: %r stored in the disk compile cache (%s)", name,
                       cache.path(disk_key))
    return result, from_disk, time.perf_counter() - start


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
        event = _failure_event(kind, request, e)
    with _lock:
        for events in _recorders:
            events.append(event)
    if configuration.current().log_compile_summary:
        # Asked for explicitly: shown at whatever level the npu_device logger is set to.
        _log.log(max(logging.INFO, _log.getEffectiveLevel()), "npu_device: %s", event.summary())
    if failure is not None:
        raise failure
    return out


def _failure_event(kind, request, e):
    """The event of a failed compile; a cluster that falls back to CPU says so, once."""
    global _fallbacks
    message = str(e) if isinstance(e, errors.CompileError) else f"{type(e).__name__}: {e}"
    node, fell_back, nd = None, False, None
    if kind == COMPILE_MODEL:
        from tensorflow.core.framework import node_def_pb2
        try:
            nd = node_def_pb2.NodeDef.FromString(bytes(request))
        except Exception:  # an unreadable request is reported as it is
            nd = None
        if nd is not None:
            node = nd.name
            fell_back = (configuration.current().cpu_fallback
                         and errors.error_code(e) not in _NO_FALLBACK)
    event = FailureEvent(kind, message, node, fell_back)
    if fell_back:
        with _lock:
            _fallbacks += 1
            if nd.op in CLUSTER_OPS:
                _fallbacks_by_cluster.setdefault(_cluster_key(nd), []).append(event)
        _warn_once("fallback", node, f"NPU {'cluster' if nd.op in CLUSTER_OPS else 'op'} "
                   f"{node!r} cannot be compiled for the NPU, so it runs its TensorFlow ops on "
                   f"CPU instead (results as on CPU; npu_device.explain shows it). Reason: "
                   f"{message}")
    return event


def compile_stats(reset=False):
    """Compile counters of this process, as a dict:

    compiles          models compiled (clusters and eager ops)
    compile_failures  compiles that failed (each such signature then runs on CPU, or raised
                      the program's own InvalidArgumentError)
    fallbacks         cluster/op signatures that run on CPU because the engine cannot compile them
    fallback_runs     executions of those on CPU
    cache_hits        runs that found their model compiled already
    evictions         models dropped from the cache (option compile_cache_size)
    cached_models     models in the cache now
    compile_seconds   time spent compiling
    load_seconds      time spent loading compiled (or disk-cached) models onto the device
    disk_cache_hits   models loaded from the disk compile cache instead of compiled (not
                      counted in compiles; option op_compiler_cache_mode)
    disk_cache_writes compiled models stored in the disk compile cache
    max_signatures_per_cluster   the most signatures one cluster compiled

    reset=True zeroes the counters after reading them."""
    import ctypes
    global _fallbacks, _disk_cache_writes
    stats = {}
    plugin = _plugin()
    if plugin is not None:
        fields = ctypes.c_char_p(plugin.NpuCompileStatsFields()).value.decode().split(",")
        out = (ctypes.c_double * len(fields))()
        plugin.NpuCompileStats(out, int(reset))
        stats = {f: (v if f.endswith("_seconds") else int(v)) for f, v in zip(fields, out)}
    with _lock:
        stats["fallbacks"] = _fallbacks
        stats["disk_cache_writes"] = _disk_cache_writes
        stats.setdefault("disk_cache_hits", 0)
        stats["max_signatures_per_cluster"] = max(_signatures.values(), default=0)
        if reset:
            _fallbacks = 0
            _disk_cache_writes = 0
            _signatures.clear()
            _value_signatures.clear()
            _first_shapes.clear()
    return stats


def _plugin():
    """The TF plugin library this process loaded (ctypes), or None."""
    import ctypes
    from npu_device import _loader
    for path in _loader.plugin_candidates():
        try:  # RTLD_NOLOAD: only a copy that TensorFlow already loaded
            plugin = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        plugin.NpuCompileStatsFields.restype = ctypes.c_void_p
        plugin.NpuCompileStats.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
        plugin.NpuPluginSetCacheSize.argtypes = [ctypes.c_uint64]
        plugin.NpuPluginSetCpuFallback.argtypes = [ctypes.c_int]
        return plugin
    return None


def _apply_options(snapshot, compile_changed):
    """The configuration's listener (configuration.on_change): hands options
    compile_cache_size and cpu_fallback to the plugin and the dump and profiling options to the
    runtime (npu_device.observability); after a change of the compile options, tells the
    plugin so that eager ops compile again instead of reusing models built with the old ones
    (clusters carry their own options)."""
    plugin = _plugin()
    if plugin is not None:
        if compile_changed:
            plugin.NpuPluginOptionsChanged()
        plugin.NpuPluginSetCacheSize(snapshot.compile_cache_size)
        plugin.NpuPluginSetCpuFallback(int(snapshot.cpu_fallback))
    observability.push_options(snapshot)


def register():
    """Makes the TF plugin compile through this module (idempotent)."""
    _C.set_compiler(_compile)


register()
configuration.on_change(_apply_options)
# Compiles that TF threads start during interpreter shutdown get a clear error instead.
atexit.register(_C.set_compiler, None)
