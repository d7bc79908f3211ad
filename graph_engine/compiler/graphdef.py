"""tensorflow.GraphDef <-> GE graph IR.

Import resolves "x", "x:1" and "^x" input strings (producers may come after their consumers,
and lowered while loops are cyclic) and gives every output its dtype from the op's signature.
Ops this process does not know keep as many outputs as their consumers reference, dtype None.
Export writes the nodes back in order with their original attrs, data inputs before control.
"""
from tensorflow.core.framework import graph_pb2, node_def_pb2

from graph_engine.ops.errors import CompileError
from graph_engine.compiler.graph import Graph
from graph_engine.compiler.node import Node, Value
from graph_engine.compiler.signature import signature

_EXTRA_FIELDS = ("experimental_debug_info", "experimental_type")


def parse_input(ref):
    """'^x' -> ('x', -1); 'x:2' -> ('x', 2); 'x' -> ('x', 0)."""
    if ref.startswith("^"):
        return ref[1:], -1
    name, sep, index = ref.rpartition(":")
    if sep and index.isdigit():
        return name, int(index)
    return ref, 0


def _extras(nd):
    fields = [f for f in _EXTRA_FIELDS if nd.HasField(f)]
    if not fields:
        return None
    extra = node_def_pb2.NodeDef()
    for f in fields:
        getattr(extra, f).CopyFrom(getattr(nd, f))
    return extra


def node_from_def(nd, library=None):
    """A Node for NodeDef `nd`, inputs not yet connected."""
    sig = signature(nd.op, nd.attr, library)
    return Node(nd.name, nd.op, device=nd.device, attrs=nd.attr,    # Node copies the map
                output_dtypes=sig.output_dtypes if sig else (), extras=_extras(nd))


def import_graph_def(graph_def) -> Graph:
    if isinstance(graph_def, (bytes, bytearray, memoryview)):
        gd = graph_pb2.GraphDef()
        try:
            gd.ParseFromString(bytes(graph_def))
        except Exception as e:
            raise CompileError(f"request is not a serialized tensorflow.GraphDef: {e}") from None
        graph_def = gd
    library = graph_def.library if graph_def.HasField("library") else None
    g = Graph(library=library, versions=graph_def.versions if graph_def.HasField("versions")
              else None)
    for nd in graph_def.node:
        g.add(node_from_def(nd, library))
    for nd in graph_def.node:
        connect_inputs(g, g[nd.name], nd.input)
    for node in g.nodes.values():
        for v in node.outputs:
            v.origin = f"{node.name}:{v.index}"
    return g


def connect_inputs(g, node, refs):
    for ref in refs:
        name, index = parse_input(ref)
        producer = g.nodes.get(name)
        if producer is None:
            raise CompileError(f"input {ref!r} names no node of the graph", node.name, node.op)
        if index < 0:
            node.control_inputs.append(producer)
            continue
        while len(producer.outputs) <= index:          # op unknown to this process
            producer.outputs.append(Value(producer, len(producer.outputs)))
        node.inputs.append(producer.outputs[index])


def node_to_def(node) -> node_def_pb2.NodeDef:
    nd = node_def_pb2.NodeDef(name=node.name, op=node.op, device=node.device)
    nd.input.extend([v.ref for v in node.inputs] + ["^" + c.name for c in node.control_inputs])
    for k, v in node.attrs.items():
        nd.attr[k].CopyFrom(v)
    if node.extras is not None:
        nd.MergeFrom(node.extras)
    return nd


def export_graph_def(g: Graph) -> graph_pb2.GraphDef:
    gd = graph_pb2.GraphDef()
    gd.node.extend(node_to_def(n) for n in g.nodes.values())
    if g.library is not None:
        gd.library.CopyFrom(g.library)
    if g.versions is not None:
        gd.versions.CopyFrom(g.versions)
    return gd
