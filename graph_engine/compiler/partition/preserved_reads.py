"""Preserved variable reads whose value nothing uses become NoOps of the same name.

A tf.function makes every stateful op a control output, its reads included, so Grappler
preserves them: after the clusters took their values over (variables_in_place.py reads the
variable in the cluster) or after an update (Adam reads m and v once more), a training step still
ran one ReadVariableOp per such read, 2,791 per DenseNet121 step, each a TF kernel launch that
reads and drops the variable (and, racing the cluster, could keep its buffer from being updated
in place). A NoOp keeps the name and the control edges, all a control output needs; the
variable's value was never observable. Only reads of a function argument's handle itself: each
variable is initialised before the function runs, so no read could have failed either, and the
read is outside loops and conditionals (a NoOp there would lose its frame with its input).
"""
from graph_engine.compiler.partition import candidates


REASON = "kept by Grappler (a control output), unread: a NoOp of its name stands in"


def to_noops(g):
    """Rewrites Graph `g` in place; returns the nodes it turned into NoOps."""
    used = {v.node for n in g for v in n.inputs}
    found = [n for n in g if n.op == "ReadVariableOp" and candidates.PRESERVE_ATTR in n.attrs
             and n not in used and candidates.device_type(n.device) == "NPU"
             and n.inputs[0].node.op == "_Arg"]
    for n in found:
        n.op, n.inputs, n.outputs, n.source = "NoOp", [], [], None
        n.attrs = {candidates.PRESERVE_ATTR: n.attrs[candidates.PRESERVE_ATTR]}
    # A NoOp without inputs orders nothing: its control edges go, as TF's dependency optimizer
    # would remove them between Grappler's two calls (the second call then sees the graph it
    # was given and skips it, tf_plugin_cc/optimizer.cc).
    free = {n for n in found if not n.control_inputs}
    if free:
        for n in g:
            if n.control_inputs:
                n.control_inputs = [c for c in n.control_inputs if c not in free]
    return set(found)
