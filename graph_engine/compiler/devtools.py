"""Developer tools that check the compiler and kernels against TensorFlow: build eager op and
cluster compile requests the way TF builds them, place a traced graph on the NPU as TF would,
and run partitioned graphs (clusters through compile_model and the reference executor).

The tests share them with the op-coverage report (npu_device/tools/op_coverage.py), the
precision comparison (precision_compare.py) and the fuzzer (tools/fuzz). Nothing on the compile
path imports this module.

    nd, inputs = op_request("Conv2D", {"input": x, "filter": w}, strides=[1, 1, 1, 1], padding="SAME")
    outputs = reference_executor.run(compile_model(nd.SerializeToString()), inputs)

    gd = place(concrete_function.graph.as_graph_def(), fetches=[...])   # as if TF placed it on NPU
"""
import numpy as np
from tensorflow.core.framework import node_def_pb2

from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.partition.candidates import PRESERVE_ATTR
from graph_engine.compiler.cluster_op import CLUSTER_OPS
from graph_engine.compiler.signature import signature

NPU = "/job:localhost/replica:0/task:0/device:NPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def op_request(op_type, inputs, **attrs):
    """An eager compile request for `op_type` built the way TF builds the NodeDef (all attrs,
    defaults included). `inputs` maps the tf.raw_ops argument names to arrays (lists of arrays
    for list args). Returns (NodeDef, model inputs in order)."""
    import tensorflow as tf
    arrays = {}
    with tf.Graph().as_default() as graph:
        kwargs = {}
        for name, value in inputs.items():
            items = value if isinstance(value, (list, tuple)) else [value]
            tensors = []
            for j, a in enumerate(items):
                t = tf.constant(a, name=f"in_{name}_{j}")
                arrays[t.op.name] = np.asarray(a)
                tensors.append(t)
            kwargs[name] = tensors if isinstance(value, (list, tuple)) else tensors[0]
        getattr(tf.raw_ops, op_type)(**kwargs, **attrs)
        op = graph.get_operations()[-1]
        nd = node_def_pb2.NodeDef()
        nd.CopyFrom(op.node_def)
    const_args = ops.get(op_type).const_inputs if ops.get(op_type) else ()
    names = signature(nd.op, nd.attr).input_names
    shapes, const_idx, const_val, model_inputs = [], [], [], []
    for i, (ref, arg) in enumerate(zip(nd.input, names)):
        a = arrays[ref.split(":")[0]]
        shapes.append(list(a.shape))
        if arg in const_args:
            const_idx.append(i)
            const_val.append(attr_util.numpy_to_tensor(a, nd.attr[_type_attr(nd, arg)].type
                                                       if _type_attr(nd, arg) else None))
        else:
            model_inputs.append(a)
    del nd.input[:]
    nd.attr["_input_shapes"].CopyFrom(attr_util.make(shapes=shapes))
    if const_idx:
        nd.attr["_const_input_indices"].CopyFrom(attr_util.make(const_idx))
        nd.attr["_const_inputs"].list.tensor.extend(const_val)
    return nd, model_inputs


def _type_attr(nd, arg):
    from graph_engine.compiler.signature import op_def
    for a in op_def(nd.op).input_arg:
        if a.name == arg:
            return a.type_attr or None
    return None


def place(graph_def, device=NPU, fetches=(), cpu_ops=()):
    """A copy of `graph_def` placed as TF's placer would with the NPU plugin loaded: every
    node on `device` except ops in `cpu_ops` (on CPU); `fetches` marked as preserved the way
    the plugin marks Grappler's fetch nodes."""
    from tensorflow.core.framework import graph_pb2
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_def)
    for n in gd.node:
        n.device = CPU if n.op in cpu_ops else device
        if n.name in fetches:
            n.attr[PRESERVE_ATTR].b = True
    return gd


def cluster_request(cluster_node, input_arrays):
    """An NpuGraphOp NodeDef from a partitioned graph with `_input_shapes` for `input_arrays`."""
    nd = node_def_pb2.NodeDef()
    nd.CopyFrom(cluster_node)
    del nd.input[:]
    nd.attr["_input_shapes"].CopyFrom(attr_util.make(shapes=[list(np.shape(a))
                                                              for a in input_arrays]))
    n_values = len(nd.attr["Tvalues"].list.type) if "Tvalues" in nd.attr else 0
    for a in input_arrays[len(input_arrays) - n_values:]:    # `values` inputs: compiled in
        nd.attr["_const_inputs"].list.tensor.add().CopyFrom(tf_make_tensor_proto(a))
    return nd


def tf_make_tensor_proto(a):
    import tensorflow as tf
    return tf.make_tensor_proto(np.asarray(a))


def single_cluster(fn, args, options=None):
    """Traces fn for `args`, places it on the NPU and partitions it with the compile options
    `options` (None: the defaults); returns (the NpuGraphOp node, its input arrays, [cluster
    output index per fetch]). CompileError unless it forms exactly one cluster that produces
    every fetch."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    from graph_engine.compiler.api import partition_graph
    from graph_engine.ops.errors import CompileError
    cf = tf.function(fn).get_concrete_function(
        *[tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args])
    fetches = [t.op.name for t in cf.outputs]
    gd = place(cf.graph.as_graph_def(), fetches=fetches)
    out = graph_pb2.GraphDef.FromString(partition_graph(gd.SerializeToString(), options))
    clusters = [n for n in out.node if n.op in CLUSTER_OPS]
    if len(clusters) != 1:
        raise CompileError(f"needs a function that forms one NPU cluster; it forms "
                           f"{len(clusters)}")
    placeholders = [n.name for n in gd.node if n.op == "Placeholder"]
    inputs = [np.asarray(args[placeholders.index(ref)]) for ref in clusters[0].input]
    by_name = {n.name: n for n in out.node}
    routes = []
    for name in fetches:
        ref = by_name[name].input[0]
        if ref.split(":")[0] != clusters[0].name:
            raise CompileError(f"fetch {name!r} does not come from the cluster")
        routes.append(int(ref.split(":")[1]) if ":" in ref else 0)
    return clusters[0], inputs, routes


def run_graph(graph_def, feeds, fetches, variables=None):
    """Runs a (partitioned) GraphDef with TensorFlow on CPU, each NpuGraphOp through
    compile_model and the reference executor (as an EagerPyFunc) -- a partitioned graph checked
    end to end without the C++ plugin.

    feeds: {placeholder name: array}; fetches: tensor names ("x", "x:1").
    variables: {resource placeholder name: initial value}: those placeholders (a FuncGraph's
    captured variables) become real variables. Returns (fetched arrays, {name: final value}).
    """
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.ops import script_ops

    variables = {k: np.asarray(v) for k, v in (variables or {}).items()}
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_def)
    funcs, tokens = [], []      # the py-func registry holds weak references: keep them alive
    added = []                  # nodes the clusters need (reads of the variables they update)
    try:
        for n in gd.node:
            n.device = ""
            if n.op in CLUSTER_OPS:
                funcs.append(_cluster_as_py_func(n, added))
                tokens.append(script_ops._py_funcs.insert(funcs[-1]))
                n.attr["token"].s = tokens[-1].encode()
            elif n.name in variables:
                _placeholder_as_variable(n, variables[n.name])
        gd.node.extend(added)
        with tf.Graph().as_default() as graph:
            tf.graph_util.import_graph_def(gd, name="")
            handles = {k: graph.get_tensor_by_name(k + ":0") for k in variables}
            inits = [tf.raw_ops.AssignVariableOp(resource=h, value=variables[k])
                     for k, h in handles.items()]
            reads = {k: tf.raw_ops.ReadVariableOp(resource=h, dtype=variables[k].dtype)
                     for k, h in handles.items()}
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(inits)
                out = sess.run([f if ":" in f else f + ":0" for f in fetches],
                               {k + ":0": v for k, v in feeds.items()})
                final = sess.run(reads)
    finally:
        for token in tokens:
            script_ops._py_funcs.remove(token)
    return out, final


def _cluster_as_py_func(n, added=None):
    """Turns NpuGraphOp NodeDef `n` into an EagerPyFunc (the caller sets its token) that compiles
    its cluster for the actual input shapes and runs it on the reference executor. The variables
    the cluster reads itself are read for it by ReadVariableOps appended to `added` (the
    reference executor writes nothing in place: AssignVariableOp stores the new values)."""
    import tensorflow as tf
    from tensorflow.python.ops import script_ops

    from graph_engine.compiler import reference_executor
    from graph_engine.compiler.compile import compile_model

    cluster = node_def_pb2.NodeDef.FromString(n.SerializeToString())

    # Inputs: args, host_args, variables, values; outputs: results, host_results (their order
    # in the body).
    n_args = len(n.attr["Tin"].list.type) + len(n.attr["Thost_in"].list.type)
    variable_dtypes = list(n.attr["variable_dtypes"].list.type) if "variable_dtypes" in n.attr else []
    if variable_dtypes and added is None:
        raise ValueError(f"cluster {n.name} reads variables: pass `added` for their reads")
    data = [i for i in n.input if not i.startswith("^")]
    for k, dtype in enumerate(variable_dtypes):
        read = node_def_pb2.NodeDef(name=f"{n.name}/variable_{k}", op="ReadVariableOp",
                                    input=[data[n_args + k]])
        read.attr["dtype"].type = dtype
        data[n_args + k] = read.name
        added.append(read)
    n.input[:] = data + [i for i in n.input if i.startswith("^")]
    n_model = n_args + len(variable_dtypes)

    def run_cluster(*tensors):
        arrays = [t.numpy() for t in tensors]
        return reference_executor.run(
            compile_model(cluster_request(cluster, arrays).SerializeToString()), arrays[:n_model])

    tin, tout = n.attr["Tin"], n.attr["Tout"]
    tin.list.type.extend(n.attr["Thost_in"].list.type)
    tin.list.type.extend(variable_dtypes)
    tin.list.type.extend(n.attr["Tvalues"].list.type)
    tout.list.type.extend(n.attr["Thost_out"].list.type)
    n.op = "EagerPyFunc"
    n.ClearField("attr")
    n.attr["is_async"].b = False
    n.attr["Tin"].CopyFrom(tin)
    n.attr["Tout"].CopyFrom(tout)
    return script_ops.EagerFunc(run_cluster, [tf.as_dtype(t) for t in tout.list.type], False)


def _placeholder_as_variable(n, value):
    import tensorflow as tf
    n.op = "VarHandleOp"
    n.ClearField("attr")
    n.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    n.attr["shape"].shape.CopyFrom(attr_util.shape_proto(value.shape))
    n.attr["shared_name"].s = f"run_graph/{n.name}".encode()
    n.attr["container"].s = b""
