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
        return node

    def remove(self, node: Node):
        del self.nodes[node.name]

    def unique_name(self, base):
        name, i = base, 0
        while name in self.nodes:
            i += 1
            name = f"{base}_{i}"
        return name

    # ---- structure ----------------------------------------------------------------------
    def data_consumers(self):
        """Value -> [(consumer node, input position)]."""
        users = collections.defaultdict(list)
        for n in self.nodes.values():
            for i, v in enumerate(n.inputs):
                users[v].append((n, i))
        return users

    def control_consumers(self):
        users = collections.defaultdict(list)
        for n in self.nodes.values():
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
        """Nodes producers-first (data and control edges), stable in insertion order."""
        nodes = list(self.nodes.values())
        # Usually insertion order already is producers-first, and then it is the answer (the
        # smallest-position ready node is always the next one): one linear check.
        if self._in_insertion_order():
            return nodes
        position = {n: i for i, n in enumerate(nodes)}
        pending, succ = {}, collections.defaultdict(list)
        for n in nodes:
            preds = {v.node for v in n.inputs}
            preds.update(n.control_inputs)
            pending[n] = len(preds)
            for p in preds:
                succ[p].append(n)
        heap = [i for i, n in enumerate(nodes) if pending[n] == 0]   # sorted: a heap already
        order = []
        while heap:
            n = nodes[heapq.heappop(heap)]
            order.append(n)
            for s in succ[n]:
                pending[s] -= 1
                if pending[s] == 0:
                    heapq.heappush(heap, position[s])
        if len(order) != len(nodes):
            stuck = sorted(n.name for n, k in pending.items() if k > 0)[:5]
            raise CompileError(f"graph has a cycle through {stuck}")
        return order

    def _in_insertion_order(self):
        seen = set()
        for n in self.nodes.values():
            for v in n.inputs:
                if v.node not in seen:
                    return False
            for p in n.control_inputs:
                if p not in seen:
                    return False
            seen.add(n)
        return True
