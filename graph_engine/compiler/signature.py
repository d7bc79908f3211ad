"""Input and output signatures of TF ops: arg names and dtypes, expanded for list args
(ShapeN's N, ConcatV2's N, IdentityN's T list ...), from TF's op registry or, for function
calls, the graph's function library."""
import dataclasses

from tensorflow.core.framework import op_def_pb2, types_pb2
from tensorflow.python.framework import op_def_registry

from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.cluster_op import CLUSTER_OP, CLUSTER_OPS

DT_RESOURCE, DT_VARIANT, DT_STRING = types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_STRING


@dataclasses.dataclass
class Signature:
    input_names: list        # one arg name per input position
    input_dtypes: list       # DataType per input position (None where unknown)
    output_dtypes: list
    is_ref: bool = False     # has reference-typed args (TF1 variables)
    input_type_attrs: list = None    # the type attr that sets each input's dtype, or None
    output_type_attrs: list = None


def npu_graph_op_def(name=CLUSTER_OP):
    """The interface of NpuGraphOp, the node that replaces a cluster. The TF plugin registers
    the op with this signature; this copy lets the compiler read graphs without the plugin."""
    od = op_def_pb2.OpDef(name=name)          # as tf_plugin_cc/graph_op.cc registers it
    od.input_arg.add(name="args", type_list_attr="Tin")
    od.input_arg.add(name="values", type_list_attr="Tvalues")
    od.output_arg.add(name="results", type_list_attr="Tout")
    for name, kind in (("Tin", "list(type)"), ("Tvalues", "list(type)"), ("Tout", "list(type)"),
                       ("cluster", "string"), ("cluster_name", "string"), ("options", "string")):
        od.attr.add(name=name, type=kind)
    od.attr[1].default_value.list.SetInParent()          # Tvalues = []
    return od


def op_def(op_type, library=None):
    """The OpDef of `op_type`: TF's registry, else a function of `library`, else None."""
    found = op_def_registry.get(op_type)
    if found is None and op_type in CLUSTER_OPS:
        return npu_graph_op_def(op_type)
    if found is None and library is not None:
        for f in library.function:
            if f.signature.name == op_type:
                return f.signature
    return found


_defaults_of = {}       # id(OpDef) -> (OpDef, its attr defaults): the OpDef keeps its id unique


def attr_defaults(od):
    """The attr defaults of OpDef `od` as Python values, converted once per OpDef (TF's
    registry returns the same OpDef object for an op every time). Shared: do not modify."""
    cached = _defaults_of.get(id(od))
    if cached is None or cached[0] is not od:
        cached = (od, {a.name: attr_util.to_python(a.default_value) for a in od.attr
                       if a.HasField("default_value")})
        if len(_defaults_of) > 4096:         # function-library OpDefs come and go with graphs
            _defaults_of.clear()
        _defaults_of[id(od)] = cached
    return cached[1]


def _expand(args, attrs, defaults):
    def attr(name):
        if name in attrs:
            return attr_util.to_python(attrs[name])
        return defaults.get(name)

    names, types, type_attrs, is_ref = [], [], [], False
    for arg in args:
        is_ref |= arg.is_ref
        if arg.number_attr:
            n = attr(arg.number_attr) or 0
            t = arg.type or attr(arg.type_attr)
            items = [t] * n
        elif arg.type_list_attr:
            items = list(attr(arg.type_list_attr) or [])
        else:
            items = [arg.type or attr(arg.type_attr)]
        names += [arg.name] * len(items)
        types += items
        type_attrs += [None if arg.type else arg.type_attr or None] * len(items)
    return names, types, type_attrs, is_ref


_signatures = {}         # (op type, the bytes of the attrs that size or type its args) -> Signature
_arg_attrs_of = {}       # op type -> names of the attrs its args read (number, type, type list)


def _arg_attrs(op_type, od):
    names = _arg_attrs_of.get(op_type)
    if names is None:
        names = _arg_attrs_of[op_type] = tuple(dict.fromkeys(
            n for arg in list(od.input_arg) + list(od.output_arg)
            for n in (arg.number_attr, arg.type_attr, arg.type_list_attr) if n))
    return names


def signature(op_type, attrs, library=None):
    """The Signature of a node with `op_type` and `attrs` (AttrValue protos), or None when the
    op is unknown to this process. Shared between nodes of the same op and arg attrs (every
    node of a graph asks, some several times): callers must not modify it."""
    registered = op_def_registry.get(op_type)
    if registered is not None:          # a function library's OpDefs differ from graph to graph
        key = (op_type, *[attrs[n].SerializeToString() if n in attrs else None
                          for n in _arg_attrs(op_type, registered)])
        sig = _signatures.get(key)
        if sig is None:
            if len(_signatures) > 65536:    # list(type) attrs could vary without bound
                _signatures.clear()
            sig = _signatures[key] = _signature(registered, attrs)
        return sig
    od = op_def(op_type, library)
    return None if od is None else _signature(od, attrs)


def _signature(od, attrs):
    defaults = attr_defaults(od)
    in_names, in_types, in_attrs, ref_in = _expand(od.input_arg, attrs, defaults)
    _, out_types, out_attrs, ref_out = _expand(od.output_arg, attrs, defaults)
    return Signature(in_names, in_types, out_types, ref_in or ref_out, in_attrs, out_attrs)
