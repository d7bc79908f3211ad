"""`min(hi, max(lo, v))` of scalar constants lo >= hi is hi whatever v is, and `max(lo, min(hi,
v))` then lo: as Fill(Shape(v), constant) the value folds at compile time.

tf.math.bincount computes its size that way (`minimum(maxlength, maximum(minlength, max(x) +
1))`), and Keras' CategoryEncoding and Discretization (multi_hot, count) pass minlength ==
maxlength. DenseBincount's size is a compile-time input: through the clamp, the batch itself was
the cluster's compile-time value, so every batch compiled again and after
max_value_specializations the step ran on the CPU.
"""
from graph_engine.compiler.partition import candidates, runtime_slices
from graph_engine.compiler.partition.runtime_slices import Builder, const_value
from graph_engine.ops import dtypes as dt

_OTHER = {"Minimum": "Maximum", "Maximum": "Minimum"}


def _split(n):
    """(index of n's scalar constant input, its value, the other input) or None."""
    for i in (0, 1):
        c = const_value(n.inputs[i])
        if c is not None and c.ndim == 0:
            return i, c, n.inputs[1 - i]
    return None


def _spec(n):
    """(outer constant input index, v) when n is a clamp that ignores v, else None."""
    if n.op not in _OTHER or candidates.device_type(n.device) != "NPU":
        return None
    outer, inner = _split(n), None
    if outer is not None and outer[2].node.op == _OTHER[n.op]:
        inner = _split(outer[2].node)
    if inner is None:
        return None
    bound, limit = outer[1], inner[1]
    ignores = limit >= bound if n.op == "Minimum" else limit <= bound
    return (outer[0], inner[2]) if ignores else None


def _rewrite(g, n, spec):
    index, v = spec
    t = n.attr("T")
    b = Builder(g, n, constant_input=index)
    g.remove(n)
    shape = b.node("Shape", [v], dt.DT_INT32, T=("type", t), out_type=("type", dt.DT_INT32))
    out = b.node("Fill", [shape, n.inputs[index]], t, name=n.name, T=("type", t),
                 index_type=("type", dt.DT_INT32))
    out.node.control_inputs = list(n.control_inputs)
    return n.outputs[0], out


def rewrite(g):
    """Rewrites such clamps in Graph g in place; returns how many."""
    todo = [(n, s) for n in g for s in [_spec(n)] if s]
    return runtime_slices.apply(g, todo, lambda n, spec: _rewrite(g, n, spec))
