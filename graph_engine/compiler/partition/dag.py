"""The partitioner's view of a (possibly cyclic) placed graph as a DAG: all data and control
edges except the back edges of lowered while loops (NextIteration -> Merge)."""
import heapq


def is_back_edge(producer, consumer):
    return producer.op in ("NextIteration", "RefNextIteration") and \
        consumer.op in ("Merge", "RefMerge")


def predecessors(node):
    """[(producer node, Value or None for a control edge)] without back edges."""
    out = [(v.node, v) for v in node.inputs if not is_back_edge(v.node, node)]
    return out + [(p, None) for p in node.control_inputs if not is_back_edge(p, node)]


def order(g):
    """Nodes producers-first over the DAG edges, stable in graph order."""
    nodes = list(g.nodes.values())
    position = {n: i for i, n in enumerate(nodes)}
    succ = {n: [] for n in nodes}
    pending = {}
    for n in nodes:
        preds = {p for p, _ in predecessors(n)}
        pending[n] = len(preds)
        for p in preds:
            succ[p].append(n)
    heap = [position[n] for n in nodes if pending[n] == 0]
    heapq.heapify(heap)
    result = []
    while heap:
        n = nodes[heapq.heappop(heap)]
        result.append(n)
        for s in succ[n]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(heap, position[s])
    if len(result) != len(nodes):
        stuck = sorted(n.name for n in nodes if pending[n] > 0)[:5]
        raise ValueError(f"graph has a cycle that is not a while loop's back edge, through {stuck}")
    return result
