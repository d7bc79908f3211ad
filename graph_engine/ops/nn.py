"""Activations and their gradients, softmax, cross-entropy losses, BiasAdd/BiasAddGrad."""
import numpy as np

from graph_engine.ops.base import COMPLEX, FLOAT, INT, NUMBER, Op, broadcast, check_same_shapes, register
from graph_engine.ops.elementwise import Binary, Gradient, Unary


def _sigmoid(x):
    e = np.exp(-np.abs(x))                       # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# As TF (max(x, 0) propagating NaN): NaN stays NaN, -0 becomes +0.
@register
class Relu(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = epilogue = True
    type_attrs = {"T": NUMBER}
    fn = staticmethod(lambda x: np.maximum(x, 0))

@register
class Relu6(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = epilogue = True
    type_attrs = {"T": NUMBER}
    fn = staticmethod(lambda x: np.minimum(np.maximum(x, 0), 6))

@register
class Sigmoid(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = epilogue = True
    fn = staticmethod(_sigmoid)

@register
class Tanh(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = epilogue = True
    fn = np.tanh

@register
class Softplus(Unary):
    mixlist = "black"
    fusible = layout_agnostic = True
    fn = staticmethod(lambda x: np.logaddexp(x, 0))

@register
class Softsign(Unary):
    fusible = layout_agnostic = True
    fn = staticmethod(lambda x: x / (1 + np.abs(x)))


@register
class Elu(Unary):
    mixlist = "gray"
    fusible = layout_agnostic = epilogue = True
    fn = staticmethod(lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))))


@register
class LeakyRelu(Op):
    mixlist = "gray"
    layout_agnostic = epilogue = True
    arity = 1
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        return [shapes[0]]

    def compute(self, xs, attrs):
        return np.where(xs[0] > 0, xs[0], xs[0] * np.float32(attrs.get("alpha", 0.2)))


# Gradients: TF's argument order is (gradients, features) or, for the y-based ones, (y, dy).
@register
class ReluGrad(Gradient):
    mixlist = "gray"
    gradient_of = "Relu"
    fusible = layout_agnostic = True
    type_attrs = {"T": NUMBER}
    fn = staticmethod(lambda g, x: g * (x > 0))

@register
class Relu6Grad(Gradient):
    mixlist = "gray"
    gradient_of = "Relu6"
    fusible = layout_agnostic = True
    type_attrs = {"T": NUMBER}
    fn = staticmethod(lambda g, x: g * ((x > 0) & (x < 6)))

@register
class SigmoidGrad(Gradient):
    mixlist = "gray"
    gradient_of = "Sigmoid"
    gradient_inputs = (1, 0)
    fusible = layout_agnostic = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda y, dy: dy * y * (1 - y))

@register
class TanhGrad(Gradient):
    mixlist = "gray"
    gradient_of = "Tanh"
    gradient_inputs = (1, 0)
    fusible = layout_agnostic = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda y, dy: dy * (1 - y * y))

@register
class EluGrad(Gradient):  # TF tests outputs < 0: a NaN or zero output passes g through
    mixlist = "gray"
    gradient_of = "Elu"
    fusible = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda g, y: np.where(y < 0, g * (y + 1), g))


def _zero_if_no_grad(dy, grad):
    """TF's Sqrt/Rsqrt/Reciprocal gradients: 0 where dy is 0, even at y = 0, inf or NaN."""
    return np.where(dy == 0, np.zeros((), grad.dtype), grad)


@register
class RsqrtGrad(Gradient):
    mixlist = "black"
    fusible = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda y, dy: _zero_if_no_grad(dy, dy * -0.5 * y ** 3))

@register
class SqrtGrad(Gradient):
    mixlist = "black"
    fusible = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda y, dy: _zero_if_no_grad(dy, dy * 0.5 / y))

@register
class ReciprocalGrad(Gradient):
    fusible = True
    type_attrs = {"T": FLOAT + COMPLEX}         # complex64: -dy * conj(y)^2, as TF
    fn = staticmethod(lambda y, dy: _zero_if_no_grad(dy, -dy * np.conj(y) * np.conj(y)))

@register
class SoftplusGrad(Gradient):
    mixlist = "black"
    fusible = True
    type_attrs = {"T": FLOAT}
    fn = staticmethod(lambda g, x: g * _sigmoid(x))


@register
class LeakyReluGrad(Op):
    mixlist = "gray"
    gradient_of = "LeakyRelu"
    arity = 2
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        check_same_shapes(self.name, shapes)
        return [shapes[0]]

    def compute(self, xs, attrs):
        g, x = xs
        return np.where(x > 0, g, g * np.float32(attrs.get("alpha", 0.2)))


def _log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@register
class Softmax(Unary):
    mixlist = "black"
    elementwise_kernel = False
    inplace = False          # a row reduction, not elementwise (softmax.cc)
    fn = staticmethod(lambda x: np.exp(_log_softmax(x)))

    def shapes(self, shapes, attrs):
        if len(shapes[0]) < 1:
            raise ValueError(f"{self.name}: logits must have >= 1 dimension, got "
                             f"{list(shapes[0])}")
        return [shapes[0]]


@register
class LogSoftmax(Softmax):
    mixlist = "black"
    fn = staticmethod(_log_softmax)


@register
class SoftmaxCrossEntropyWithLogits(Op):
    """(features [B, C], labels [B, C]) -> (loss [B], backprop [B, C]); the two broadcast."""
    mixlist = "black"
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        out = broadcast(*shapes)
        if len(out) != 2:
            raise ValueError(f"logits and labels must be 2-D, got {[list(s) for s in shapes]}")
        return [out[:1], out]

    def compute(self, xs, attrs):
        features, labels = np.broadcast_arrays(*xs)
        log_p = _log_softmax(features)
        return -(labels * log_p).sum(axis=-1), np.exp(log_p) - labels


@register
class SparseSoftmaxCrossEntropyWithLogits(Op):
    """(features [B, C], labels [B] int) -> (loss [B], backprop [B, C]). A label outside
    [0, C) gives NaN in its row (TF's GPU behaviour; its CPU kernel raises instead)."""
    mixlist = "black"
    type_attrs = {"T": FLOAT, "Tlabels": INT}

    def shapes(self, shapes, attrs):
        f, l = shapes
        if len(f) != 2 or tuple(l) != f[:1]:
            raise ValueError(f"logits must be [batch, classes] and labels [batch], got "
                             f"{list(f)} and {list(l)}")
        if f[1] == 0 and f[0] > 0:                                # TF's check
            raise ValueError(f"Must have at least one class, but got logits shape {list(f)}")
        return [f[:1], f]

    def compute(self, xs, attrs):
        features, labels = xs
        n, classes = features.shape
        log_p = _log_softmax(features)
        valid = (labels >= 0) & (labels < classes)
        safe = np.where(valid, labels, 0)
        loss = -log_p[np.arange(n), safe]
        backprop = np.exp(log_p)
        backprop[np.arange(n), safe] -= 1
        loss = np.where(valid, loss, np.nan)
        backprop = np.where(valid[:, None], backprop, np.nan)
        return loss, backprop


def _channel_axis(attrs, rank):
    return 1 if attrs.get("data_format", "NHWC").startswith("NC") and rank >= 3 else rank - 1


@register
class BiasAdd(Op):
    mixlist = "gray"
    fusible = True
    functor = "Add"
    arity = 2
    inplace = True           # the elementwise Add kernel with a broadcast bias
    type_attrs = {"T": FLOAT + INT}

    def shapes(self, shapes, attrs):
        v, b = shapes
        if len(v) < 2:
            raise ValueError(f"BiasAdd: value must be at least 2-D, got {list(v)}")
        if len(b) != 1:
            raise ValueError(f"BiasAdd: bias must be 1-D, got {list(b)}")
        axis = _channel_axis(attrs, len(v))
        if v[axis] != b[0]:
            raise ValueError(f"BiasAdd: bias {list(b)} must match the channel dimension "
                             f"{axis} of value {list(v)} (data_format "
                             f"{attrs.get('data_format', 'NHWC')})")
        return [v]

    def compute(self, xs, attrs):
        v, b = xs
        axis = _channel_axis(attrs, v.ndim)
        return v + b.reshape((-1,) + (1,) * (v.ndim - 1 - axis))


@register
class BiasAddGrad(Op):
    mixlist = "gray"
    type_attrs = {"T": FLOAT + INT}

    def shapes(self, shapes, attrs):
        if len(shapes[0]) < 2:
            raise ValueError(f"BiasAddGrad: out_backprop must be at least 2-D, got "
                             f"{list(shapes[0])}")
        return [(shapes[0][_channel_axis(attrs, len(shapes[0]))],)]

    def compute(self, xs, attrs):
        g = xs[0]
        axis = _channel_axis(attrs, g.ndim)
        return g.sum(axis=tuple(a for a in range(g.ndim) if a != axis))
