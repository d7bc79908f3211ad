"""Clusters TF runs better itself: nothing in them needs the NPU.

A loop's counter and condition are int32 arithmetic, which TF runs on the NPU in host memory
itself (candidates.runs_on_host_in_tf), joined by a LogicalAnd (tf.while_loop's maximum_iterations,
Keras' RNNs), and its body passes values on (Identity). As a cluster that is a launch every
iteration, where TF's host kernels cost about a microsecond each. A LogicalAnd/LogicalOr of such
host values becomes the plugin's host-memory form (tf_plugin_cc/host_logic_ops.cc): TF has no
host-memory kernel for them on devices like the NPU.
"""
from graph_engine import ops
from graph_engine.compiler.partition import candidates

HOST_FORMS = {"LogicalAnd": "NpuHostLogicalAnd", "LogicalOr": "NpuHostLogicalOr"}
_HOST_LOGICAL = frozenset(HOST_FORMS.values())


def _in_host_memory(node):
    return node.op in _HOST_LOGICAL or candidates.runs_on_host_in_tf(node)


def leave_to_tf(members):
    """Whether TF should run cluster `members` (in topological order) itself: each is int32
    arithmetic that TF runs in host memory, an op that computes nothing, or a LogicalAnd/Or of
    values in host memory. If so, those logical ops become their host forms."""
    logical = set()
    for n in members:
        if n.op in HOST_FORMS and all(v.node in logical or _in_host_memory(v.node)
                                      for v in n.inputs):
            logical.add(n)
        elif not (candidates.runs_on_host_in_tf(n) or ops.get(n.op).trivial):
            return False
    for n in logical:
        n.op = HOST_FORMS[n.op]
    return True
