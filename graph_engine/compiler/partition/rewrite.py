"""Replaces each cluster with one NpuGraphOp node.

The node's `cluster` attr is the body: a GraphDef of `_Arg` nodes (one per distinct outside
value the members read), the members under their own names with devices cleared, copies of the
Consts they read, and `_Retval` nodes (one per member output read outside). Consumers read
`cluster:i`; control inputs of members from outside become control inputs of the cluster node,
and control consumers of members depend on the cluster node.

Outside values whose contents the compiler needs (compile_time_values) come last, as the
node's `values` inputs: the kernel reads them at run time and compiles them in as constants.
"""
from tensorflow.core.framework import graph_pb2

from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.graph import unique_name
from graph_engine.compiler.graphdef import node_to_def
from graph_engine.compiler.kernel_attrs import split_inputs
from graph_engine.compiler.node import Node
from graph_engine.ops.base import Op


def _shape_only(op):
    """The op's result follows from its inputs' shapes alone (Shape, Size, ZerosLike ...)."""
    return type(op).value_from_shapes is not Op.value_from_shapes


def compile_time_values(members, cloneable):
    """Outside values whose contents the cluster needs at compile time: those that reach a
    member's compile-time-constant input (shape, axis, perm, range limit ...) through members
    that compute from contents, not from shapes alone. In graph order."""
    member_set = set(members)
    stack = [v for n in members for v in split_inputs(n, ops.get(n.op))[1].values()]
    seen, needed = set(), set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.node in cloneable:
            continue
        if v.node not in member_set:
            needed.add(v)
        elif not _shape_only(ops.get(v.node.op)):
            stack.extend(v.node.inputs)
    return list(dict.fromkeys(v for n in members for v in n.inputs if v in needed))


def cluster_body(g, members, outputs, cloneable=frozenset(), inputs=None):
    """The body of a cluster of `members` (nodes of Graph `g`, in order) that computes Values
    `outputs`: a GraphDef of `_Arg` nodes, the members under their own names with devices
    cleared, copies of the `cloneable` Consts they read and one `_Retval` per output.

    The _Args are the outside Values the members read, compile-time values (see
    compile_time_values) last; or, given `inputs`, exactly those Values in that order, read or
    not, none of them compile-time (npu-atc: a signature's inputs). Control edges between
    members stay; control inputs from outside become the cluster node's.

    Returns (body, the Values the _Args stand for in index order, how many of them (the last
    ones) are compile-time values, control input Nodes for the cluster node, Consts copied in).
    """
    member_set = set(members)
    clones = list(dict.fromkeys(v.node for n in members for v in n.inputs
                                if v.node not in member_set and v.node in cloneable))
    taken = {n.name for n in members} | {c.name for c in clones}

    def reserve(base):
        name = unique_name(base, taken)
        taken.add(name)
        return name

    values = compile_time_values(members, cloneable) if inputs is None else []
    args, controls = {}, []
    body = graph_pb2.GraphDef()
    if g.versions is not None:
        body.versions.CopyFrom(g.versions)

    def arg_for(v):
        if v not in args:
            if inputs is not None:
                raise ValueError(f"cluster member reads {v.ref}, which is not one of its inputs")
            args[v] = reserve(f"_arg_{len(args)}")
        return args[v]

    for v in inputs if inputs is not None else values:   # named first (see the loop below)
        args[v] = reserve(f"_arg_{len(args)}")

    member_defs = []
    for n in members:
        nd = node_to_def(n)
        nd.device = ""
        del nd.input[:]
        for v in n.inputs:
            if v.node in member_set or v.node in cloneable:
                nd.input.append(v.ref)
            else:
                nd.input.append(arg_for(v))
        for p in n.control_inputs:
            if p in member_set:
                nd.input.append("^" + p.name)
            elif p not in controls:
                controls.append(p)
        member_defs.append(nd)
    for const in clones:
        cd = node_to_def(const)
        cd.device = ""
        del cd.input[:]                       # its control inputs move to the cluster node
        controls.extend(p for p in const.control_inputs if p not in controls)
        body.node.append(cd)
    arg_values = list(inputs) if inputs is not None else \
        [v for v in args if v not in values] + values
    for i, v in enumerate(arg_values):
        a = body.node.add(name=args[v], op="_Arg")
        a.attr["T"].CopyFrom(attr_util.make(type=v.dtype))
        a.attr["index"].CopyFrom(attr_util.make(i))
    body.node.extend(member_defs)
    for i, v in enumerate(outputs):
        r = body.node.add(name=reserve(f"_retval_{i}"), op="_Retval",
                          input=[args[v] if v in args else v.ref])
        r.attr["T"].CopyFrom(attr_util.make(type=v.dtype))
        r.attr["index"].CopyFrom(attr_util.make(i))
    return body, arg_values, len(values), controls, clones


def cluster_outputs(members, users):
    """Member outputs read by data consumers outside the cluster, in member order."""
    member_set = set(members)
    return [v for n in members for v in n.outputs
            if any(c not in member_set for c, _ in users.get(v, ()))]


def replace_cluster(g, members, name, options_json, users, cloneable):
    """The NpuGraphOp for `members`: (node, {member Value: node output}, Consts copied in)."""
    outputs = cluster_outputs(members, users)
    body, inputs, n_values, controls, clones = cluster_body(g, members, outputs, cloneable)
    n_args = len(inputs) - n_values
    node = Node(name, "NpuGraphOp", device=members[0].device, inputs=inputs,
                control_inputs=controls, output_dtypes=[v.dtype for v in outputs])
    node.set_attr("Tin", types=[v.dtype for v in inputs[:n_args]])
    node.set_attr("Tvalues", types=[v.dtype for v in inputs[n_args:]])
    node.set_attr("Tout", types=[v.dtype for v in outputs])
    node.set_attr("cluster", body.SerializeToString())
    node.set_attr("cluster_name", name)
    node.set_attr("options", options_json)
    return node, dict(zip(outputs, node.outputs)), clones
