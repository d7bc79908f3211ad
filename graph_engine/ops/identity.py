"""Ops that compute nothing: identities, NoOp, Const. The compiler removes identities and turns
constants into constant values, so no runtime kernel exists for them; their references serve
constant folding."""
from graph_engine.ops.base import ALL, Op, register


class IdentityLike(Op):
    type_attrs = {"T": ALL}
    trivial = True
    forwards_input = True
    runtime_kernel = False       # eliminate_identities forwards the inputs

    def shapes(self, shapes, attrs):
        return list(shapes)

    def compute(self, xs, attrs):
        return [x.copy() for x in xs]


@register
class Identity(IdentityLike): mixlist = "gray"
@register
class IdentityN(IdentityLike): mixlist = "gray"
@register
class Snapshot(IdentityLike): pass
@register
class StopGradient(IdentityLike): pass
@register
class PreventGradient(IdentityLike): pass


@register
class NoOp(Op):
    trivial = True
    runtime_kernel = False

    def shapes(self, shapes, attrs):
        return []

    def compute(self, xs, attrs):
        return []


@register
class Const(Op):
    """Its value is an attr; the compiler stores it in the model's constant blob."""
    type_attrs = {"dtype": ALL}
    trivial = True
    runtime_kernel = False       # a constant value of the model
