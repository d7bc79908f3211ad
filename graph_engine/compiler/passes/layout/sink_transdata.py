"""Moves TransData across layout-agnostic elementwise ops when that lets conversions die or
cancel, so an elementwise op between two NC1HWC0 regions runs in NC1HWC0 too.

An ND elementwise op whose non-constant NC1HWC0-capable inputs all come from
TransData(NC1HWC0 -> ND) runs on the NC1HWC0 values instead (constants get conversions that
fold); its readers that wanted NC1HWC0 read it directly and one TransData serves the ND ones.
This is done when an input conversion then dies (sinking) or, for a single such input, when
all readers wanted NC1HWC0 (hoisting the conversion out of their way), so the count never
grows.
"""
from graph_engine import ops
from graph_engine.ops.formats import Format
from graph_engine.compiler.passes.layout import support
from graph_engine.compiler.passes.layout.insert_transdata import transdata


def _from_5hd(v):
    n = v.node
    return n.op == "TransData" and n.attr("src_format") == Format.NC1HWC0 and \
        n.attr("dst_format") == Format.ND


def _to_5hd(node):
    return node.op == "TransData" and node.attr("src_format") == Format.ND and \
        node.attr("dst_format") == Format.NC1HWC0


def _movable(node):
    return ((ops.has(node.op, "layout_agnostic") or node.op == "NpuElementwise")
            and not support.is_5hd(node) and support.can_run_5hd(node))


def _convert(g, node, users):
    """Runs `node` on the NC1HWC0 sources of its TransData inputs; ND readers get a TransData."""
    for i, fmt in support.input_formats(node).items():
        v = node.inputs[i]
        if fmt == Format.NC1HWC0:
            node.inputs[i] = v.node.inputs[0] if _from_5hd(v) else transdata(g, v, None, fmt).outputs[0]
    support.mark(node)
    out = node.outputs[0]
    readers = list(users.get(out, ()))
    out.format = Format.NC1HWC0
    back = None
    for r, i in readers:
        if _to_5hd(r):
            g.replace_uses(r.outputs[0], out)
        else:
            back = back or transdata(g, out, Format.NC1HWC0, None)
            r.inputs[i] = back.outputs[0]


def run(c):
    g = c.graph
    sunk = hoisted = 0
    changed = True
    while changed:
        changed = False
        users = g.data_consumers()
        for node in g.topo_order():
            if not _movable(node):
                continue
            fmts = support.input_formats(node)
            srcs = [node.inputs[i] for i, f in fmts.items()
                    if f == Format.NC1HWC0 and node.inputs[i].const is None]
            if not srcs or not all(_from_5hd(v) for v in srcs):
                continue      # constants are fine: their TransData folds
            dying = sum({u for u, _ in users[v]} == {node} for v in set(srcs))
            readers = users.get(node.outputs[0], ())
            all_to_5hd = readers and all(_to_5hd(r) for r, _ in readers)
            if dying or (len(srcs) == 1 and all_to_5hd):
                _convert(g, node, users)
                sunk += bool(dying)
                hoisted += not dying
                changed = True
                break
    return {"sunk": sunk, "hoisted": hoisted}
