"""npu-atc: the offline model compiler. A SavedModel signature (or a frozen GraphDef) becomes a
serving container of compiled models, one per batch size, that CannSession and npu-model-server
run without TensorFlow's graph runtime.

    npu-atc --model saved_model_dir --input_shape "x:-1,4" --dynamic_batch_size 1,2,4,8 \
            --precision_mode allow_fp32_to_fp16 --output mlp.om

The whole signature must run on the NPU: variables are frozen into constants, function calls
inlined, and the graph becomes one NpuGraphOp compile request for graph_engine.compiler (the
same compiler the TF plugin uses). Otherwise AtcError lists every unsupported node and why.
"""
import argparse
import json
import os
import sys

from npu_device.serving import container

DEFAULT_SIGNATURE = "serving_default"


class AtcError(ValueError):
    pass


class _Io:
    """One signature input or output: its public name, graph tensor, dtype enum, shape."""

    def __init__(self, name, tensor, dtype, shape):
        self.name, self.tensor, self.dtype, self.shape = name, tensor, dtype, shape


def load_saved_model(path, signature_name=DEFAULT_SIGNATURE):
    """(frozen GraphDef, inputs, outputs) of one signature; variables become constants."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    try:
        loaded = tf.saved_model.load(path)
    except OSError as e:                      # no saved_model.pb, unreadable files
        raise AtcError(f"{path} is not a SavedModel directory: {e}") from None
    if signature_name not in loaded.signatures:
        raise AtcError(f"SavedModel {path} has no signature {signature_name!r}; it has: "
                       f"{sorted(loaded.signatures) or 'none'}")
    fn = loaded.signatures[signature_name]
    frozen = convert_variables_to_constants_v2(fn)
    specs = tf.nest.flatten(fn.structured_input_signature)      # same order as fn.inputs
    inputs = [_Io(s.name, t.name, t.dtype.as_datatype_enum, _dims(t.shape))
              for s, t in zip(specs, frozen.inputs)]
    # Signature outputs are a dict; flattening sorts its keys, the order of fn.outputs.
    names = sorted(fn.structured_outputs)
    outputs = [_Io(n, t.name, t.dtype.as_datatype_enum, _dims(t.shape))
               for n, t in zip(names, frozen.outputs)]
    return frozen.graph.as_graph_def(), inputs, outputs


def load_frozen_graph(path, output_nodes=None):
    """(GraphDef, inputs, outputs): inputs are the Placeholders, outputs `output_nodes` (names,
    'node' or 'node:i') or else every node no other node reads."""
    from tensorflow.core.framework import graph_pb2
    gd = graph_pb2.GraphDef()
    with open(path, "rb") as f:
        try:
            gd.ParseFromString(f.read())
        except Exception as e:
            raise AtcError(f"{path} is not a serialized tensorflow.GraphDef: {e}") from None
    nodes = {n.name: n for n in gd.node}
    inputs = [_Io(n.name, n.name + ":0", n.attr["dtype"].type,
                  [d.size for d in n.attr["shape"].shape.dim]
                  if not n.attr["shape"].shape.unknown_rank else None)
              for n in gd.node if n.op == "Placeholder"]
    if not output_nodes:
        read = {i.lstrip("^").split(":")[0] for n in gd.node for i in n.input}
        output_nodes = [n.name for n in gd.node
                        if n.name not in read and n.op not in ("NoOp", "Const", "Placeholder")]
    outputs = []
    for ref in output_nodes:
        name, _, index = ref.partition(":")
        if name not in nodes:
            raise AtcError(f"output node {name!r} is not in the graph")
        outputs.append(_Io(ref, f"{name}:{index or 0}", None, None))
    return gd, inputs, outputs


def _dims(shape):
    return None if shape.rank is None else [-1 if d is None else d for d in shape.as_list()]


def cluster_body(graph_def, inputs, outputs):
    """The NpuGraphOp cluster, built as the partitioner builds one (partition.rewrite): the
    inputs' Placeholders become the _Args, in order, every other node but the NoOps is a
    member, one _Retval per output. Control edges between members stay; those from NoOps and
    Placeholders would go to the cluster node, and a served model has none: they are dropped."""
    from graph_engine.compiler.graphdef import import_graph_def
    from graph_engine.compiler.partition.rewrite import cluster_body as build
    g = import_graph_def(graph_def)
    args, rets = [_value(g, io.tensor) for io in inputs], [_value(g, io.tensor) for io in outputs]
    for io, v in zip(outputs, rets):
        if v.dtype is None:
            raise AtcError(f"output {io.tensor!r}: its dtype is unknown (op {v.node.op} is not "
                           f"known to TensorFlow)")
    arg_nodes = {v.node for v in args}
    members = [n for n in g if n not in arg_nodes and n.op != "NoOp"]
    body = build(g, members, rets, inputs=args)[0]
    body.library.CopyFrom(graph_def.library)
    return body


def _value(g, tensor):
    name, _, index = tensor.partition(":")
    return g[name].outputs[int(index or 0)]


def unsupported_nodes(body):
    """[(node, op, reason)] for every node the outputs need that the NPU cannot run."""
    from graph_engine.compiler.graphdef import import_graph_def
    from graph_engine.compiler.partition.candidates import unsupported_reason
    g = import_graph_def(body)
    needed, stack = set(), [n for n in g.nodes.values() if n.op == "_Retval"]
    while stack:
        n = stack.pop()
        if n.name in needed:
            continue
        needed.add(n.name)
        stack.extend(v.node for v in n.inputs)
    bad = []
    for n in g.nodes.values():
        if n.name in needed and n.op not in ("_Arg", "_Retval"):
            reason = unsupported_reason(n)
            if reason:
                bad.append((n.name, n.op, reason))
    return bad


def compile_request(body, shapes, precision, name):
    """The NpuGraphOp NodeDef the TF plugin would send for this cluster."""
    from tensorflow.core.framework import node_def_pb2
    from graph_engine.compiler import attrs
    arg_types = {nd.attr["index"].i: nd.attr["T"].type for nd in body.node if nd.op == "_Arg"}
    ret_types = {nd.attr["index"].i: nd.attr["T"].type for nd in body.node if nd.op == "_Retval"}
    nd = node_def_pb2.NodeDef(name=name, op="NpuGraphOp")
    nd.attr["Tin"].CopyFrom(attrs.make(types=[arg_types[i] for i in sorted(arg_types)]))
    nd.attr["Tout"].CopyFrom(attrs.make(types=[ret_types[i] for i in sorted(ret_types)]))
    nd.attr["cluster"].s = body.SerializeToString()
    nd.attr["cluster_name"].s = name.encode()
    nd.attr["options"].s = json.dumps({"precision": precision}).encode()
    nd.attr["_input_shapes"].CopyFrom(attrs.make(shapes=[list(s) for s in shapes]))
    return nd


def parse_input_shape(text):
    """'x:1,224,224,3;y:-1,4' -> {'x': [1, 224, 224, 3], 'y': [-1, 4]}."""
    shapes = {}
    for item in filter(None, (s.strip() for s in (text or "").split(";"))):
        name, sep, dims = item.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",")] if dims.strip() else []
        except ValueError:
            raise AtcError(f"--input_shape entry {item!r} is not 'name:d0,d1,...' (integers, -1 "
                           f"for the batch dimension)") from None
    return shapes


def parse_batch_sizes(text):
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise AtcError(f"--dynamic_batch_size {text!r} must be positive integers separated by "
                       f"commas, e.g. 1,2,4,8")
    return sizes


def _canonical_precision(mode):
    from npu_device.configuration import options
    if mode not in options.CANONICAL_PRECISION:
        raise AtcError(f"--precision_mode {mode!r} is not one of: "
                       f"{', '.join(options.CANONICAL_PRECISION)}")
    return options.CANONICAL_PRECISION[mode]


def _concrete_shapes(inputs, given, batch):
    unknown = set(given) - {io.name for io in inputs}
    if unknown:
        raise AtcError(f"--input_shape names {sorted(unknown)}, which are not inputs; inputs: "
                       f"{[io.name for io in inputs]}")
    shapes = []
    for io in inputs:
        shape = list(given.get(io.name, io.shape or []))
        if io.shape is None and io.name not in given:
            raise AtcError(f"input {io.name!r} has unknown rank: give it in --input_shape")
        if io.shape is not None and len(shape) != len(io.shape):
            raise AtcError(f"--input_shape for {io.name!r} has rank {len(shape)}, the model's "
                           f"input is {io.shape}")
        if batch is not None:
            if not shape:
                raise AtcError(f"input {io.name!r} is a scalar: no batch dimension for "
                               f"--dynamic_batch_size")
            shape[0] = batch
        if any(d < 0 for d in shape):
            raise AtcError(f"input {io.name!r} has shape {shape}: give concrete dimensions in "
                           f"--input_shape (-1 only for the batch with --dynamic_batch_size)")
        shapes.append(shape)
    return shapes


def compile_graph(graph_def, inputs, outputs, input_shape=None, batch_sizes=None,
                  precision_mode="must_keep_origin_dtype", name="model", source=""):
    """The serving container (bytes) for a graph: one compiled model per batch size."""
    from graph_engine.compiler import model_format
    from graph_engine.compiler.api import CompileError, compile_model
    precision = _canonical_precision(precision_mode)
    if not inputs or not outputs:
        raise AtcError(f"the graph has no {'inputs (Placeholders)' if not inputs else 'outputs'}: "
                       f"a served model takes inputs and returns outputs")
    body = cluster_body(graph_def, inputs, outputs)
    bad = unsupported_nodes(body)
    if bad:
        lines = "\n".join(f"  {node} (op {op}): {reason}" for node, op, reason in bad)
        raise AtcError(f"{len(bad)} node(s) of the graph cannot run on the NPU:\n{lines}")
    given = parse_input_shape(input_shape) if isinstance(input_shape, str) else dict(
        input_shape or {})
    dynamic, models = bool(batch_sizes), {}
    for batch in batch_sizes or [None]:
        shapes = _concrete_shapes(inputs, given, batch)
        request = compile_request(body, shapes, precision, name)
        try:
            data = compile_model(request.SerializeToString())
        except CompileError as e:
            raise AtcError(f"compile failed{f' for batch size {batch}' if batch else ''}: {e}") \
                from None
        model = model_format.deserialize(data)
        outs = [model.values[v] for v in model.outputs]
        if batch is not None:
            for io, v in zip(outputs, outs):
                if not v.dims or v.dims[0] != batch:
                    raise AtcError(f"output {io.name!r} has shape {list(v.dims)} for batch size "
                                   f"{batch}: --dynamic_batch_size needs outputs whose first "
                                   f"dimension is the batch")
        models[batch or 0] = data         # 0: the one static-shape model
    # the manifest describes the last (largest) model with its batch dimension as -1
    manifest = {
        "name": name, "source": source, "precision": precision, "dynamic_batch": dynamic,
        "inputs": [{"name": io.name, "dtype": _dtype_name(io.dtype),
                    "shape": [-1] + s[1:] if dynamic else s} for io, s in zip(inputs, shapes)],
        "outputs": [{"name": io.name, "dtype": _dtype_name(v.dtype),
                     "shape": [-1] + list(v.dims[1:]) if dynamic else list(v.dims)}
                    for io, v in zip(outputs, outs)],
    }
    return container.pack(manifest, models)


def _dtype_name(dt):
    from graph_engine.ops import dtypes
    return dtypes.name(dt)


def main(argv=None):
    p = argparse.ArgumentParser(prog="npu-atc", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True,
                   help="SavedModel directory, or a frozen GraphDef (.pb file)")
    p.add_argument("--output", required=True, help="the serving container to write (.om)")
    p.add_argument("--signature", default=DEFAULT_SIGNATURE, help="SavedModel signature")
    p.add_argument("--input_shape", default="",
                   help='"name:d0,d1,...;name2:..." (-1 for the batch with --dynamic_batch_size)')
    p.add_argument("--dynamic_batch_size", default="",
                   help="comma-separated batch sizes: one compiled model each, e.g. 1,2,4,8")
    p.add_argument("--precision_mode", default="must_keep_origin_dtype",
                   help="NPU precision mode (as npu_device.set_npu_config's precision_mode)")
    p.add_argument("--out_nodes", default="",
                   help="frozen GraphDef only: output tensors 'node[:i];...' (default: sinks)")
    a = p.parse_args(argv)
    try:
        if os.path.isdir(a.model):
            gd, inputs, outputs = load_saved_model(a.model, a.signature)
        elif os.path.isfile(a.model):
            gd, inputs, outputs = load_frozen_graph(
                a.model, [s for s in a.out_nodes.split(";") if s])
        else:
            raise AtcError(f"--model {a.model!r} is neither a SavedModel directory nor a file")
        batches = parse_batch_sizes(a.dynamic_batch_size) if a.dynamic_batch_size else None
        name = os.path.splitext(os.path.basename(os.path.normpath(a.output)))[0]
        data = compile_graph(gd, inputs, outputs, a.input_shape, batches, a.precision_mode,
                             name=name, source=os.path.abspath(a.model))
        manifest, models = container.unpack(data)       # what the server will read back
        with open(a.output, "wb") as f:
            f.write(data)
    except (AtcError, container.ContainerError, OSError) as e:
        print(f"npu-atc: error: {e}", file=sys.stderr)
        return 2
    print(f"npu-atc: wrote {a.output} ({len(data)} bytes; batch sizes {sorted(models)}; inputs "
          f"{[(i['name'], i['shape']) for i in manifest['inputs']]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
