"""Partition reports: where every node of a graph went and why, kept for npu_device.explain.

    from graph_engine.compiler import reports
    reports.recent()          # the last reports, oldest first (at most MAX_REPORTS)
    reports.last()            # the newest, or None
    r.summary()               # human-readable text
    r.to_dict()               # JSON-ready
    r.fallbacks()             # nodes kept off the NPU, with reasons

A node's placement is "npu" (inside cluster `cluster`), "npu_unclustered" (on the NPU but run
as a TF op, with the reason) or the lower-case device type it stays on ("cpu"), with the reason.
"""
import collections
import dataclasses
import itertools
import threading
import time

MAX_REPORTS = 64

NPU, NPU_UNCLUSTERED = "npu", "npu_unclustered"


@dataclasses.dataclass
class NodeReport:
    node: str
    op: str
    device: str
    placement: str
    cluster: str = None
    reason: str = None


@dataclasses.dataclass
class PartitionReport:
    graph_id: int
    created: float
    nodes: list                                  # NodeReport per input node, in graph order
    clusters: dict                               # cluster name -> [member node names]

    def fallbacks(self):
        return [n for n in self.nodes if n.placement != NPU]

    def to_dict(self):
        return {"graph_id": self.graph_id, "created": self.created,
                "clusters": self.clusters, "nodes": [dataclasses.asdict(n) for n in self.nodes]}

    def summary(self):
        counts = collections.Counter(n.placement for n in self.nodes)
        lines = [f"graph {self.graph_id}: {len(self.nodes)} nodes, {len(self.clusters)} NPU "
                 f"cluster(s); " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))]
        for name, members in self.clusters.items():
            lines.append(f"  {name}: {len(members)} nodes")
        reasons = collections.Counter((n.placement, n.reason) for n in self.fallbacks())
        for (placement, reason), count in reasons.most_common():
            lines.append(f"  {placement}: {count} x {reason}")
        return "\n".join(lines)


_reports = collections.deque(maxlen=MAX_REPORTS)
_ids = itertools.count(1)
_lock = threading.Lock()


def new_report(nodes, clusters):
    """Creates and records a report (the partitioner calls this once per graph)."""
    with _lock:
        report = PartitionReport(next(_ids), time.time(), nodes, clusters)
        _reports.append(report)
    return report


def recent(n=None):
    with _lock:
        items = list(_reports)
    return items if n is None else items[-n:]


def last():
    with _lock:
        return _reports[-1] if _reports else None


def clear():
    with _lock:
        _reports.clear()
