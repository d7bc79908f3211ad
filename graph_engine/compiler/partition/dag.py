"""The partitioner's view of a (possibly cyclic) placed graph as a DAG: all data and control
edges except the back edges of lowered while loops (NextIteration -> Merge)."""
from graph_engine.compiler.graph import CycleError, topo_sort


def is_back_edge(producer, consumer):
    return producer.op in ("NextIteration", "RefNextIteration") and \
        consumer.op in ("Merge", "RefMerge")


def predecessors(node):
    """[(producer node, Value or None for a control edge)] without back edges."""
    out = [(v.node, v) for v in node.inputs if not is_back_edge(v.node, node)]
    return out + [(p, None) for p in node.control_inputs if not is_back_edge(p, node)]


def order(g):
    """Nodes producers-first over the DAG edges, stable in graph order (graph.topo_sort)."""
    try:
        return topo_sort(list(g.nodes.values()), lambda n: [p for p, _ in predecessors(n)])
    except CycleError as e:
        raise ValueError(f"graph has a cycle that is not a while loop's back edge, through "
                         f"{e.stuck}") from None
