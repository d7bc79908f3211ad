"""Edge contraction on a DAG that stays acyclic: the partitioner's cycle check.

Nodes are ints. A dynamic topological order (Pearce & Kelly) makes "does another path lead
from a to b?" a search bounded to the ranks between a and b. Contracting a -> b merges the two
nodes unless such a path exists: then the merged node would sit on a cycle.

That search runs from both ends at once (reachability.path_exists): a grown cluster has a
fan-out of hundreds (searching forwards from it visited most of a training graph per merge,
quadratic overall), while the node being merged into it usually has few ancestors within the
bound.
"""
from graph_engine.compiler.reachability import path_exists


class GraphCycles:
    def __init__(self, n):
        self.rank = list(range(n))          # callers add edges in a topological numbering
        self.out = [set() for _ in range(n)]
        self.inn = [set() for _ in range(n)]

    def add_edge(self, x, y):
        """Adds x -> y; False (and no edge) if it would close a cycle."""
        if x == y:
            return False
        if y in self.out[x]:
            return True
        self.out[x].add(y)
        self.inn[y].add(x)
        rank = self.rank
        if rank[x] < rank[y]:
            return True
        forward = self._search(y, self.out, -1, rank[x], stop=x)
        if forward is None:
            self.out[x].discard(y)
            self.inn[y].discard(x)
            return False
        backward = self._search(x, self.inn, rank[y], len(rank))
        self._reorder(backward, forward)
        return True

    def remove_edge(self, x, y):
        self.out[x].discard(y)
        self.inn[y].discard(x)

    def reachable(self, x, y):
        """Is there a path x -> ... -> y?"""
        return path_exists((x,), (y,), self.out, self.inn, self.rank)

    def contract(self, a, b):
        """Merges a and b along the edge a -> b, unless another a ~> b path exists; returns
        the node that stands for both (the other is left without edges), or None."""
        self.remove_edge(a, b)
        if self.reachable(a, b):
            self.add_edge(a, b)
            return None
        return self._merge_edges(a, b)

    def merge(self, a, b):
        """Merges siblings a and b (no path connects them either way); returns the node that
        stands for both, or None."""
        if self.reachable(a, b) or self.reachable(b, a):
            return None
        return self._merge_edges(a, b)

    def _merge_edges(self, a, b):
        # The node with fewer edges moves them to the other: a grown cluster holds hundreds,
        # and moving those onto each node it absorbs was quadratic in the cluster's size.
        if len(self.out[a]) + len(self.inn[a]) < len(self.out[b]) + len(self.inn[b]):
            a, b = b, a
        self._move_edges(b, a)
        return a

    def _move_edges(self, b, a):
        # Cannot close a cycle: that would need a path between a and b besides the contracted
        # edge, which the callers ruled out.
        out, inn, rank = self.out, self.inn, self.rank
        for p in list(inn[b]):
            out[p].discard(b)
            inn[b].discard(p)
            if p != a and a not in out[p] and rank[p] < rank[a]:
                out[p].add(a)                   # add_edge's case without a search, inline
                inn[a].add(p)
            else:
                self.add_edge(p, a)
        for s in list(out[b]):
            out[b].discard(s)
            inn[s].discard(b)
            if s != a and s not in out[a] and rank[a] < rank[s]:
                out[a].add(s)
                inn[s].add(a)
            else:
                self.add_edge(a, s)

    def _search(self, start, edges, low, high, stop=None):
        """Nodes reachable from `start` through nodes ranked strictly between `low` and `high`;
        None if `stop` is."""
        rank = self.rank
        seen, stack = {start}, [start]
        while stack:
            n = stack.pop()
            for m in edges[n]:
                if m == stop:
                    return None
                if m not in seen and low < rank[m] < high:
                    seen.add(m)
                    stack.append(m)
        return seen

    def _reorder(self, backward, forward):
        """Gives `backward` (must come first) and then `forward` their pooled ranks in order."""
        nodes = sorted(backward, key=self.rank.__getitem__) + \
            sorted(forward, key=self.rank.__getitem__)
        for n, r in zip(nodes, sorted(self.rank[n] for n in nodes)):
            self.rank[n] = r
