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
    if not any(map(nd.HasField, _EXTRA_FIELDS)):      # most nodes: no list, no copy
        return None
    fields = [f for f in _EXTRA_FIELDS if nd.HasField(f)]
    extra = node_def_pb2.NodeDef()
    for f in fields:
        getattr(extra, f).CopyFrom(getattr(nd, f))
    return extra


def node_from_def(nd, library=None):
    """A Node for NodeDef `nd`, inputs not yet connected."""
    sig = signature(nd.op, nd.attr, library)
    node = Node(nd.name, nd.op, device=nd.device, attrs=nd.attr,    # Node copies the map
                output_dtypes=sig.output_dtypes if sig else (), extras=_extras(nd))
    node.source = (nd, dict(node.attrs))
    return node


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
    defs = list(graph_def.node)
    nodes = [g.add(node_from_def(nd, library)) for nd in defs]
    for node, nd in zip(nodes, defs):
        connect_inputs(g, node, nd.input)
    for node in g.nodes.values():
        for v in node.outputs:
            v.origin = f"{node.name}:{v.index}"
    return g


def connect_inputs(g, node, refs):
    nodes = g.nodes
    for ref in refs:
        if ":" not in ref and ref[:1] != "^":       # "x", output 0: most inputs, parsed here
            producer = nodes.get(ref)
            if producer is not None and producer.outputs:
                node.inputs.append(producer.outputs[0])
                continue
        name, index = parse_input(ref)
        producer = nodes.get(name)
        if producer is None:
            raise CompileError(f"input {ref!r} names no node of the graph", node.name, node.op)
        if index < 0:
            node.control_inputs.append(producer)
            continue
        while len(producer.outputs) <= index:          # op unknown to this process
            producer.outputs.append(Value(producer, len(producer.outputs)))
        node.inputs.append(producer.outputs[index])


def input_refs(node):
    """The NodeDef input strings of `node`: data inputs, then "^control" inputs."""
    return [v.ref for v in node.inputs] + ["^" + c.name for c in node.control_inputs]


def write_node_def(nd, node, inputs, device):
    """Writes `node` into the empty NodeDef `nd` (say, a new element of a GraphDef's node list:
    no copy of a finished NodeDef), with input strings `inputs` on `device`."""
    if node.source is not None and node.attrs == node.source[1]:
        # Attrs (the same protos) and extras as imported: one copy of the NodeDef instead of
        # one per attr. (dict == compares identical values without comparing the protos.)
        nd.CopyFrom(node.source[0])
        del nd.input[:]
    else:
        for k, v in node.attrs.items():
            nd.attr[k].CopyFrom(v)
        if node.extras is not None:
            nd.MergeFrom(node.extras)
    nd.name, nd.op, nd.device = node.name, node.op, device
    nd.input.extend(inputs)
    return nd


def export_graph_def(g: Graph) -> graph_pb2.GraphDef:
    gd = graph_pb2.GraphDef()
    for n in g.nodes.values():
        write_node_def(gd.node.add(), n, input_refs(n), n.device)
    if g.library is not None:
        gd.library.CopyFrom(g.library)
    if g.versions is not None:
        gd.versions.CopyFrom(g.versions)
    return gd
