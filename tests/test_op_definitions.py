"""An op is defined once, on its class in graph_engine/ops (CONTRIBUTING.md, "How to add an op"):
these checks hold every definition to what the passes and the C++ kernels take from it. The
other steps of the checklist are checked where they live: the generated files are current and
every op the NPU claims has a C++ kernel (test_ge_supported_ops.py), every op has a case that
runs it against TF (test_ge_ops.py's test_every_op_is_tested)."""
import os
import re

import pytest

from graph_engine import ops
from graph_engine.ops import base, fused

FUNCTORS_H = os.path.join(os.path.dirname(ops.__file__), os.pardir, "runtime", "kernels",
                          "elementwise_functors.h")
ALL_OPS = {**ops.registered(), **ops.internal()}


def _functors():
    with open(FUNCTORS_H) as f:
        text = f.read()
    return set(re.findall(r"^(?:struct |NPU_(?:UNARY|BINARY|VECTOR_UNARY)\()(\w+)", text, re.M))


@pytest.mark.parametrize("name", sorted(set(ALL_OPS) - {"Const"}))   # a Const is its value
def test_an_op_has_a_shape_function_and_a_reference(name):
    op = type(ALL_OPS[name])
    assert op.shapes is not base.Op.shapes, f"{name}: no shapes()"
    assert op.compute is not base.Op.compute, f"{name}: no compute() (numpy reference)"


def test_every_elementwise_trait_names_a_functor_of_the_header():
    functors = _functors()
    users = {n: op.functor for n, op in ALL_OPS.items() if op.functor}
    users.update({n: n for n in fused.PATTERN_ACTIVATIONS})
    missing = {n: f for n, f in users.items() if f not in functors}
    assert not missing, f"functors missing from elementwise_functors.h: {missing}"
    assert {"Relu", "Add", "Select", "GeluTanh"} <= set(users.values())


def test_elementwise_traits_are_consistent():
    for name in ops.having("fusible"):
        op = ops.get(name)
        assert op.arity in (1, 2, 3, -1), f"{name}: arity {op.arity}"
        assert op.runtime_kernel, f"{name}: a fusible op needs its own kernel too"
    assert set(ops.having("integer_math")) <= set(ops.having("fusible"))
    for name in ops.having("layout_agnostic") + ops.having("epilogue"):
        assert ops.get(name).runtime_kernel and ops.get(name).arity, name
    assert not set(ops.having("forwards_input")) & set(ops.having("reshapes"))
    assert all(ops.get(n).aliases_input for n in ops.having("reshapes"))


def test_unknown_ops_have_no_traits():
    assert not ops.has("NoSuchOp", "fusible")
    assert ops.has("AddV2", "commutative_add") and not ops.has("Sub", "commutative_add")


def test_a_fusible_op_must_declare_its_arity():
    class Fusible(base.Op):
        fusible = True
    with pytest.raises(ValueError, match="declares no arity"):
        base.register(Fusible)
    assert ops.get("Fusible") is None
