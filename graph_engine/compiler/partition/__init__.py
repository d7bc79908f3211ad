"""partition_graph: a placed GraphDef (as Grappler hands it to the plugin) -> the same graph with
every NPU cluster replaced by one NpuGraphOp node.

Steps: import -> optimizer updates into AssignVariableOp of a value the cluster computes
(variable_updates.py) -> loop plumbing of CPU-only lists onto the CPU (cpu_lists.py), of int32
values from the CPU that the NPU reads in a loop onto the NPU (npu_loop_values.py) -> function
results made on the CPU returned from there (cpu_results.py) -> DAG order (while-loop back
edges set aside) -> control-flow contexts -> per-node classification (candidates.py) -> maximal
acyclic clusters (clusters.py; those that need nothing of the NPU, a loop's counter and
condition, are left to TF's host-memory kernels: host_logic.py) -> rewrite (rewrite.py;
variables a cluster updates in place come in as handles: variables_in_place.py) -> report
(reports.py). Nodes marked `_npu_preserve` (Grappler's fetch and preserved nodes, marked by
the plugin) keep their names and stay outside clusters; the mark is removed from the output. A graph with nothing (new) to cluster comes back unchanged.

Each NpuGraphOp carries the options it was partitioned with (attr `options`, so the cluster
compiles with them) and its identity, attr `cluster_key` (see cluster_key): the TF plugin keys
its model cache on it, npu_device's bridge its compile events, signature counts and fallbacks.
"""
import dataclasses
import hashlib

from tensorflow.core.framework import node_def_pb2

from graph_engine.compiler import attrs as attr_util, gc_pause, reports
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.graphdef import export_graph_def, import_graph_def
from graph_engine.compiler.options import or_defaults, to_json
from graph_engine.compiler.partition import (candidates, constant_clamps, cpu_lists,
                                             cpu_results, dag, host_logic, npu_loop_values,
                                             preserved_reads, rewrite, runtime_slices,
                                             runtime_windows, static_shapes, variable_updates,
                                             variables_in_place)
from graph_engine.compiler.partition.clusters import form_clusters
from graph_engine.compiler.partition.contexts import MIXED, control_contexts
from graph_engine.compiler.cluster_op import CLUSTER_OPS

TRIVIAL_REASON = "its cluster would only hold ops that compute nothing; not worth a launch"
HOST_REASON = ("its cluster would only hold int32 arithmetic and logic that run in host memory "
               "(TF's kernels, NpuHostLogicalAnd/Or) and ops that compute nothing; cheaper than "
               "a launch")


@dataclasses.dataclass(frozen=True)
class PartitionResult:
    graph_def: bytes       # the rewritten GraphDef (the request itself when nothing changed)
    report: reports.PartitionReport
    clusters: dict         # name -> cluster key of each NpuGraphOp this partitioning made
    # name -> (input shapes, compile request: serialized NodeDef with _input_shapes) of the
    # first call the NpuGraphOp will make, for those whose input shapes the graph fixes
    # (static_shapes.py)
    requests: dict = dataclasses.field(default_factory=dict)


def cluster_key(cluster, options_json):
    """The identity of a cluster: sha256 (hex) of its body (attr `cluster`, serialized GraphDef)
    and the options it compiles with (attr `options`, JSON text). Written into the NpuGraphOp as
    attr `cluster_key`; nothing else computes it."""
    return hashlib.sha256(bytes(cluster) + b"\0" + options_json.encode()).hexdigest()


def _placement(node):
    kind = candidates.device_type(node.device)
    return reports.NPU_UNCLUSTERED if kind == "NPU" else (kind.lower() or "unplaced")


def partition(g, opts=None):
    """Rewrites Graph `g` in place, its clusters carrying options `opts` (None: the defaults);
    returns (changed, PartitionReport)."""
    constant_clamps.rewrite(g)
    runtime_slices.rewrite(g)
    runtime_windows.rewrite(g)
    variable_updates.rewrite(g)
    moved = cpu_lists.move_to_cpu(g) + npu_loop_values.move_to_npu(g)
    returned = cpu_results.move_to_cpu(g)
    try:
        topo = dag.order(g)
    except ValueError as e:
        raise CompileError(f"cannot partition: {e}") from None
    ctx = control_contexts(g, topo)
    reasons, clusterable = {}, set()
    for n in topo:
        ok, reason = candidates.classify(n)
        if ok and ctx[n] is MIXED:
            ok, reason = False, "mixes values of different control-flow contexts"
        if ok and any(v.dtype is None for v in n.inputs):
            ok, reason = False, "reads a value of unknown dtype (op unknown to this process)"
        (clusterable.add(n) if ok else reasons.__setitem__(n, reason))
    reasons.update(dict.fromkeys(returned, cpu_results.REASON))
    # A preserved Const may be fed (TF1 feed_dict): its consumers must read the node itself.
    cloneable = {n for n in topo if n.op == "Const" and candidates.unsupported_reason(n) is None
                 and candidates.PRESERVE_ATTR not in n.attrs}
    clusters, trivial = form_clusters(topo, clusterable, ctx, cloneable)
    for members in trivial:
        reasons.update(dict.fromkeys(members, TRIVIAL_REASON))
    kept = []
    for members in clusters:        # e.g. a loop's counter and condition, every iteration
        if host_logic.leave_to_tf(members):
            reasons.update(dict.fromkeys(members, HOST_REASON))
        else:
            kept.append(members)
    clusters = kept

    original = list(g.nodes.values())
    placed = {}                                    # node -> cluster name
    if clusters:
        placed = _rewrite(g, clusters, topo, ctx, cloneable, or_defaults(opts))
    noops = preserved_reads.to_noops(g)
    preserved = [n for n in g if candidates.PRESERVE_ATTR in n.attrs]
    for n in preserved:
        del n.attrs[candidates.PRESERVE_ATTR]
    for n in g:
        n.attrs.pop(candidates.HOST_ATTR, None)

    entries = []
    for n in original:
        if n.op in CLUSTER_OPS:
            entries.append(reports.NodeReport(n.name, n.op, n.device, reports.NPU, n.name,
                                              "already an NPU cluster"))
        elif n in placed:
            reason = {"Const": "constant copied into the cluster",
                      "ReadVariableOp": "the cluster reads the variable itself"}.get(n.op)
            entries.append(reports.NodeReport(n.name, n.op, n.device, reports.NPU, placed[n],
                                              reason))
        elif n in noops:
            entries.append(reports.NodeReport(n.name, "ReadVariableOp", n.device,
                                              _placement(n), None, preserved_reads.REASON))
        else:
            entries.append(reports.NodeReport(n.name, n.op, n.device, _placement(n), None,
                                              reasons.get(n)))
    cluster_members = {}
    for n, name in placed.items():
        if n.op != "Const":
            cluster_members.setdefault(name, []).append(n.name)
    report = reports.new_report(entries, cluster_members)
    return bool(clusters or preserved or moved or returned or noops), report


def _rewrite(g, clusters, topo, ctx, cloneable, opts):
    order = {n: i for i, n in enumerate(topo)}
    users = g.data_consumers()
    options_json = to_json(opts)
    value_map, node_map, placed, cloned = {}, {}, {}, {}
    index = variables_in_place.GraphIndex(g, users, order, ctx)
    k = 0
    for members in sorted(clusters, key=lambda m: order[m[0]]):
        while f"npu_cluster_{k}" in g.nodes:
            k += 1
        name = f"npu_cluster_{k}"
        k += 1
        node, outputs, clones, reads = rewrite.replace_cluster(g, members, name, options_json,
                                                               users, cloneable, index)
        node.set_attr("cluster_key", cluster_key(node.attrs["cluster"].s, options_json))
        g.add(node)                     # reserves the name for the next cluster
        value_map.update(outputs)
        node_map.update(dict.fromkeys(members, node))
        placed.update(dict.fromkeys(members, name))
        node_map.update(dict.fromkeys(reads, node))   # the cluster reads these itself
        placed.update(dict.fromkeys(reads, name))
        for c in clones:
            cloned.setdefault(c, name)
    for n in node_map:                  # members, and the reads clusters took over
        g.remove(n)
    for n in g:
        n.inputs = [value_map.get(v, v) for v in n.inputs]
        controls = []
        for p in n.control_inputs:
            p = node_map.get(p, p)
            if p is not n and p not in controls:
                controls.append(p)
        n.control_inputs = controls
    _drop_implied_controls(g, set(node_map.values()))
    still_used = {v.node for n in g for v in n.inputs} | {p for n in g for p in n.control_inputs}
    for c, name in cloned.items():
        if c not in still_used and candidates.PRESERVE_ATTR not in c.attrs:
            g.remove(c)
            placed[c] = name
    return placed


def _drop_implied_controls(g, cluster_nodes):
    """Drops control inputs that a data input already implies: the node's own data producers,
    and what feeds a cluster node whose output it takes (a cluster runs after all its inputs).
    TF's dependency optimizer removes them between Grappler's two calls otherwise, and the
    second call would not find the graph it returned (tf_plugin_cc/optimizer.cc skips that)."""
    feeds = {c: {v.node for v in c.inputs}.union(c.control_inputs) for c in cluster_nodes}
    for n in g:
        if not n.control_inputs:
            continue
        implied = set()
        for v in n.inputs:
            implied.add(v.node)
            implied.update(feeds.get(v.node, ()))
        n.control_inputs = [p for p in n.control_inputs if p not in implied]


def partition_graph_with_report(graphdef_bytes, options=None) -> PartitionResult:
    """A placed GraphDef (bytes) -> PartitionResult; its clusters compile with `options` (the
    compile options, a dict; None: the defaults)."""
    with gc_pause.paused():
        g = import_graph_def(graphdef_bytes)
        changed, report = partition(g, options)
        if not changed:
            result = PartitionResult(bytes(graphdef_bytes), report, {})
        else:
            clusters = {name: g.nodes[name].attr("cluster_key") for name in report.clusters}
            gd = export_graph_def(g)
            result = PartitionResult(gd.SerializeToString(), report, clusters,
                                     _compile_requests(g, gd, clusters))
        g.dispose()             # the IR goes now, by reference counting
        return result


def _compile_requests(g, gd, clusters):
    shapes = {name: static_shapes.input_shapes(g.nodes[name]) for name in clusters}
    requests = {}
    for nd in gd.node:
        if shapes.get(nd.name) is not None:
            request = node_def_pb2.NodeDef()
            request.CopyFrom(nd)
            request.attr["_input_shapes"].CopyFrom(attr_util.make(shapes=shapes[nd.name]))
            requests[nd.name] = (shapes[nd.name], request.SerializeToString())
    return requests


def partition_graph(graphdef_bytes, options=None) -> bytes:
    """partition_graph_with_report's rewritten GraphDef alone."""
    return partition_graph_with_report(graphdef_bytes, options).graph_def
