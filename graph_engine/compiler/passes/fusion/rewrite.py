"""What the fusion passes share: consumer maps kept current while a pass rewrites, small
matchers, and nodes built with their shapes (and folded to Consts when computable)."""
import collections
import functools

import numpy as np

from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.node import Node, hand_on_origin
from graph_engine.compiler.passes import infer_shapes
from graph_engine.ops.base import FLOAT


def is_float(v):
    return v.dtype in FLOAT


def const_value(v):
    """The compile-time value of `v` as a numpy array, or None."""
    return None if v.const is None else np.asarray(v.const)


def scalar_value(v):
    """The value of a one-element constant, else None."""
    c = const_value(v)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def is_scalar(v, want, tol=1e-6):
    s = scalar_value(v)
    return s is not None and abs(s - want) <= tol * max(1.0, abs(want))


def other_input(node, v):
    """The other input of a binary node that reads `v` (once), else None."""
    if len(node.inputs) != 2 or node.inputs.count(v) != 1:
        return None
    return node.inputs[1] if node.inputs[0] is v else node.inputs[0]


class Rewriter:
    """A graph's data and control consumers, kept up to date as nodes are added, rewired and
    removed, so a pass can match many patterns in one sweep."""

    def __init__(self, c):
        self.c, self.g = c, c.graph

    # Built on first use: most patterns are absent from most graphs, and a pass that matches
    # nothing should not pay for two walks of the whole graph.
    @functools.cached_property
    def users(self):
        return collections.defaultdict(list, self.g.data_consumers())

    @functools.cached_property
    def control_users(self):
        return collections.defaultdict(list, self.g.control_consumers())

    def uses(self, v):
        return self.users.get(v, [])

    def sole_user(self, v, op=None):
        """The only consumer node of `v` (optionally of op type(s) `op`), else None. Graph
        outputs (_Retval) count as uses."""
        us = self.uses(v)
        if len(us) != 1:
            return None
        node = us[0][0]
        if op is not None and node.op not in ((op,) if isinstance(op, str) else op):
            return None
        return node

    def add(self, name, op, inputs, attrs=None, output_dtypes=None, control_inputs=()):
        users, _ = self.users, self.control_users      # built before the graph changes
        node = self.g.add(Node(self.g.unique_name(name), op, inputs=inputs,
                               control_inputs=control_inputs,
                               output_dtypes=output_dtypes or [inputs[0].dtype]))
        for k, v in (attrs or {}).items():
            node.attrs[k] = v if hasattr(v, "SerializeToString") else attr_util.make(v)
        for i, v in enumerate(inputs):
            users[v].append((node, i))
        return node

    def add_inferred(self, name, op, inputs, attrs=None, output_dtypes=None):
        """A node whose output shape (and value, when computable) shape inference sets; a
        computable value becomes a Const node instead (weights of frozen graphs)."""
        node = self.add(name, op, inputs, attrs, output_dtypes)
        infer_shapes.infer_node(node, self.c)
        if node.outputs[0].const is not None and len(node.outputs) == 1:
            v = node.outputs[0]
            self.remove(node)
            return self.const(name, v.const, v.dtype)
        return node.outputs[0]

    def const(self, name, array, dtype):
        array = np.asarray(array)
        node = self.add(name, "Const", [], {"dtype": attr_util.make(type=dtype),
                                            "value": attr_util.make(tensor=attr_util.numpy_to_tensor(
                                                array, dtype))}, output_dtypes=[dtype])
        node.outputs[0].shape, node.outputs[0].const = tuple(array.shape), array
        return node.outputs[0]

    def set_input(self, node, i, v):
        old = node.inputs[i]
        self.users[old] = [(n, j) for n, j in self.users[old] if not (n is node and j == i)]
        node.inputs[i] = v
        self.users[v].append((node, i))

    def replace_uses(self, old, new):
        hand_on_origin(old, new)
        for n, i in list(self.users.get(old, ())):
            self.set_input(n, i, new)

    def replace_chain(self, chain, new_node, old_out, new_out=None):
        """`new_node` computes `old_out` (the output of the last of `chain`, whose other values
        have no consumers outside it) as `new_out` (default: its output 0): it takes their
        control edges, and `chain` is removed."""
        for n in chain:
            for ci in n.control_inputs:
                if ci not in new_node.control_inputs and ci not in chain:
                    new_node.control_inputs.append(ci)
            for user in self.control_users.pop(n, []):
                user.control_inputs = [new_node if x is n else x for x in user.control_inputs]
                if user not in self.control_users[new_node]:
                    self.control_users[new_node].append(user)
        self.replace_uses(old_out, new_out if new_out is not None else new_node.outputs[0])
        self.remove_unused(chain)

    def remove_unused(self, nodes):
        """Removes those of `nodes` (and Consts they read) whose outputs nothing uses."""
        pending = list(nodes)
        while pending:
            n = pending.pop()
            if n.name not in self.g.nodes or any(self.uses(v) for v in n.outputs) or \
                    self.control_users.get(n) or n.op in ("_Arg", "_Retval"):
                continue
            self.remove(n)
            pending += [v.node for v in n.inputs if v.node in nodes or v.node.op == "Const"]

    def remove(self, node):
        for i, v in enumerate(node.inputs):
            self.users[v] = [(n, j) for n, j in self.users[v] if n is not node]
        for v in node.outputs:
            self.users.pop(v, None)
        self.g.remove(node)


def producer(v, op):
    """The node producing `v` if its op is `op` (a name or a tuple), else None."""
    return v.node if v is not None and v.node.op in ((op,) if isinstance(op, str) else op) else None


def operands(node, first):
    """(a, b) with a satisfying `first`, for a binary commutative node (either input order);
    None when neither does."""
    if node is None or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if first(a):
        return a, b
    if first(b):
        return b, a
    return None


def const_operand(node, want):
    """The non-constant input of binary `node` whose other input is the scalar `want` (as
    closely as the constant's dtype stores it: float16/bfloat16 round Gelu's constants)."""
    pair = operands(node, lambda v: is_scalar(v, want, 1e-5 if v.dtype == dt.DT_FLOAT else 4e-3))
    return pair[1] if pair else None


def internal_only(rw, values, nodes):
    """True when every consumer of `values` is one of `nodes` (the pattern can be removed)."""
    nodes = set(nodes)
    return all(n in nodes for v in values for n, _ in rw.uses(v))
