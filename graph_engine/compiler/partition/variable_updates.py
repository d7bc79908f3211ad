"""Optimizer updates computed in the cluster: AssignAdd/AssignSubVariableOp(var, delta) becomes
AssignVariableOp(var, read + delta), where `read` is a ReadVariableOp of the same variable that
the step already has.

An optimizer (Keras' Adam: `m.assign_add((g - m) * (1 - beta_1))`, `var.assign_sub(...)`)
computes each delta in an NPU cluster, and AssignAdd then reads the variable and the delta and
writes the variable: one more pass over every optimizer tensor, outside the cluster. With the
add in the cluster, next to the delta's arithmetic (fused with it), the cluster writes the new
value and AssignVariableOp adopts its buffer (tf_plugin_cc/variable_ops.cc): no pass. A ResNet50
training step has three such tensors per weight (m, v and the weight).

The result is the same as long as no other write to the variable comes between the read and
the update, so the rewrite applies only where the update is the step's one write to the
variable (every other consumer of its handle only reads it), the read comes before it in the
step's order (not after: a read that follows the update sees its result), and both are
outside control flow (in a loop, an earlier iteration's update would come between). Another
step writing the same variable concurrently (Hogwild-style threads) could lose an update that
AssignAdd's lock would have kept; TF's ops give such programs no order either. The add keeps
its dtype in every precision mode (attr _keep_dtype): the optimizer's state accumulates in the
variable's dtype, as it did in AssignAdd.
"""
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.node import Node
from graph_engine.compiler.partition import candidates, dag
from graph_engine.compiler.partition.contexts import control_contexts
from graph_engine.compiler.passes.precision import KEEP_DTYPE_ATTR
from graph_engine.ops import dtypes as dt

UPDATES = {"AssignAddVariableOp": "AddV2", "AssignSubVariableOp": "Sub"}
# Ops that only read a variable through its handle.
READERS = ("ReadVariableOp", "VariableShape", "VarIsInitializedOp")
DTYPES = (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16)


def _on_npu(node):
    return candidates.device_type(node.device) == "NPU"


def _qualifies(n):
    # Preserved updates (a function's control outputs) qualify too: the node stays, with its
    # name and control edges; only its op and value change.
    return (n.op in UPDATES and _on_npu(n) and n.attr("dtype") in DTYPES
            and _on_npu(n.inputs[1].node))


def rewrite(g):
    """Rewrites qualifying updates in Graph g in place; returns how many."""
    updates = [n for n in g if _qualifies(n)]
    if not updates:
        return 0
    try:
        topo = dag.order(g)
    except ValueError:
        return 0                           # partition() reports the cycle
    users = g.data_consumers()
    position = {n: i for i, n in enumerate(topo)}
    ctx = control_contexts(g, topo)
    done = 0
    for u in updates:
        handle = u.inputs[0]
        others = [c for c, _ in users.get(handle, ()) if c is not u]
        if ctx[u] != () or any(c.op not in READERS for c in others):
            continue
        reads = [c for c in others if c.op == "ReadVariableOp" and ctx[c] == ()
                 and position[c] < position[u] and c.attr("dtype") == u.attr("dtype")]
        if not reads:
            continue
        read = max(reads, key=position.get)
        dtype = u.attr("dtype")
        add = g.add(Node(g.unique_name(f"{u.name}/new_value"), UPDATES[u.op], device=u.device,
                         inputs=[read.outputs[0], u.inputs[1]], output_dtypes=[dtype],
                         attrs={"T": attr_util.make(type=dtype),
                                KEEP_DTYPE_ATTR: attr_util.make(True)}))
        u.op = "AssignVariableOp"          # attrs: dtype; validate_shape defaults to false
        u.inputs[1] = add.outputs[0]
        done += 1
        # Reads that the step orders right after the update hold its new value: they take it
        # from the cluster, so that what follows (Adam's step on the weight, which reads m and
        # v again) joins the same pass instead of reading m and v back from memory. Only for a
        # preserved update (a function's control output): in a TF1 session an update may run
        # only because such a read leads to a fetch, and without it TF would prune the update.
        if candidates.PRESERVE_ATTR not in u.attrs:
            continue
        for r in others:
            if r.op == "ReadVariableOp" and ctx[r] == () and u in r.control_inputs \
                    and r.attr("dtype") == dtype:
                g.replace_uses(r.outputs[0], add.outputs[0], users)
    return done
