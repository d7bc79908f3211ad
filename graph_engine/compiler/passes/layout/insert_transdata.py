"""Gives the nodes assign_formats marked their output format, then adds a TransData wherever
a value's storage format differs from the one its reader wants: NC1HWC0 / FRACTAL_Z inputs of
marked nodes, ND inputs of every other node and of the graph outputs. One TransData per
(value, format), shared by all its readers."""
from graph_engine.compiler.node import Node
from graph_engine.compiler.passes.layout import support
from graph_engine.ops.formats import Format
from graph_engine.ops.layout import TransData


def transdata(g, v, src, dst, name=None):
    """A new TransData node reading `v` (stored `src`), its output stored `dst`."""
    src, dst = Format(src or Format.ND), Format(dst or Format.ND)
    node = g.add(Node(g.unique_name(name or f"{v.node.name}/trans_{src.name}_{dst.name}"), "TransData",
                      device=v.node.device, inputs=[v], output_dtypes=[v.dtype]))
    node.set_attr("T", type=v.dtype)
    node.set_attr("src_format", int(src))
    node.set_attr("dst_format", int(dst))
    out = node.outputs[0]
    out.shape = TransData().shapes([v.shape], {"src_format": src, "dst_format": dst})[0]
    out.format = None if dst == Format.ND else dst
    return node


def wanted(node):
    """{input position: format} the node reads its data inputs in."""
    if support.is_5hd(node):
        return support.input_formats(node)
    if node.op == "TransData":
        return {}
    return {i: None for i in support.data_positions(node)}


def run(c):
    g = c.graph
    made = {}
    for node in g:
        if support.is_5hd(node) and node.outputs[0].format is None:
            node.outputs[0].format = support.output_format(node)
    for node in list(g):
        for i, fmt in wanted(node).items():
            v = node.inputs[i]
            if (v.format or None) == (fmt or None):
                continue
            key = (v, fmt)
            if key not in made:
                made[key] = transdata(g, v, v.format, fmt).outputs[0]
            node.inputs[i] = made[key]
    return {"inserted": len(made)}
