"""Algebraic simplification, exact rewrites only (safe for training: the same values, NaN and
inf included). A node is replaced by an operand only when that operand already has the node's
dtype and shape, so a neutral constant that broadcasts the result (x + zeros([4, 3]) with x of
shape [3]) stays.

    x*1, 1*x, x/1, x+0, 0+x, x-0 -> x          (constants of neutral elements, any shape that
                                                 does not widen the result)
    Neg(Neg x), LogicalNot(LogicalNot x) -> x
    x + Neg(y) -> x - y;  x - Neg(y) -> x + y
    Mul(x, x), Pow(x, 2) -> Square(x);  Pow(x, 1) -> x;  AddN(x, y) -> AddV2(x, y)
    Transpose(Transpose(x, p), q) -> Transpose(x, p[q]), or x when that is the identity
    Reshape(Reshape|Squeeze|ExpandDims(x)) -> Reshape(x)
    Reshape/Squeeze/ExpandDims/Tile/Pad/PadV2/MirrorPad/Slice/BroadcastTo/ConcatV2 and the
      reductions Sum/Mean/Max/Min/Prod/All/Any whose result has their (first) input's shape
      -> the input;  Cast to the same dtype -> x;  AddN(x) -> x

Deliberately not done: x*0 -> 0 and x-x -> 0 (wrong for inf and NaN), 0-x -> Neg(x) (signed
zero), Pow(x, 0.5) -> Sqrt (Pow(-inf, 0.5) is inf). x+0 -> x (and a Sum over one element)
keeps x's sign of zero where IEEE gives +0 for -0 + 0; values compare equal, as in Grappler's
arithmetic optimizer.
"""
import collections

import numpy as np

from graph_engine import ops
from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.node import Node

# Ops whose result equals their first input when it has that input's shape and dtype. For the
# reductions that means no axes, or only axes of size 1 kept (keep_dims).
SHAPE_NOOPS = ("Reshape", "Squeeze", "ExpandDims", "Tile", "Pad", "PadV2", "MirrorPad",
               "Slice", "BroadcastTo", "ConcatV2", "Sum", "Mean", "Max", "Min", "Prod", "All",
               "Any")
INVOLUTIONS = ("Neg", "LogicalNot")


def _all(v, value):
    """v is a compile-time constant whose every element equals `value`."""
    return v.const is not None and v.const.size > 0 and bool(np.all(v.const == value))


def _same(v, out):
    return v.dtype == out.dtype and v.shape == out.shape


def _supports(op_type, dtype):
    op = ops.get(op_type)
    return op is not None and op.unsupported_dtype({"T": dtype}) is None


class Simplifier:
    def __init__(self, g):
        self.g, self.users = g, g.data_consumers()
        self.count = collections.Counter()

    def forward(self, out, src, rule):
        """Every use of `out` reads `src` instead (the node dies in DCE)."""
        for consumer, i in self.users.pop(out, []):
            consumer.inputs[i] = src
            self.users[src].append((consumer, i))
        self.count[rule] += 1

    def rewrite(self, node, op, inputs, rule):
        """Turns `node` in place into `op` of `inputs` (same attrs: T stays)."""
        for v in node.inputs:
            self.users[v] = [(n, i) for n, i in self.users[v] if n is not node]
        node.op, node.inputs = op, list(inputs)
        for i, v in enumerate(node.inputs):
            self.users[v].append((node, i))
        self.count[rule] += 1

    def set_input(self, node, i, v):
        old = node.inputs[i]
        self.users[old] = [(n, j) for n, j in self.users[old] if not (n is node and j == i)]
        node.inputs[i] = v
        self.users[v].append((node, i))

    def const(self, near, array, dtype):
        node = self.g.add(Node(self.g.unique_name(f"{near.name}/simplified"), "Const",
                               output_dtypes=[dtype],
                               attrs={"dtype": attr_util.make(type=dtype),
                                      "value": attr_util.make(
                                          tensor=attr_util.numpy_to_tensor(array, dtype))}))
        v = node.outputs[0]
        v.shape, v.const = tuple(array.shape), array
        return v

    # ---- rules: each returns True when it replaced the node -------------------------------
    def neutral(self, node, out):
        a, b = (node.inputs + [None, None])[:2]
        if node.op == "Mul":
            cases = [(a, b, 1), (b, a, 1)]
        elif node.op in ("Div", "RealDiv"):
            cases = [(a, b, 1)]
        elif ops.has(node.op, "commutative_add"):
            cases = [(a, b, 0), (b, a, 0)]
        elif node.op == "Sub":
            cases = [(a, b, 0)]
        else:
            return False
        for x, c, value in cases:
            if _same(x, out) and _all(c, value):
                self.forward(out, x, f"{node.op}(x, {value})")
                return True
        return False

    def negations(self, node, out):
        if node.op in INVOLUTIONS and node.inputs[0].node.op == node.op:
            self.forward(out, node.inputs[0].node.inputs[0], f"{node.op}({node.op}(x))")
            return True
        add = ops.has(node.op, "commutative_add")
        if add or node.op == "Sub":
            for i in ((1, 0) if add else (1,)):
                y = node.inputs[i]
                if y.node.op == "Neg":
                    x = node.inputs[1 - i]
                    op = "Sub" if add else "AddV2"
                    self.rewrite(node, op, [x, y.node.inputs[0]], f"{node.op}(x, Neg(y))")
                    return True
        return False

    def squares(self, node, out):
        if node.op == "Mul" and node.inputs[0] is node.inputs[1] \
                and _supports("Square", out.dtype):
            self.rewrite(node, "Square", node.inputs[:1], "Mul(x, x)")
            return True
        if node.op == "Pow" and _same(node.inputs[0], out):
            x, e = node.inputs
            if _all(e, 1):
                self.forward(out, x, "Pow(x, 1)")
                return True
            if _all(e, 2) and _supports("Square", out.dtype):
                self.rewrite(node, "Square", [x], "Pow(x, 2)")
                return True
        return False

    def transposes(self, node, out):
        """Composes into this Transpose a Transpose it reads; True if it then does nothing."""
        if node.op != "Transpose" or node.inputs[1].const is None:
            return False
        x, perm = node.inputs
        q = [int(p) for p in perm.const.reshape(-1)]
        if x.node.op == "Transpose" and x.node.inputs[1].const is not None:
            p = [int(i) for i in x.node.inputs[1].const.reshape(-1)]
            composed = np.asarray([p[k] for k in q], perm.const.dtype)
            self.set_input(node, 0, x.node.inputs[0])
            self.set_input(node, 1, self.const(node, composed, perm.dtype))
            self.count["Transpose(Transpose(x))"] += 1
            x, q = node.inputs[0], list(composed)
        if q == list(range(len(q))) and _same(x, out):
            self.forward(out, x, "Transpose(x, identity)")
            return True
        return False

    def reshapes(self, node, out):
        """Reads through a reshape feeding this Reshape (never replaces the node itself)."""
        while node.op == "Reshape" and ops.has(node.inputs[0].node.op, "reshapes"):
            self.set_input(node, 0, node.inputs[0].node.inputs[0])
            self.count["Reshape(Reshape(x))"] += 1
        return False

    def noops(self, node, out):
        if not node.inputs or len(node.outputs) != 1:
            return False
        x = node.inputs[0]
        if (node.op in SHAPE_NOOPS or node.op == "Cast" or
                (node.op == "AddN" and len(node.inputs) == 1)) and _same(x, out):
            self.forward(out, x, f"{node.op} that does nothing")
            return True
        return False

    def sums(self, node, out):
        """AddN of two is the one addition AddV2 makes, which the fusions take up (a recurrent
        backward pass accumulates each weight's gradient as AddN(sum, MatMul(...)))."""
        if node.op == "AddN" and len(node.inputs) == 2 and all(_same(v, out) for v in node.inputs) \
                and _supports("AddV2", out.dtype):
            self.rewrite(node, "AddV2", node.inputs, "AddN(x, y)")
            node.attrs.pop("N", None)
            return True
        return False

    def run(self):
        for node in self.g.topo_order():
            if len(node.outputs) != 1 or not self.users.get(node.outputs[0]):
                continue
            out = node.outputs[0]
            for rule in (self.transposes, self.reshapes, self.neutral, self.negations,
                         self.squares, self.sums, self.noops):
                if rule(node, out):
                    break
        return dict(self.count)


def run(c):
    return Simplifier(c.graph).run()
