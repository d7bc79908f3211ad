"""The partitioner's view of a (possibly cyclic) placed graph as a DAG: all data and control
edges except the back edges of lowered while loops (NextIteration -> Merge)."""
from graph_engine.compiler.graph import CycleError, topo_sort


_MERGES = ("Merge", "RefMerge")


def is_back_edge(producer, consumer):
    return producer.op in ("NextIteration", "RefNextIteration") and consumer.op in _MERGES


def predecessors(node):
    """[(producer node, Value or None for a control edge)] without back edges."""
    if node.op not in _MERGES:                      # no back edge ends here: most nodes
        return [(v.node, v) for v in node.inputs] + [(p, None) for p in node.control_inputs]
    out = [(v.node, v) for v in node.inputs if not is_back_edge(v.node, node)]
    return out + [(p, None) for p in node.control_inputs if not is_back_edge(p, node)]


def producers(node):
    """The nodes of predecessors(node)."""
    if node.op not in _MERGES:
        return [v.node for v in node.inputs] + node.control_inputs
    return [p for p, _ in predecessors(node)]


def order(g):
    """Nodes producers-first over the DAG edges, stable in graph order (graph.topo_sort)."""
    try:
        return topo_sort(list(g.nodes.values()), producers)
    except CycleError as e:
        raise ValueError(f"graph has a cycle that is not a while loop's back edge, through "
                         f"{e.stuck}") from None


def components(starts, neighbours):
    """The connected components (sets) that the nodes `starts` are in, following
    neighbours(node) -> nodes, each once."""
    seen = set()
    for start in starts:
        if start in seen:
            continue
        component, stack = set(), [start]
        while stack:
            n = stack.pop()
            if n not in component:
                component.add(n)
                stack.extend(neighbours(n))
        seen |= component
        yield component
