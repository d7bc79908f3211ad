"""graph_engine/ops/supported_ops.json is generated from the op registry and must be current;
the registry's declarations must agree with TensorFlow's op definitions."""
import json

import pytest
from tensorflow.python.framework import op_def_registry

from graph_engine import ops
from graph_engine.compiler import supported_ops


def test_supported_ops_json_is_up_to_date():
    with open(supported_ops.PATH) as f:
        current = f.read()
    assert current == supported_ops.render(), \
        f"graph_engine/ops/supported_ops.json is stale; run: {supported_ops.COMMAND}"


def test_check_mode_reports_staleness(tmp_path, monkeypatch, capsys):
    assert supported_ops.main(["--check"]) == 0
    monkeypatch.setattr(supported_ops, "PATH", str(tmp_path / "missing.json"))
    assert supported_ops.main(["--check"]) == 1
    assert supported_ops.COMMAND in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(ops.registered()))
def test_registry_matches_tf_op_def(name):
    op, od = ops.get(name), op_def_registry.get(name)
    assert od is not None, f"{name} is not a TF op"
    inputs = [a.name for a in od.input_arg]
    assert set(op.const_inputs) <= set(inputs), f"{name}: const inputs {op.const_inputs}"
    attrs = {a.name: a for a in od.attr}
    for attr, allowed in op.type_attrs.items():
        assert attr in attrs and attrs[attr].type in ("type", "list(type)"), f"{name}.{attr}"
        tf_allowed = set(attrs[attr].allowed_values.list.type)
        assert not tf_allowed or set(allowed) <= tf_allowed, f"{name}.{attr}: {allowed}"


def test_json_lists_host_memory_inputs():
    table = json.loads(supported_ops.render())["ops"]
    assert table["Reshape"]["host_memory_inputs"] == ["shape"]
    assert table["Conv2DBackpropInput"]["host_memory_inputs"] == ["input_sizes"]
    assert table["MatMul"]["type_attrs"]["T"][:3] == ["DT_FLOAT", "DT_HALF", "DT_BFLOAT16"]
    assert {"T": "DT_INT32"} in table["AddV2"]["tf_default_kernels"]


def test_every_op_the_npu_claims_has_a_runtime_kernel():
    """An op TF places on the NPU must be executable there: it either has a C++ kernel or the
    compiler always folds it away (runtime_kernel false)."""
    from npu_device import _C
    with open(supported_ops.PATH) as f:
        table = json.load(f)["ops"]
    needed = {name for name, entry in table.items() if entry["runtime_kernel"]}
    assert needed - set(_C.registered_kernels()) == set()
