"""What a runtime kernel receives from a node (docs/compiled_model_format.md, kernel contract):
its data inputs, and attrs = the TF attrs as plain values plus the compile-time-constant
inputs as flat lists named after their input arg. Shape inference, constant folding, lowering
and the reference executor all go through here, so they agree by construction."""
import numpy as np

from graph_engine.compiler import attrs as attr_util
from graph_engine.ops.errors import CompileError, UnsupportedError
from graph_engine.compiler.signature import attr_defaults, op_def, signature


def input_names(node):
    sig = signature(node.op, node.attrs)
    if sig is None or len(sig.input_names) != len(node.inputs):
        raise CompileError(f"has {len(node.inputs)} inputs, which does not match the signature "
                           f"of op {node.op}", node.name, node.op)
    return sig.input_names


def split_inputs(node, op):
    """(data input Values, {const arg name: Value})."""
    if not op.const_inputs:
        return list(node.inputs), {}
    data, consts = [], {}
    for name, v in zip(input_names(node), node.inputs):
        (consts.__setitem__(name, v) if name in op.const_inputs else data.append(v))
    return data, consts


def _kernel_value(v):
    """A TF attr value in a form the compiled model can store, or None to drop it."""
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
        return [int(x) if isinstance(x, bool) else x for x in v]         # list(bool) -> ints
    return None                 # tensors, funcs, list(shape), list(string): no kernel needs them


def tf_attrs(node):
    """The node's attrs, with the op's defaults for any it omits (kernels can rely on every
    attr being present), as kernel values."""
    od = op_def(node.op)
    values = dict(attr_defaults(od)) if od is not None else {}
    for k, av in node.attrs.items():
        # "_" attrs are dropped below whatever their value: not converted (a tensor costs)
        values[k] = None if k.startswith("_") else attr_util.to_python(av)
    out = {}
    for k, v in values.items():
        v = None if k.startswith("_") else _kernel_value(v)
        if v is not None:
            out[k] = v
    return out


def const_list(array):
    a = np.asarray(array).reshape(-1)
    if np.issubdtype(a.dtype, np.floating):
        return [float(x) for x in a]
    return [int(x) for x in a]


def kernel_attrs(node, op):
    """TF attrs plus the const inputs, which must be known (Value.const) by now."""
    attrs = tf_attrs(node)
    for name, v in split_inputs(node, op)[1].items():
        if v.const is None:
            raise UnsupportedError(f"input {name!r} ({v.ref}) must be a compile-time constant, but "
                               f"its value depends on the model's inputs", node.name, node.op)
        attrs[name] = const_list(v.const)
    return attrs
