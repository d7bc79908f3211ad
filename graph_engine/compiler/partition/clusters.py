"""Forms maximal clusters of clusterable nodes without creating cycles or deadlocks.

An NpuGraphOp is one ordinary node for TF's executor: it runs in a frame iteration once ALL its
inputs are there (a dead input makes all outputs dead without running). Members of one cluster
therefore must (1) share a control-flow context (contexts.py): their inputs exist in the same
iterations and are all alive or all dead together; and (2) never wait, through the cluster, on
each other: contracting a cluster must keep acyclic the dependency graph that has every DAG edge
(dag.py: NextIteration -> Merge back edges only link an iteration to the next one, and values
flow from earlier iterations to later ones only) plus, for every loop frame, Enter -> frame ->
Exit through a virtual node. The frame node stands for all iterations: an Exit fires in the last
iteration, and that iteration needs every value that enters the loop, even when no DAG path
links them (the input sequence of an RNN reaches the output accumulator's Exit only around the
back edges). A cluster holding a producer of a loop input and a consumer of a loop output would
wait for itself: a deadlock. Together (1) and (2) are the whole rule; loop-control ops stay in
TF (candidates.py).

Every edge between two clusterable nodes with the same device and control-flow context is
contracted unless the graph outside the pair also connects them (GraphCycles); rounds repeat
until nothing merges, since one merge can enable another. Then clusters that no path connects
(siblings, e.g. two consumers of one input) merge too: each NpuGraphOp is a launch, and on an
NPU fewer, larger launches win. Clusters whose members all compute nothing (identities, shape
queries) are dropped: a launch would cost more than it saves.

Consts that clusters copy in (`cloned`) are seen through: a clusterable node depends on the
control inputs of a Const it reads (the cluster node inherits them), not on the Const itself,
so a loop body's constants (control-dependent on the loop's pivot) do not split its cluster.
"""
from graph_engine import ops
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.partition import dag
from graph_engine.compiler.partition.contexts import ENTER, EXIT, frame_of
from graph_engine.compiler.partition.cycles import GraphCycles

MAX_ROUNDS = 4


def _through_clones(preds, cloned):
    """A cloned Const is copied into the cluster: what orders it orders its reader."""
    return [q for p in preds
            for q in (_through_clones(dag.producers(p), cloned) if p in cloned else (p,))]


def form_clusters(topo, clusterable, ctx, cloned=frozenset()):
    """([[members]], [[members of dropped clusters]]), members in topological order."""
    index = {n: i for i, n in enumerate(topo)}

    def direct_preds(n):
        preds = dag.producers(n)
        if n in clusterable and any(p in cloned for p in preds):
            return _through_clones(preds, cloned)
        return preds

    pred_lists = {n: direct_preds(n) for n in topo}     # read once per round below
    preds = pred_lists.__getitem__

    frames = _frames(topo, ctx)             # frame -> virtual node index (after the nodes)
    cycles = GraphCycles(len(topo) + len(frames))
    for n in topo:
        for p in preds(n):
            cycles.add_edge(index[p], index[n])
    _add_frame_edges(cycles, topo, ctx, frames, index)
    rep = list(range(len(topo)))            # union-find over node indices

    def find(i):
        while rep[i] != i:
            rep[i] = rep[rep[i]]
            i = rep[i]
        return i

    # Nodes may share a cluster when both are clusterable, on one device, in one context.
    kind = {n: (n.device, ctx[n]) for n in clusterable if ctx[n] is not None}

    def compatible(a, b):
        k = kind.get(a)
        return k is not None and k == kind.get(b)

    for _ in range(MAX_ROUNDS):
        merged = False
        for n in topo:
            for p in preds(n):
                if not compatible(p, n):
                    continue
                a, b = find(index[p]), find(index[n])
                if a != b and b in cycles.out[a]:
                    kept = cycles.contract(a, b)
                    if kept is not None:
                        rep[a] = rep[b] = kept
                        merged = True
        if not merged:
            break
    reps = list(dict.fromkeys(find(index[n]) for n in topo if n in clusterable))
    absorbed = set()                        # reps merged into an earlier one
    for i, first in enumerate(reps):
        if first in absorbed:
            continue
        for b in reps[i + 1:]:
            a = find(first)
            if b not in absorbed and compatible(topo[first], topo[b]):
                kept = cycles.merge(a, b)
                if kept is not None:
                    rep[a] = rep[b] = kept
                    absorbed.add(b)
    groups = {}
    for n in topo:
        if n in clusterable:
            groups.setdefault(find(index[n]), []).append(n)
    return [m for m in groups.values() if not all(ops.get(n.op).trivial for n in m)], \
        [m for m in groups.values() if all(ops.get(n.op).trivial for n in m)]


def _frames(topo, ctx):
    keys = (frame_of(n, ctx) for n in topo if n.op in ENTER)
    return {k: len(topo) + i for i, k in enumerate(dict.fromkeys(k for k in keys if k))}


def _add_frame_edges(cycles, topo, ctx, frames, index):
    """Enter -> frame -> Exit for every loop frame. (An Exit whose frame contexts cannot tell
    is MIXED, and so is everything downstream of it: nothing there is clustered.)"""
    for n in topo:
        key = frame_of(n, ctx) if n.op in ENTER + EXIT else None
        if key not in frames:
            continue
        if n.op in ENTER:
            cycles.add_edge(index[n], frames[key])
        elif not cycles.add_edge(frames[key], index[n]):
            raise CompileError(f"cannot partition: {n.name} leaves frame {key[-1][1]!r} "
                               f"upstream of an Enter of that frame")
