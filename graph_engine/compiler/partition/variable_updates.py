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
variable (every other consumer of its handle only reads it), and the read comes before it in
the step's order (not after: a read that follows the update sees its result) in the same
control-flow context. Inside a loop (Keras' `steps_per_execution`: the training step is the
body of a while loop, in a cond) the handle must be a function argument's, passed in through
constant Enter, Switch and Identity nodes (`handle_root`): then every consumer of the variable
is in view, and the read and the update are in one iteration: TF starts the next iteration
only after the body's stateful ops (a lowered body's data outputs wait for its control
outputs), so an earlier iteration's update never comes between. Another step writing the same
variable concurrently (Hogwild-style threads) could lose an update that AssignAdd's lock would
have kept; TF's ops give such programs no order either. The add keeps
its dtype in every precision mode (attr _keep_dtype): the optimizer's state accumulates in the
variable's dtype, as it did in AssignAdd.
"""
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.node import Node
from graph_engine.compiler.partition import candidates, dag
from graph_engine.compiler.partition.contexts import SWITCH, control_contexts
from graph_engine.compiler.passes.precision import KEEP_DTYPE_ATTR
from graph_engine.ops import dtypes as dt

UPDATES = {"AssignAddVariableOp": "AddV2", "AssignSubVariableOp": "Sub"}
# Ops that only read a variable through its handle.
READERS = ("ReadVariableOp", "VariableShape", "VarIsInitializedOp")
DTYPES = (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16)
# Ops that hand a handle on unchanged (besides constant Enter).
_PASSING = ("Identity", *SWITCH)
_NEXT = ("NextIteration", "RefNextIteration")


def _on_npu(node):
    return candidates.device_type(node.device) == "NPU"


def _qualifies(n):
    # Preserved updates (a function's control outputs) qualify too: the node stays, with its
    # name and control edges; only its op and value change.
    return (n.op in UPDATES and _on_npu(n) and n.attr("dtype") in DTYPES
            and _on_npu(n.inputs[1].node))


def _passes_handle(node):
    return node.op in _PASSING or (node.op == "Enter" and node.attr("is_constant", False))


def handle_root(value):
    """The Value a variable handle `value` passes on: followed back through Identity, Switch and
    constant Enter nodes (how a function argument's handle reaches a loop body or a branch)."""
    while _passes_handle(value.node):
        value = value.node.inputs[0]
    return value


def handle_users(root, users):
    """The consumers of handle `root` and of the values passing it on (handle_root), except
    the nodes that only pass it on."""
    found, stack = [], [root]
    while stack:
        for c, i in users.get(stack.pop(), ()):
            if i == 0 and _passes_handle(c):
                stack.extend(c.outputs)
            else:
                found.append(c)
    return found


def in_function_body(handle):
    """Whether `handle` is a function argument's: every consumer of its variable is in this
    graph, and each variable is initialised before the graph runs."""
    return handle_root(handle).node.op == "_Arg"


class IterationGates:
    """Which nodes of a loop body run before TF starts the loop's next iteration: those that
    lead (within one iteration) to every NextIteration of their loop, as a lowered function
    body's stateful ops do (its outputs wait for them). `gate(nodes)`: whether all of `nodes`
    do; never for nodes of nested loops (an inner iteration does not gate the outer)."""

    def __init__(self, ctx):
        self.ctx, self._gating = ctx, {}           # frame entry -> the nodes that gate it

    def gate(self, nodes):
        return all(self._gates(n) for n in nodes)

    def later_noop(self, node, position):
        """A NoOp of `node`'s context that gates its loop and comes after it in `position`'s
        order (a control edge to it makes no cycle), or None."""
        if not self._gates(node):
            return None
        gating = self._gating[_frames(self.ctx[node])[0]]
        return max((n for n in gating if n.op == "NoOp" and self.ctx[n] == self.ctx[node]
                    and position[n] > position[node]), key=position.get, default=None)

    def _gates(self, node):
        frames = _frames(self.ctx[node])
        if len(frames) != 1:
            return False
        if frames[0] not in self._gating:
            self._gating[frames[0]] = self._upstream_of_every_next(frames[0])
        return node in self._gating[frames[0]]

    def _upstream_of_every_next(self, frame):
        common = None
        for n, c in self.ctx.items():
            if n.op in _NEXT and _frames(c)[-1:] == [frame]:
                found, stack = set(), [n]
                while stack:
                    for p in dag.producers(stack.pop()):
                        if p not in found:
                            found.add(p)
                            stack.append(p)
                common = found if common is None else common & found
        return common or set()


def _frames(context):
    return [entry for entry in context or () if entry[0] == "frame"]


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
    gates = IterationGates(ctx)

    done = 0
    for u in updates:
        handle = u.inputs[0]
        looped = ctx[u] != ()
        if ctx[u] is None or (looped and not (in_function_body(handle) and gates.gate([u]))):
            continue
        others = [c for c in handle_users(handle_root(handle), users) if c is not u]
        if any(c.op not in READERS for c in others):
            continue
        reads = [c for c in others if c.op == "ReadVariableOp" and ctx[c] == ctx[u]
                 and position[c] < position[u] and c.attr("dtype") == u.attr("dtype")]
        if not reads:
            continue
        read = max(reads, key=position.get)
        dtype = u.attr("dtype")
        add = g.add(Node(g.unique_name(f"{u.name}/new_value"), UPDATES[u.op], device=u.device,
                         inputs=[read.outputs[0], u.inputs[1]], output_dtypes=[dtype],
                         attrs={"T": attr_util.make(type=dtype),
                                KEEP_DTYPE_ATTR: attr_util.make(True)}))
        u.op = "AssignVariableOp"
        # TF's default, written out: TF adds it otherwise, and the graph would no longer be
        # the one returned (tf_plugin_cc/optimizer.cc knows its own graphs by content)
        u.attrs["validate_shape"] = attr_util.make(False)
        u.inputs[1] = add.outputs[0]
        done += 1
        # Reads that the step orders right after the update hold its new value: they take it
        # from the cluster, so that what follows (Adam's step on the weight, which reads m and
        # v again) joins the same pass instead of reading m and v back from memory. Only where
        # the update runs whatever is fetched: a preserved update (a function's control
        # output), or one in a function's loop body. In a TF1 session an update may run only
        # because such a read leads to a fetch, and without it TF would prune the update.
        if candidates.PRESERVE_ATTR not in u.attrs and not looped:
            continue
        for r in others:
            if r.op != "ReadVariableOp" or ctx[r] != ctx[u] or u not in r.control_inputs \
                    or r.attr("dtype") != dtype:
                continue
            # In a loop the update may reach the next iteration only through such a read
            # (automatic control dependencies chain a variable's ops, and the body's outputs
            # wait for the last one): the read, unread now, keeps leading there.
            gate = gates.later_noop(r, position) if looped else None
            if looped and gate is None:
                continue
            g.replace_uses(r.outputs[0], add.outputs[0], users)
            if gate is not None:
                gate.control_inputs.append(r)
    return done
