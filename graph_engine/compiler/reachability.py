"""Reachability in a DAG whose nodes carry a topological rank (partition's cycle checks, the
elementwise fusion's sibling merges)."""


def path_exists(sources, targets, succ, pred, rank):
    """Whether a path leads from a node of `sources` to a node of `targets` along `succ` edges
    (`pred` the same edges reversed). Every node on such a path ranks between the sources'
    lowest and the targets' highest, so the search steps forwards from the sources and
    backwards from the targets within those bounds, each time on the side whose next node has
    fewer edges to look at, until the two meet (a path) or one runs out (none)."""
    lo = min(rank[n] for n in sources)
    hi = max(rank[n] for n in targets)
    ahead, behind = set(sources), set(targets)          # reached from sources; reaching targets
    forward = [n for n in sources if rank[n] < hi]
    backward = [n for n in targets if rank[n] > lo]
    while forward and backward:
        if len(succ[forward[-1]]) <= len(pred[backward[-1]]):
            for m in succ[forward.pop()]:
                if m in behind:
                    return True
                if m not in ahead and rank[m] < hi:
                    ahead.add(m)
                    forward.append(m)
        else:
            for m in pred[backward.pop()]:
                if m in ahead:
                    return True
                if m not in behind and rank[m] > lo:
                    behind.add(m)
                    backward.append(m)
    return False
