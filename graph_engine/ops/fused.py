"""GE-internal fused kernels made by the pattern-fusion passes (graph_engine/compiler/passes/
fusion/, docs/fusion.md), with their numpy references.

Contractions with an epilogue: NpuFusedConv2D, NpuFusedDepthwiseConv2D, NpuFusedMatMul,
NpuFusedBatchMatMul take the contraction's inputs, then `bias` (1-D, per output channel) when
`has_bias`, then `residual` (the output's shape) when `has_residual`; out = act(acc + bias +
residual) with `activation` one of activations() ("" for none) and `alpha` LeakyRelu's slope.
"""
import math

import numpy as np

from graph_engine.ops import conv, matmul
from graph_engine.ops.extra_math import _erf
from graph_engine.ops.base import FLOAT, Op, get, has, having, register


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))      # no overflow warnings for large |x|


def _gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


# Activations the epilogue applies that are fusion patterns rather than one op
# (passes/fusion/contraction_epilogue.py); each has a functor of its name in
# runtime/kernels/elementwise_functors.h. Single ops come from the registry (trait epilogue).
PATTERN_ACTIVATIONS = {
    "GeluExact": lambda x: _gelu(x, False),
    "GeluTanh": lambda x: _gelu(x, True),
    "Swish": lambda x: x * _sigmoid(x),
}


def activations():
    """The epilogue's activation names: the ops with the trait epilogue, then the patterns."""
    return having("epilogue") + tuple(PATTERN_ACTIVATIONS)


def activate(x, attrs):
    act = attrs.get("activation", "")
    if act == "":
        return x
    if act in PATTERN_ACTIVATIONS:
        return PATTERN_ACTIVATIONS[act](x)
    if not has(act, "epilogue"):
        raise ValueError(f"unknown activation {act!r}; allowed: "
                         f"{', '.join(map(repr, ('',) + activations()))}")
    return get(act).compute([x], {"alpha": attrs.get("alpha", 0.2)})


class _FusedContraction(Op):
    """The contraction `base` (an op instance) plus the epilogue."""
    internal = True
    type_attrs = {"T": FLOAT}
    base = None
    channel_axis = staticmethod(lambda attrs, rank: rank - 1)

    def _split(self, xs, attrs):
        main, rest = list(xs[:2]), list(xs[2:])
        bias = rest.pop(0) if attrs.get("has_bias") else None
        residual = rest.pop(0) if attrs.get("has_residual") else None
        if rest:
            raise ValueError(f"{self.name}: {len(xs)} inputs do not match has_bias="
                             f"{attrs.get('has_bias')}, has_residual={attrs.get('has_residual')}")
        return main, bias, residual

    def shapes(self, shapes, attrs):
        main, bias, residual = self._split(shapes, attrs)
        out = tuple(self.base.shapes(main, attrs)[0])
        axis = self.channel_axis(attrs, len(out))
        if bias is not None and tuple(bias) != (out[axis],):
            raise ValueError(f"{self.name}: bias must have shape [{out[axis]}], got {list(bias)}")
        if residual is not None and tuple(residual) != out:
            raise ValueError(f"{self.name}: residual must have the output's shape {list(out)}, "
                             f"got {list(residual)}")
        return [out]

    def compute(self, xs, attrs):
        main, bias, residual = self._split(xs, attrs)
        y = np.asarray(self.base.compute(main, attrs), np.float32)
        if bias is not None:
            axis = self.channel_axis(attrs, y.ndim)
            y = y + bias.reshape((-1,) + (1,) * (y.ndim - 1 - axis))
        if residual is not None:
            y = y + residual
        return activate(y, attrs)


def _conv_channel_axis(attrs, rank):
    return 1 if attrs.get("data_format", "NHWC") == "NCHW" else rank - 1


@register
class NpuFusedConv2D(_FusedContraction):
    base = conv.Conv2D()
    channel_axis = staticmethod(_conv_channel_axis)


@register
class NpuFusedDepthwiseConv2D(_FusedContraction):
    base = conv.DepthwiseConv2dNative()
    channel_axis = staticmethod(_conv_channel_axis)


@register
class NpuFusedMatMul(_FusedContraction):
    base = matmul.MatMul()


@register
class NpuFusedBatchMatMul(_FusedContraction):
    base = matmul.BatchMatMulV2()


@register
class NpuGelu(Op):
    """Gelu of x: exact (erf) or, with `approximate`, the tanh form."""
    internal = True
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        return [shapes[0]]

    def compute(self, xs, attrs):
        return _gelu(xs[0], bool(attrs.get("approximate", False)))


@register
class NpuLayerNorm(Op):
    """(x, gamma, beta) -> (x - mean) * rsqrt(var + epsilon) * gamma + beta over the last axis
    (attr `axis` = -1); gamma and beta hold one element per position of that axis. With
    `with_stats` (training: the gradient reads them) also mean and rsqrt(var + epsilon), each
    shaped like x with a last axis of 1."""
    internal = True
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        x, gamma, beta = shapes
        if attrs.get("axis", -1) != -1 or not x:
            raise ValueError(f"NpuLayerNorm: only axis -1 of a non-scalar is supported, got axis "
                             f"{attrs.get('axis')} of {list(x)}")
        for name, s in (("gamma", gamma), ("beta", beta)):
            if int(np.prod(s)) != x[-1]:
                raise ValueError(f"NpuLayerNorm: {name} {list(s)} must have {x[-1]} elements")
        stats = tuple(x[:-1]) + (1,)
        return [tuple(x), stats, stats] if attrs.get("with_stats") else [tuple(x)]

    def compute(self, xs, attrs):
        x, gamma, beta = xs
        mean = x.mean(axis=-1, keepdims=True)
        var = np.square(x - mean).mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(var + attrs.get("epsilon", 1e-3))
        y = (x - mean) * inv * gamma.reshape(-1) + beta.reshape(-1)
        return [y, mean, inv] if attrs.get("with_stats") else y


# Activation gradients by forward activation: (incoming gradient, forward value) -> gradient.
# The forward value is the activation's input for Relu/Relu6/LeakyRelu and its output for
# Elu/Sigmoid/Tanh (what TF's *Grad ops read).
def activation_grads():
    """{activation: its gradient op} for the ops with the trait gradient_of."""
    return {get(name).gradient_of: get(name) for name in having("gradient_of")}


def activation_grad(activation, g, f, alpha):
    """The gradient op of `activation` on the incoming gradient g and the forward value f."""
    op = activation_grads()[activation]
    xs = [None, None]
    xs[op.gradient_inputs[0]], xs[op.gradient_inputs[1]] = g, f
    return op.compute(xs, {"alpha": alpha})


@register
class NpuFusedActivationGradBiasAddGrad(Op):
    """(gradient, forward value) -> (activation gradient, its BiasAddGrad), in one pass:
    attrs activation (one with a gradient op, activation_grads()), alpha, data_format (NHWC/NCHW,
    the BiasAddGrad's)."""
    internal = True
    type_attrs = {"T": FLOAT}

    def _axis(self, attrs, rank):
        return 1 if attrs.get("data_format", "NHWC") == "NCHW" and rank > 2 else rank - 1

    def shapes(self, shapes, attrs):
        g, f = shapes
        if tuple(g) != tuple(f) or len(g) < 2:
            raise ValueError(f"{self.name}: gradient {list(g)} and forward value {list(f)} "
                             f"must have one shape of rank >= 2")
        if attrs.get("activation") not in activation_grads():
            raise ValueError(f"{self.name}: activation {attrs.get('activation')!r} not "
                             f"supported; allowed: {', '.join(activation_grads())}")
        return [tuple(g), (g[self._axis(attrs, len(g))],)]

    def compute(self, xs, attrs):
        g, f = xs
        dx = activation_grad(attrs["activation"], g, f, attrs.get("alpha", 0.2))
        axis = self._axis(attrs, dx.ndim)
        return [dx, dx.sum(axis=tuple(i for i in range(dx.ndim) if i != axis))]
