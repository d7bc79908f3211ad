"""Chooses the nodes that run in NC1HWC0.

Candidates are nodes with an NC1HWC0 kernel (support.can_run_5hd). Candidates joined by an
activation edge (a producer writing NC1HWC0 into an input its consumer reads as NC1HWC0) form
regions. A region is worth it when its boundary -- the distinct activation conversions into
and out of it, filters not counted (they fold away for constants, and are per-step work
otherwise) -- needs at most two TransData, and those between the region and other compute
(not at a graph input or output) number at most its convolutions. A CNN body (one conversion
in, at most one out) qualifies; the forward half of a training graph, whose activations ND
gradient kernels read again, does not, and neither does a lone convolution between two ND
ops (two conversions for nothing).
It only marks nodes: insert_transdata gives them their formats and conversions, so switching
that pass off leaves a valid all-ND graph.
"""
from graph_engine.compiler.passes.layout import absorb_transposes, support
from graph_engine.compiler.passes.layout.absorb_transposes import TO_NCHW, TO_NHWC

MAX_BOUNDARY = 2       # one conversion in, one out: a CNN body


def _regions(candidates, users):
    """Connected components of candidates over NC1HWC0 activation edges."""
    parent = {n: n for n in candidates}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in candidates:
        for i, fmt in support.input_formats(n).items():
            p = n.inputs[i].node
            if fmt == support.NC1HWC0 and p in candidates and \
                    support.output_format(p) == support.NC1HWC0 and n.inputs[i].index == 0:
                parent[find(n)] = find(p)
    groups = {}
    for n in candidates:
        groups.setdefault(find(n), set()).add(n)
    return list(groups.values())


def _boundary(region, users):
    """(activation conversions the region needs, those of them that are not at a graph input
    or output but between the region and other compute)."""
    edges = {}
    for n in region:
        for i, fmt in support.input_formats(n).items():
            v = n.inputs[i]
            if fmt == support.NC1HWC0 and v.node not in region and v.const is None:
                src = v.node
                if _layout_transpose(src, TO_NHWC):         # absorb_transposes folds it
                    src = src.inputs[0].node
                edges[v] = src.op != "_Arg"
        if support.output_format(n) == support.NC1HWC0:
            for v in n.outputs:
                outside = [u for u, _ in users.get(v, ()) if u not in region]
                if outside:
                    edges[v] = not all(_graph_output(u, users) for u in outside)
    return len(edges), sum(edges.values())


def _layout_transpose(node, perm):
    return node.op == "Transpose" and absorb_transposes.perm(node) == perm


def _graph_output(node, users):
    """A _Retval, or an NCHW Transpose that only graph outputs read."""
    if _layout_transpose(node, TO_NCHW):
        return all(u.op == "_Retval" for u, _ in users.get(node.outputs[0], ()))
    return node.op == "_Retval"


def run(c):
    g = c.graph
    users = g.data_consumers()
    candidates = {n for n in g if support.can_run_5hd(n)}
    marked = rejected = 0
    for region in _regions(candidates, users):
        convs = sum(n.op in support.CONVOLUTIONS for n in region)
        total, internal = _boundary(region, users)
        if convs == 0 or total > MAX_BOUNDARY or internal > convs:
            rejected += len(region)
            continue
        for n in region:
            support.mark(n)
        marked += len(region)
    return {"nc1hwc0_nodes": marked, "kept_nd": rejected}
