"""compile_model: a compile request (a NodeDef) -> a compiled model (bytes).

The request is a serialized tensorflow.NodeDef with attr `_input_shapes` (list(shape), concrete):
  * op NpuGraphOp: compiles its `cluster` body (a GraphDef with _Arg/_Retval), one input
    shape per _Arg, with the `options` JSON captured at partition time;
  * any other op (eager): the node itself; attrs `_const_input_indices` (list(int)) and
    `_const_inputs` (list(tensor)) give the compile-time-constant inputs by position; the other
    inputs, in order, are the model inputs; all of the op's outputs are model outputs.
    `_input_shapes` has one shape per op input (constant ones included) or one per model input.
Nothing is cached here: the TF plugin keeps the models it loaded (keyed by the NpuGraphOp's
`cluster_key`, or the eager op and its signature) and npu_device's bridge the disk cache.
"""
import collections
import dataclasses
import json
import threading
import time

from tensorflow.core.framework import node_def_pb2

from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler import gc_pause
from graph_engine.compiler import model_format
from graph_engine.compiler.options import or_defaults
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.graph import Graph
from graph_engine.compiler.graphdef import import_graph_def, parse_input
from graph_engine.compiler.node import Node
from graph_engine.compiler.pass_manager import Compilation
from graph_engine.compiler.pipeline import pipeline
from graph_engine.compiler.cluster_op import CLUSTER_OPS
from graph_engine.compiler.signature import signature

_lock = threading.Lock()
# What the last compiles produced, for reports: (metadata JSON, seconds). Kept as text, which
# the cyclic GC does not track: as dicts, 64 large models' metadata were thousands of objects
# that every full collection of the user's process walked.
_recent = collections.deque(maxlen=64)


def recent_compiles():
    """The newest compiles (newest last): each the model's metadata (passes, kernels, memory
    plan; see serialize.py) plus `compile_seconds`."""
    with _lock:
        recent = list(_recent)
    return [dict(json.loads(text), compile_seconds=seconds) for text, seconds in recent]


def _input_shapes(nd):
    if "_input_shapes" not in nd.attr:
        raise CompileError("compile request lacks attr _input_shapes (one concrete shape per "
                           "input)", nd.name, nd.op)
    shapes = attr_util.to_python(nd.attr["_input_shapes"])
    for i, s in enumerate(shapes):
        if s is None or any(d < 0 for d in s):
            raise CompileError(f"_input_shapes[{i}] = {s} is not a concrete shape", nd.name, nd.op)
    return [tuple(s) for s in shapes]


def _cluster_compilation(nd, shapes, opts):
    if "cluster" not in nd.attr:
        raise CompileError("NpuGraphOp lacks its cluster attr", nd.name, nd.op)
    body = import_graph_def(nd.attr["cluster"].s)
    n_args = len(body.args())
    if len(shapes) != n_args:
        raise CompileError(f"_input_shapes has {len(shapes)} shapes, the cluster has {n_args} "
                           f"inputs", nd.name, nd.op)
    values = list(nd.attr["_const_inputs"].list.tensor) if "_const_inputs" in nd.attr else []
    if len(values) > n_args:
        raise CompileError(f"_const_inputs has {len(values)} values, the cluster has {n_args} "
                           f"inputs", nd.name, nd.op)
    shapes = shapes[:n_args - len(values)]
    # An _Arg holds the tensor outside the cluster that the NpuGraphOp's input i reads.
    outer = [ref for ref in nd.input if not ref.startswith("^")]
    for arg in body.args():
        i = arg.attr("index")
        if isinstance(i, int) and 0 <= i < len(outer) and arg.outputs:
            name, index = parse_input(outer[i])
            arg.outputs[0].origin = f"{name}:{index}"
    _bind_values(body, values)
    if "options" in nd.attr and nd.attr["options"].s:
        opts = json.loads(nd.attr["options"].s)
    name = nd.attr["cluster_name"].s.decode() if "cluster_name" in nd.attr else nd.name
    # Variables come right before the values (partition/rewrite.py): their _Args, and model
    # inputs, are the last data ones; each may be written in place by the result it names
    # (none: -1, a variable the graph only reads).
    updates = list(nd.attr["variable_updates"].list.i) if "variable_updates" in nd.attr else []
    first = n_args - len(values) - len(updates)
    n_results = len(nd.attr["Tout"].list.type) if "Tout" in nd.attr else 0
    if first < 0 or any(not -1 <= k < n_results for k in updates):
        raise CompileError(f"variable_updates {updates} does not fit a cluster of {n_args} "
                           f"inputs and {n_results} results", nd.name, nd.op)
    requests = {k: first + i for i, k in enumerate(updates) if k >= 0}   # -1: read only
    return Compilation(name=name, graph=body, input_shapes=shapes, options=opts,
                       in_place_requests=requests)


def _bind_values(body, values):
    """The cluster's last len(values) _Args (its `values` inputs: shapes, axes ... computed at
    run time) become Consts holding the values this signature was called with."""
    if not values:
        return
    args = body.args()
    users = body.data_consumers()
    for arg, value in zip(args[len(args) - len(values):], values):
        body.remove(arg)
        const = body.add(Node(arg.name, "Const", output_dtypes=[value.dtype],
                              attrs={"dtype": attr_util.make(type=value.dtype),
                                     "value": attr_util.make(tensor=value)}))
        body.replace_uses(arg.outputs[0], const.outputs[0], users)


def _eager_compilation(nd, shapes, opts):
    """One op as a graph: constant inputs become Consts, the others _Args, outputs _Retvals."""
    sig = signature(nd.op, nd.attr)
    if sig is None:
        raise CompileError(f"op {nd.op} is not known to TensorFlow in this process", nd.name,
                           nd.op)
    const_idx = list(attr_util.to_python(nd.attr["_const_input_indices"])) \
        if "_const_input_indices" in nd.attr else []
    const_val = list(nd.attr["_const_inputs"].list.tensor) if "_const_inputs" in nd.attr else []
    if len(const_idx) != len(const_val):
        raise CompileError(f"_const_input_indices has {len(const_idx)} entries but "
                           f"_const_inputs {len(const_val)}", nd.name, nd.op)
    n_in = len(sig.input_names)
    if any(not 0 <= i < n_in for i in const_idx):
        raise CompileError(f"_const_input_indices {const_idx} out of range for {n_in} inputs",
                           nd.name, nd.op)
    n_model = n_in - len(set(const_idx))
    if len(shapes) not in (n_in, n_model):
        raise CompileError(f"_input_shapes has {len(shapes)} shapes; op {nd.op} here has {n_in} "
                           f"inputs ({n_model} non-constant)", nd.name, nd.op)
    g = Graph()
    consts = dict(zip(const_idx, const_val))
    name = nd.name or nd.op
    inputs, arg_shapes = [], []
    for i, (arg, dtype) in enumerate(zip(sig.input_names, sig.input_dtypes)):
        if i in consts:
            node = g.add(Node(f"{name}/{arg}_{i}", "Const", output_dtypes=[consts[i].dtype],
                              attrs={"dtype": attr_util.make(type=consts[i].dtype),
                                     "value": attr_util.make(tensor=consts[i])}))
        else:
            node = g.add(Node(f"{name}/{arg}_{i}", "_Arg", output_dtypes=[dtype],
                              attrs={"T": attr_util.make(type=dtype),
                                     "index": attr_util.make(len(arg_shapes))}))
            arg_shapes.append(shapes[i] if len(shapes) == n_in else shapes[len(arg_shapes)])
        inputs.append(node.outputs[0])
    op_node = g.add(Node(name, nd.op, device="", output_dtypes=sig.output_dtypes, inputs=inputs,
                         attrs={k: v for k, v in nd.attr.items() if not k.startswith("_")}))
    for i, v in enumerate(op_node.outputs):
        g.add(Node(f"{name}/_retval_{i}", "_Retval", inputs=[v],
                   attrs={"T": attr_util.make(type=v.dtype), "index": attr_util.make(i)}))
    return Compilation(name=name, graph=g, input_shapes=arg_shapes, options=opts,
                       source="eager op")


@dataclasses.dataclass(frozen=True)
class CompileResult:
    model: bytes           # the compiled model (docs/compiled_model_format.md)
    kernels: list          # kernel names, in execution order
    arena_bytes: int       # planned working memory
    metadata: dict         # the model's metadata (serialize.py), parsed


def compilation_for(nodedef_bytes, opts=None):
    """The Compilation (not yet run) for a request, with options `opts` (None: the defaults;
    a cluster compiles with the options it carries)."""
    nd = node_def_pb2.NodeDef()
    try:
        nd.ParseFromString(bytes(nodedef_bytes))
    except Exception as e:
        raise CompileError(f"compile request is not a serialized tensorflow.NodeDef: {e}") from None
    opts = or_defaults(opts)
    shapes = _input_shapes(nd)
    if nd.op in CLUSTER_OPS:
        return _cluster_compilation(nd, shapes, opts)
    return _eager_compilation(nd, shapes, opts)


def compile_model_with_report(nodedef_bytes, options=None) -> CompileResult:
    """A compile request (bytes) -> CompileResult. `options`: the compile options (a dict;
    None: the defaults) for an eager op; a cluster compiles with the options it carries."""
    start = time.perf_counter()
    with gc_pause.paused():
        c = pipeline().run(compilation_for(nodedef_bytes, options))
        model = c.model
        data = model_format.serialize(model)
        c.graph.dispose()
        del c                     # the IR goes now, by reference counting
    metadata = json.loads(model.metadata)
    with _lock:
        _recent.append((model.metadata, time.perf_counter() - start))
    return CompileResult(data, [k.kernel for k in model.kernels], model.arena_bytes, metadata)


def compile_model(nodedef_bytes, options=None) -> bytes:
    """compile_model_with_report's model alone."""
    return compile_model_with_report(nodedef_bytes, options).model


def clear_recent():
    with _lock:
        _recent.clear()
