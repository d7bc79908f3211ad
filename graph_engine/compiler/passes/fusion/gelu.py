"""Gelu subgraphs -> NpuGelu (attr approximate), as Keras 3 and TF write them:

    exact:  (0.5 * x) * Erfc(-x * 0.70710678)           keras.activations.gelu(approximate=False)
            (0.5 * x) * (1 + Erf(x * 0.70710678))
    tanh:   (0.5 * x) * (1 + Tanh(0.7978846 * (x + 0.044715 * Pow(x, 3))))   approximate=True

A Gelu after a contraction then becomes that contraction's epilogue (contraction_epilogue).
The subgraph's inner values must have no other consumers (a training graph's gradient reads
them, so training Gelus stay as they are).
"""
import math

from graph_engine import ops
from graph_engine.compiler.passes.fusion.rewrite import (Rewriter, const_operand, internal_only,
                                                         is_float, operands, producer)

SQRT_HALF = math.sqrt(0.5)
SQRT_2_PI = math.sqrt(2 / math.pi)


def _half_x(v):
    """x of v = 0.5 * x, else None."""
    return const_operand(producer(v, "Mul"), 0.5)


def _exact_erfc(v, x):
    """The nodes of Erfc(-x * c), else None."""
    erfc = producer(v, "Erfc")
    mul = producer(erfc.inputs[0], "Mul") if erfc else None
    neg = producer(const_operand(mul, SQRT_HALF), "Neg")
    return [erfc, mul, neg] if neg is not None and neg.inputs[0] is x else None


def _one_plus(v, inner):
    """The nodes of 1 + inner(...): `inner(value)` returns its own nodes or None."""
    add = producer(v, ops.having("commutative_add"))
    rest = const_operand(add, 1.0)
    nodes = inner(rest) if rest is not None else None
    return [add] + nodes if nodes else None


def _erf_part(x):
    def inner(v):
        erf = producer(v, "Erf")
        mul = producer(erf.inputs[0], "Mul") if erf else None
        return [erf, mul] if mul is not None and const_operand(mul, SQRT_HALF) is x else None
    return inner


def _tanh_part(x):
    def inner(v):
        tanh = producer(v, "Tanh")
        scaled = producer(tanh.inputs[0], "Mul") if tanh else None
        add = producer(const_operand(scaled, SQRT_2_PI), ops.having("commutative_add"))
        pair = operands(add, lambda a: a is x)
        cube_mul = producer(pair[1], "Mul") if pair else None
        power = producer(const_operand(cube_mul, 0.044715), "Pow")
        if power is None or power.inputs[0] is not x or const_operand(power, 3.0) is not x:
            return None
        return [tanh, scaled, add, cube_mul, power]
    return inner


def match(node):
    """(x, approximate, pattern nodes) when `node` (a Mul) computes Gelu, else None."""
    for half, rest in (node.inputs, node.inputs[::-1]):
        x = _half_x(half)
        if x is None:
            continue
        for approximate, nodes in ((False, _exact_erfc(rest, x)),
                                   (False, _one_plus(rest, _erf_part(x))),
                                   (True, _one_plus(rest, _tanh_part(x)))):
            if nodes:
                return x, approximate, [half.node] + nodes
    return None


def run(c):
    rw = Rewriter(c)
    count = 0
    for node in c.graph.topo_order():
        if node.op != "Mul" or node.name not in c.graph.nodes or not is_float(node.outputs[0]):
            continue
        m = match(node)
        if m is None:
            continue
        x, approximate, inner = m
        if not internal_only(rw, [v for n in inner for v in n.outputs], inner + [node]) or \
                node.outputs[0].shape != x.shape:
            continue
        gelu = rw.add(node.name + "/gelu", "NpuGelu", [x], {"T": node.attrs["T"]},
                      output_dtypes=[x.dtype])
        gelu.set_attr("approximate", approximate)
        gelu.device = node.device
        gelu.outputs[0].shape = x.shape
        rw.replace_chain(inner + [node], gelu, node.outputs[0])
        count += 1
    return {"fused": count}
