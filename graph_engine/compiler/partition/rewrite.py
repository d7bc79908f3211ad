"""Replaces each cluster with one NpuGraphOp node.

The node's `cluster` attr is the body: a GraphDef of `_Arg` nodes (one per distinct outside
value the members read), the members under their own names with devices cleared, a copy of each
distinct Const they read, and `_Retval` nodes (one per member output read outside). Consumers read
`cluster:i`; control inputs of members from outside become control inputs of the cluster node,
and control consumers of members depend on the cluster node.

Outside values whose contents the compiler needs (compile_time_values) come last, as the
node's `values` inputs: the kernel reads them at run time and compiles them in as constants.
Values that live in host memory on the other side cross as `host_args` / `host_results`
(host_input, host_output): int32 and control-flow predicates, which TF's kernels for devices
like the NPU keep in host memory, and values made or read on the CPU. A device-memory boundary
there would cost TF an asynchronous copy and an event poll each time: every iteration of a loop,
for its counter, its condition and what the loop body exchanges with the CPU.
"""
from tensorflow.core.framework import graph_pb2, types_pb2

from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.graph import unique_name
from graph_engine.compiler.graphdef import write_node_def
from graph_engine.compiler.kernel_attrs import split_inputs
from graph_engine.compiler.node import Node
from graph_engine.compiler.partition import variables_in_place
from graph_engine.compiler.partition.candidates import device_type
from graph_engine.compiler.partition.contexts import SWITCH
from graph_engine.compiler.passes.eliminate_common_subexpressions import attrs_key
from graph_engine.compiler.cluster_op import CLUSTER_OP, STATEFUL_CLUSTER_OP
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


# Inputs that TF's kernels for non-CPU devices take in host memory whatever the dtype: the
# predicates of control flow.
_HOST_PREDICATES = {"LoopCond": (0,), **dict.fromkeys(SWITCH, (1,))}


def host_input(v):
    """Whether outside Value `v` enters a cluster in host memory: int32 (TF keeps int32 on
    non-CPU devices in host memory: loop counters, shapes, indices) and values made on the CPU
    (TF hands a host tensor over without a device copy)."""
    return v.dtype == types_pb2.DT_INT32 or device_type(v.node.device) == "CPU"


def host_output(v, readers):
    """Whether cluster output `v` leaves in host memory, given its outside `readers` ((node,
    input index) pairs): int32, a control-flow predicate, or read on the CPU only."""
    if v.dtype == types_pb2.DT_INT32:
        return True
    if any(i in _HOST_PREDICATES.get(c.op, ()) for c, i in readers):
        return True
    return bool(readers) and all(device_type(c.device) == "CPU" for c, _ in readers)


MAX_COMPARED_CONST_BYTES = 4096


def first_equal_constants(consts):
    """Const node -> the first of `consts` with the same dtype and value (the compiler's CSE
    key), which the cluster body copies in for both. TF's graphs repeat constants (an optimizer's per-variable
    scalars, reduction axes, gradients' shapes): a quarter of DenseNet121's training cluster,
    which would otherwise be written, read back and merged again by the compiler. Values over
    MAX_COMPARED_CONST_BYTES are not compared (serializing them costs more than they save)."""
    first, copy_of = {}, {}
    for c in consts:
        if c.attrs["value"].ByteSize() > MAX_COMPARED_CONST_BYTES:
            copy_of[c] = c
            continue
        copy_of[c] = first.setdefault(attrs_key(c), c)
    return copy_of


def control_sources(p, cloneable):
    """What a control edge from p waits for: a cloneable Const computes nothing, its own control
    inputs order (as clusters.form_clusters sees the edge); one of them in the cluster must not
    become the cluster node's own control input. (Module level: a recursive closure is a
    reference cycle, and the IR goes by reference counting.)"""
    if p not in cloneable:
        return [p]
    return [q for c in p.control_inputs for q in control_sources(c, cloneable)]


def cluster_body(g, members, outputs, cloneable=frozenset(), inputs=None, host_memory=None):
    """The body of a cluster of `members` (nodes of Graph `g`, in order) that computes Values
    `outputs`: a GraphDef of `_Arg` nodes, the members under their own names with devices
    cleared, a copy of each distinct `cloneable` Const they read (first_equal_constants) and
    one `_Retval` per output.

    The _Args are the outside Values the members read, compile-time values (see
    compile_time_values) last; or, given `inputs`, exactly those Values in that order, read or
    not, none of them compile-time (npu-atc: a signature's inputs). Control edges between
    members stay; control inputs from outside become the cluster node's.

    `host_memory(v)` (optional) marks the outside Values read in host memory: their _Args come
    after the others and before the compile-time values.

    Returns (body, the Values the _Args stand for in index order, how many of them (the last
    ones) are compile-time values, control input Nodes for the cluster node, Consts copied in).
    """
    member_set = set(members)
    clones = list(dict.fromkeys(v.node for n in members for v in n.inputs
                                if v.node not in member_set and v.node in cloneable))
    copy_of = first_equal_constants(clones)
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

    member_inputs = []                        # NodeDef input strings per member
    for n in members:
        refs = [v.ref if v.node in member_set else copy_of[v.node].name if v.node in copy_of
                else arg_for(v) for v in n.inputs]
        for p in dict.fromkeys(q for c in n.control_inputs
                               for q in control_sources(c, cloneable)):
            if p in member_set:
                refs.append("^" + p.name)
            elif p not in controls:
                controls.append(p)
        member_inputs.append(refs)
    for const in clones:                      # its control inputs move to the cluster node
        if copy_of[const] is const:
            write_node_def(body.node.add(), const, [], "")
        controls.extend(p for p in control_sources(const, cloneable)
                        if p not in member_set and p not in controls)
    if inputs is not None:
        arg_values = list(inputs)
    else:
        data = [v for v in args if v not in values]
        if host_memory is not None:
            data.sort(key=host_memory)        # stable: device memory first, then host memory
        arg_values = data + values
    for i, v in enumerate(arg_values):
        a = body.node.add(name=args[v], op="_Arg")
        a.attr["T"].CopyFrom(attr_util.make(type=v.dtype))
        a.attr["index"].CopyFrom(attr_util.make(i))
    for n, refs in zip(members, member_inputs):
        write_node_def(body.node.add(), n, refs, "")
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


def replace_cluster(g, members, name, options_json, users, cloneable, index=None):
    """The NpuGraphOp for `members`: (node, {member Value: node output}, Consts copied in,
    ReadVariableOps it replaced, to be removed). With `index` (variables_in_place.GraphIndex),
    variables the cluster may update in place come in as handles, after the other data
    inputs."""
    member_set = set(members)
    outputs = cluster_outputs(members, users)
    host_out = {v: host_output(v, [(c, i) for c, i in users.get(v, ()) if c not in member_set])
                for v in outputs}
    outputs.sort(key=host_out.get)        # stable: results, then host_results
    in_place, merged = variables_in_place.updates(members, outputs, index) if index else ({}, {})
    for n in members:                     # one read per variable
        n.inputs = [merged.get(v, v) for v in n.inputs]
    body, inputs, n_values, controls, clones = cluster_body(
        g, members, outputs, cloneable,
        host_memory=lambda v: 2 if v in in_place else int(host_input(v)))
    data = inputs[:len(inputs) - n_values]
    variables = [v for v in data if v in in_place]
    for v in [*variables, *merged]:       # the cluster reads the variable where the read did
        controls.extend(c for c in v.node.control_inputs if c not in controls)
    n_host_in = sum(map(host_input, data))
    n_host_out = sum(host_out.values())
    node = Node(name, STATEFUL_CLUSTER_OP if variables else CLUSTER_OP, device=members[0].device,
                inputs=[in_place[v][0] if v in in_place else v for v in inputs],
                control_inputs=controls, output_dtypes=[v.dtype for v in outputs])
    n_args, n_results = len(data) - n_host_in - len(variables), len(outputs) - n_host_out
    node.set_attr("Tin", types=[v.dtype for v in data[:n_args]])
    node.set_attr("Thost_in", types=[v.dtype for v in data[n_args:len(data) - len(variables)]])
    node.set_attr("Tvalues", types=[v.dtype for v in inputs[len(data):]])
    node.set_attr("Tout", types=[v.dtype for v in outputs[:n_results]])
    node.set_attr("Thost_out", types=[v.dtype for v in outputs[n_results:]])
    if variables:
        node.set_attr("Nvariables", len(variables))
        node.set_attr("variable_dtypes", types=[v.dtype for v in variables])
        node.set_attr("variable_updates", [-1 if in_place[v][1] is None
                                           else outputs.index(in_place[v][1]) for v in variables])
    node.set_attr("cluster", body.SerializeToString())
    node.set_attr("cluster_name", name)
    node.set_attr("options", options_json)
    taken = [v.node for v in [*variables, *merged] if not variables_in_place.kept(v.node)]
    return node, dict(zip(outputs, node.outputs)), clones, taken
