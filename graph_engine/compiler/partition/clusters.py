"""Forms maximal clusters of clusterable nodes without creating cycles.

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
from graph_engine.compiler.partition import dag
from graph_engine.compiler.partition.cycles import GraphCycles

MAX_ROUNDS = 4


def form_clusters(topo, clusterable, ctx, cloned=frozenset()):
    """([[members]], [[members of dropped clusters]]), members in topological order."""
    index = {n: i for i, n in enumerate(topo)}

    def preds(n):
        for p, _ in dag.predecessors(n):
            if n in clusterable and p in cloned:
                yield from (q for q, _ in dag.predecessors(p))
            else:
                yield p

    cycles = GraphCycles(len(topo))
    for n in topo:
        for p in preds(n):
            cycles.add_edge(index[p], index[n])
    rep = list(range(len(topo)))            # union-find over node indices

    def find(i):
        while rep[i] != i:
            rep[i] = rep[rep[i]]
            i = rep[i]
        return i

    def compatible(a, b):
        return (a in clusterable and b in clusterable and a.device == b.device
                and ctx[a] is not None and ctx[a] == ctx[b])

    for _ in range(MAX_ROUNDS):
        merged = False
        for n in topo:
            for p in preds(n):
                if not compatible(p, n):
                    continue
                a, b = find(index[p]), find(index[n])
                if a != b and b in cycles.out[a] and cycles.contract(a, b):
                    rep[b] = a
                    merged = True
        if not merged:
            break
    reps = list(dict.fromkeys(find(index[n]) for n in topo if n in clusterable))
    for i, a in enumerate(reps):
        if find(a) != a:
            continue
        for b in reps[i + 1:]:
            if find(b) == b and compatible(topo[a], topo[b]) and cycles.merge(a, b):
                rep[b] = a
    groups = {}
    for n in topo:
        if n in clusterable:
            groups.setdefault(find(index[n]), []).append(n)
    return [m for m in groups.values() if not all(ops.get(n.op).trivial for n in m)], \
        [m for m in groups.values() if all(ops.get(n.op).trivial for n in m)]
