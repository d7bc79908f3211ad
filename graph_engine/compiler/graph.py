"""The GE graph IR: nodes by name in insertion order, plus the GraphDef's library and versions
carried through untouched. Inputs are `_Arg` nodes and outputs `_Retval` nodes (attr index),
as in TF function bodies."""
import collections
import heapq

from graph_engine.ops.errors import CompileError
from graph_engine.compiler.node import Node, hand_on_origin


class Graph:
    def __init__(self, library=None, versions=None):
        self.nodes = {}                  # name -> Node, insertion-ordered
        self.library = library           # FunctionDefLibrary proto or None
        self.versions = versions         # VersionDef proto or None
        self._held = []                  # every node ever added, removed ones too (dispose)
        self.edits = 0                   # nodes added and removed so far

    def __iter__(self):
        return iter(list(self.nodes.values()))

    def __len__(self):
        return len(self.nodes)

    def __getitem__(self, name):
        return self.nodes[name]

    def add(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise CompileError(f"duplicate node name {node.name!r}", node=node.name, op=node.op)
        self.nodes[node.name] = node
        self._held.append(node)
        self.edits += 1
        return node

    def remove(self, node: Node):
        del self.nodes[node.name]
        self.edits += 1

    def dispose(self):
        """Breaks the node <-> value reference cycles of every node this graph ever held, so
        that reference counting frees the IR as soon as it is dropped: a large compile leaves
        about 150,000 objects in such cycles, which the cyclic GC (paused while compiling)
        would otherwise have to find. The graph is unusable afterwards."""
        for node in self._held:
            node.outputs = []
        self._held = []
        self.nodes = {}

    def unique_name(self, base):
        return unique_name(base, self.nodes)

    # ---- structure ----------------------------------------------------------------------
    def data_consumers(self):
        """Value -> [(consumer node, input position)]."""
        users = collections.defaultdict(list)
        for n in self.nodes.values():
            i = 0                        # no enumerate: every pass builds this map
            for v in n.inputs:
                users[v].append((n, i))
                i += 1
        return users

    def control_consumers(self):
        users = collections.defaultdict(list)
        for n in self.nodes.values():
            if n.control_inputs:
                for c in n.control_inputs:
                    users[c].append(n)
        return users

    def replace_uses(self, old, new, users=None):
        """Points every data use of Value `old` at Value `new` (which holds the same tensor)."""
        hand_on_origin(old, new)
        for consumer, i in (users or self.data_consumers()).get(old, ()):
            consumer.inputs[i] = new

    def args(self):
        """`_Arg` nodes sorted by index."""
        return sorted((n for n in self.nodes.values() if n.op == "_Arg"),
                      key=lambda n: n.attr("index"))

    def retvals(self):
        return sorted((n for n in self.nodes.values() if n.op == "_Retval"),
                      key=lambda n: n.attr("index"))

    def topo_order(self):
        """Nodes producers-first (data and control edges), stable in insertion order. When
        that is not the insertion order (a pass added a node that earlier ones now read), the
        graph takes it as its order, so that the next pass's sort is one linear check."""
        nodes = list(self.nodes.values())
        order = topo_sort(nodes, _producers)
        if order != nodes:
            self.nodes.clear()
            self.nodes.update((n.name, n) for n in order)
        return order


def unique_name(base, taken):
    """`base`, else the first of `base_1`, `base_2` ... that is not in `taken`."""
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


def _producers(node):
    return [v.node for v in node.inputs] + list(node.control_inputs)


class CycleError(CompileError):
    """topo_sort found a cycle; `stuck` names (up to) five of the nodes on or behind it."""

    def __init__(self, stuck):
        self.stuck = stuck
        super().__init__(f"graph has a cycle through {stuck}")


def _producers_first(nodes, producers):
    """Does every node of `nodes` come after the nodes it depends on?"""
    seen = set()
    if producers is _producers:
        add = seen.add
        for n in nodes:
            for v in n.inputs:
                if v.node not in seen:
                    return False
            if n.control_inputs and not seen.issuperset(n.control_inputs):
                return False
            add(n)
        return True
    for n in nodes:
        if any(p not in seen for p in producers(n)):
            return False
        seen.add(n)
    return True


def topo_sort(nodes, producers):
    """`nodes` producers-first, where producers(n) lists the nodes n depends on (only those
    edges count). Stable: of the nodes ready, the earliest in `nodes` comes next, so a list
    already producers-first comes back as it is. CycleError if the edges have a cycle."""
    # Usually `nodes` already is producers-first, and then it is the answer: one linear check
    # (every pass sorts, so the IR's own edges are read without building lists).
    if _producers_first(nodes, producers):
        return list(nodes)
    # Kahn's algorithm over positions: successors and pending counts indexed by position.
    position = {n: i for i, n in enumerate(nodes)}
    pending, succ, heap = [0] * len(nodes), [[] for _ in nodes], []
    ir_edges = producers is _producers
    for i, n in enumerate(nodes):
        if ir_edges:
            preds = {v.node for v in n.inputs}
            if n.control_inputs:
                preds.update(n.control_inputs)
        else:
            preds = set(producers(n))
        pending[i] = len(preds)
        if not preds:
            heap.append(i)                  # ascending: a heap already
        for p in preds:
            j = position.get(p)
            if j is not None:               # a producer outside `nodes` never becomes ready
                succ[j].append(i)
    order = []
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        i = pop(heap)
        order.append(nodes[i])
        for j in succ[i]:
            pending[j] -= 1
            if pending[j] == 0:
                push(heap, j)
    if len(order) != len(nodes):
        raise CycleError(sorted(n.name for n, k in zip(nodes, pending) if k > 0)[:5])
    return order
