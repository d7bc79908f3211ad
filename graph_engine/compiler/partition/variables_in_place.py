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

A variable nothing in the graph writes (an inference step's weights) comes in as a handle too,
`variable_updates` -1: the kernel reads it as ReadVariableOp would (its lock shared, a copy in
copy-on-read mode), and the step runs one TF op fewer per weight (320 for ResNet50, 606 for
DenseNet121).

The write happens when the cluster runs, before AssignVariableOp, so it applies only where no
reader of the variable can come in between: the read feeds this cluster alone (it goes, and
its control consumers follow the cluster; a preserved read stays, as a NoOp of its name:
preserved_reads.py), the update is the variable's one write, and every other reader of its
handle comes before the cluster (a reader still holding the old buffer makes the kernel keep it)
or after the update
(reachability.path_exists; a reader after a loop the update is in follows one of its Exits). Handles
come from function arguments, directly or through a loop's constant Enters and a cond's
Switches (variable_updates.handle_root): the variable's every reader is in view, and in a loop
body the cluster and the update are in one iteration (TF starts the next one only after the
body's stateful ops). Such a cluster is an NpuStatefulGraphOp (TF makes ops with resource
inputs stateful; NpuGraphOp stays stateless).
"""
from graph_engine.compiler.partition import candidates, dag
from graph_engine.compiler.partition.contexts import EXIT, frame_of
from graph_engine.compiler.reachability import path_exists
from graph_engine.compiler.partition.variable_updates import (
    DTYPES, READERS, IterationGates, handle_root, handle_users, in_function_body)


class GraphIndex:
    """The graph's edges both ways and its topological ranks, taken once per partitioning,
    for reachability.path_exists."""

    def __init__(self, g, users, rank, ctx):
        self.users, self.rank, self.ctx = users, rank, ctx
        self.exits = {n: frame_of(n, ctx) for n in rank if n.op in EXIT}
        self.gates = IterationGates(ctx)
        self.control_consumers = g.control_consumers()
        self.succ = _Successors(users, self.control_consumers)
        self.pred = _Predecessors()

    def data_consumers(self, node):
        return self.succ.data_consumers(node)

    def path(self, sources, targets):
        return path_exists(sources, targets, self.succ, self.pred, self.rank)

    def loop_exits(self, node):
        """The Exits of the loops `node` is in: what follows them runs after every iteration."""
        inside = self.ctx[node] or ()
        frames = [ctx for ctx in self.exits.values() if ctx and inside[:len(ctx)] == ctx]
        return [n for n, ctx in self.exits.items() if ctx in frames]

    def ancestors(self, nodes):
        """The nodes from which a path of one edge or more leads to one of `nodes`."""
        found, stack = set(), list(nodes)
        while stack:
            for m in self.pred[stack.pop()]:
                if m not in found:
                    found.add(m)
                    stack.append(m)
        return found


# Edge maps for path_exists, without loops' back edges (NextIteration -> Merge: the next
# iteration), so that paths run within one iteration. No closures over the index: a reference
# cycle would keep the whole graph alive past Graph.dispose() until the cyclic GC (paused while
# partitioning) found it.
class _Successors:
    def __init__(self, users, control_consumers):
        self.users, self.control_consumers = users, control_consumers

    def data_consumers(self, node):
        return [c for v in node.outputs for c, _ in self.users.get(v, ())]

    def __getitem__(self, node):
        return [c for c in self.data_consumers(node) + self.control_consumers.get(node, [])
                if not dag.is_back_edge(node, c)]


class _Predecessors:
    def __getitem__(self, node):
        return dag.producers(node)


def kept(read):
    """Whether a read the cluster takes over stays in the graph: a preserved node (a function's
    control output) must, with its name and edges; nothing reads its value any more."""
    return candidates.PRESERVE_ATTR in read.attrs


def updates(members, outputs, index):
    """({read Value: (handle Value, new-value Value, None if nothing writes the variable)},
    {read Value: the read Value standing for it}) for the variables the cluster of `members`
    (with outside-read results `outputs`) reads itself, to update them in place or because the
    graph never writes them: one read per variable, into which the cluster's other reads of it
    merge (nothing writes the variable between them). Control edges from a read become the
    cluster's: the read's control consumers must not precede the cluster."""
    member_set, output_set = set(members), set(outputs)
    before = []                                # the cluster's ancestors, found once if asked

    def precedes(nodes):                       # some of `nodes` come before the cluster
        if not before:
            before.append(index.ancestors(members))
        return any(n in before[0] for n in nodes)

    def takeable(read):
        if (read.op != "ReadVariableOp" or read.attr("dtype") not in DTYPES
                or candidates.device_type(read.device) != "NPU"
                or not in_function_body(read.inputs[0])
                or any(c not in member_set for c in index.data_consumers(read))):
            return False
        if kept(read):
            return True
        controlled = [c for c in index.control_consumers.get(read, ()) if c not in member_set]
        return not (controlled and precedes(controlled))

    by_root = {}                               # handle_root -> the cluster's reads of it
    for v in dict.fromkeys(v for n in members for v in n.inputs if v.node not in member_set):
        if v.node.op == "ReadVariableOp" and v.index == 0:
            by_root.setdefault(handle_root(v.node.inputs[0]), []).append(v)
    found, merged = {}, {}
    for root, reads in by_root.items():
        if not all(takeable(v.node) for v in reads):
            continue
        taken = {v.node for v in reads}
        others = [c for c in handle_users(root, index.users) if c not in taken]
        writers = [c for c in others if c.op not in READERS]
        dtype = reads[0].node.attr("dtype")
        if not writers and all(v.node.attr("dtype") == dtype for v in reads):
            found[reads[0]] = (reads[0].node.inputs[0], None)     # read only
            merged.update((v, reads[0]) for v in reads[1:])
            continue
        if len(writers) != 1:
            continue
        write = writers[0]
        if (write.op != "AssignVariableOp" or handle_root(write.inputs[0]) is not root
                or write.inputs[1] not in output_set or write.attr("dtype") != dtype
                or any(v.node.attr("dtype") != dtype for v in reads)
                or candidates.device_type(write.device) != "NPU"):
            continue
        after = [write] + index.loop_exits(write)
        if any(not precedes([c]) and not index.path(after, [c])
               for c in others if c is not write):
            continue
        if index.ctx[write] != () and not index.gates.gate(
                [write] + [c for c in others if index.ctx[c] != ()]):
            continue
        found[reads[0]] = (reads[0].node.inputs[0], write.inputs[1])
        merged.update((v, reads[0]) for v in reads[1:])
    return found, merged
