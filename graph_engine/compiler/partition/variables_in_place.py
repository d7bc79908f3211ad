"""Variables a cluster updates in place: the cluster reads the variable itself and may write its
new value over the old one.

After variable_updates.py, an optimizer step is `AssignVariableOp(var, f(ReadVariableOp(var)))`
with f in a cluster: the cluster writes the new weight (and Adam's m and v) into new buffers
that AssignVariableOp then adopts. A pass over fresh memory costs the cache misses of its
stores on top of its loads, so Adam over a 2.4M-weight tensor took about twice as long as TF's
in-place update of the same tensor. Here the cluster takes the variable's handle instead of the
read (input list `variables`, attr `variable_updates`: the result that is each one's new value);
the NpuGraphOp kernel reads the variable under its lock and, when no other tensor shares the
buffer (TF's copy-on-write test) and the compiled model allows it (the kernel computing the new
value is the buffer's last reader: plan_memory.py), passes that buffer as the result's buffer.
AssignVariableOp, which stays, then finds the variable holding the value already. Otherwise
the kernel reads the variable and computes into a new buffer as before: the rewrite never
changes a result, only where it is stored.

The write happens when the cluster runs, before AssignVariableOp, so it applies only where no
reader of the variable can come in between: the read feeds this cluster alone (it goes, and
its control consumers follow the cluster; a preserved read stays, unread), the update is the
variable's one write, and every other reader of its handle comes before the cluster (a reader
still holding the old buffer makes the kernel keep it) or after the update
(reachability.path_exists). Handles come from function arguments, so both are outside control
flow. Such a cluster is an NpuStatefulGraphOp (TF makes ops with resource inputs stateful;
NpuGraphOp stays stateless).
"""
from graph_engine.compiler.partition import candidates
from graph_engine.compiler.reachability import path_exists
from graph_engine.compiler.partition.variable_updates import DTYPES, READERS

# A function's arguments: outside control flow, and only in graphs TF runs as functions (a TF1
# session shares stateful kernels, such as NpuStatefulGraphOp, between its graphs by name).
_HANDLE_SOURCES = ("_Arg",)


class GraphIndex:
    """The graph's edges both ways and its topological ranks, taken once per partitioning,
    for reachability.path_exists."""

    def __init__(self, g, users, rank):
        self.users, self.rank = users, rank
        self.control_consumers = g.control_consumers()
        self.succ = _Successors(users, self.control_consumers)
        self.pred = _Predecessors()

    def data_consumers(self, node):
        return self.succ.data_consumers(node)

    def path(self, sources, targets):
        return path_exists(sources, targets, self.succ, self.pred, self.rank)

    def ancestors(self, nodes):
        """The nodes from which a path of one edge or more leads to one of `nodes`."""
        found, stack = set(), list(nodes)
        while stack:
            for m in self.pred[stack.pop()]:
                if m not in found:
                    found.add(m)
                    stack.append(m)
        return found


# Edge maps for path_exists. No closures over the index: a reference cycle would keep the whole
# graph alive past Graph.dispose() until the cyclic GC (paused while partitioning) found it.
class _Successors:
    def __init__(self, users, control_consumers):
        self.users, self.control_consumers = users, control_consumers

    def data_consumers(self, node):
        return [c for v in node.outputs for c, _ in self.users.get(v, ())]

    def __getitem__(self, node):
        return self.data_consumers(node) + self.control_consumers.get(node, [])


class _Predecessors:
    def __getitem__(self, node):
        return [v.node for v in node.inputs] + node.control_inputs


def kept(read):
    """Whether a read the cluster takes over stays in the graph: a preserved node (a function's
    control output) must, with its name and edges; nothing reads its value any more."""
    return candidates.PRESERVE_ATTR in read.attrs


def updates(members, outputs, index):
    """({read Value: (handle Value, new-value Value)}, {read Value: the read Value standing for
    it}) for the variables the cluster of `members` (with outside-read results `outputs`) may
    update in place: one read per variable, into which the cluster's other reads of it merge
    (nothing writes the variable between them). Control edges from a read become the cluster's:
    the read's control consumers must not precede the cluster."""
    member_set, output_set = set(members), set(outputs)
    before = []                                # the cluster's ancestors, found once if asked

    def precedes(nodes):                       # some of `nodes` come before the cluster
        if not before:
            before.append(index.ancestors(members))
        return any(n in before[0] for n in nodes)

    def takeable(read):
        if (read.op != "ReadVariableOp" or read.attr("dtype") not in DTYPES
                or candidates.device_type(read.device) != "NPU" or read.control_inputs
                or read.inputs[0].node.op not in _HANDLE_SOURCES
                or any(c not in member_set for c in index.data_consumers(read))):
            return False
        if kept(read):
            return True
        controlled = [c for c in index.control_consumers.get(read, ()) if c not in member_set]
        return not (controlled and precedes(controlled))

    by_handle = {}
    for v in dict.fromkeys(v for n in members for v in n.inputs if v.node not in member_set):
        if v.node.op == "ReadVariableOp" and v.index == 0:
            by_handle.setdefault(v.node.inputs[0], []).append(v)
    found, merged = {}, {}
    for handle, reads in by_handle.items():
        if not all(takeable(v.node) for v in reads):
            continue
        taken = {v.node for v in reads}
        others = [c for c, _ in index.users.get(handle, ()) if c not in taken]
        writers = [c for c in others if c.op not in READERS]
        if len(writers) != 1:
            continue
        write, dtype = writers[0], reads[0].node.attr("dtype")
        if (write.op != "AssignVariableOp" or write.inputs[0] is not handle
                or write.inputs[1] not in output_set or write.attr("dtype") != dtype
                or any(v.node.attr("dtype") != dtype for v in reads)
                or candidates.device_type(write.device) != "NPU"):
            continue
        if any(not precedes([c]) and not index.path([write], [c])
               for c in others if c is not write):
            continue
        found[reads[0]] = (handle, write.inputs[1])
        merged.update((v, reads[0]) for v in reads[1:])
    return found, merged
