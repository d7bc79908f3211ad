"""Pass infrastructure: the pass log (time, nodes before/after, statistics) in the compiled
model's metadata, per-pass switches (fusion_switch_file: parsing, errors, the option, passes
added later), IR dumps (text and Graphviz dot) and internal-error reporting."""
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from graph_engine.compiler import compile as compile_module
from graph_engine.compiler import dump, model_format as mf, pass_switches, pipeline
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.pipeline import PassManager
from graph_engine.compiler.passes import infer_shapes
from npu_device.configuration import options as npu_options
from npu_device.configuration.state import Config

from test_ge_canonicalize import SPECIAL, Builder
from test_ge_compile import compile_function

R = np.random.default_rng(5)
OPTIONAL = ("eliminate_common_subexpressions", "simplify_algebra")


def redundant(x, w):
    """CSE and simplification both have work here: a duplicated branch, x*1, Neg(Neg)."""
    a = tf.nn.relu(tf.matmul(x, w))
    b = tf.nn.relu(tf.matmul(x, w))
    return [-(-(a + b)) * tf.ones_like(a), tf.transpose(tf.transpose(a))]


ARGS = [R.standard_normal((4, 6)).astype(np.float32), R.standard_normal((6, 5)).astype(np.float32)]


def compile_with(fn, args, **opts):
    model = mf.deserialize(compile_function(fn, args, opts)[0])
    return model, json.loads(model.metadata)


def write(tmp_path, obj, name="switch.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


# ---- the pass log ----------------------------------------------------------------------------

def test_metadata_records_every_pass_with_nodes_time_and_stats():
    _, meta = compile_with(redundant, ARGS)
    log = meta["passes"]
    ran = [p["pass"] for p in log]
    # every pass of the pipeline up to serialize (which writes the metadata) in order
    assert ran == [name for name, _ in pipeline.PASSES][:len(ran)] and "plan_memory" in ran
    for p in log:
        assert p["nodes_before"] >= 0 and p["nodes"] >= 0 and p["ms"] >= 0
        assert isinstance(p["stats"], dict)
    by_name = {}
    for p in log:
        by_name.setdefault(p["pass"], []).append(p)
    assert by_name["eliminate_common_subexpressions"][0]["stats"]["merged"] >= 2
    assert by_name["simplify_algebra"][0]["stats"].get("Neg(Neg(x))") == 1
    for dce in by_name["eliminate_dead_code"]:
        assert dce["nodes"] == dce["nodes_before"] - dce["stats"]["removed"]
    assert sum(d["stats"]["removed"] for d in by_name["eliminate_dead_code"]) > 0
    assert compile_module.recent_compiles()[-1]["passes"] == log


def test_switch_file_turns_passes_off_and_the_log_says_so(tmp_path):
    on, _ = compile_with(redundant, ARGS)
    switches = pass_switches.load(write(tmp_path, {"ALL": "off"}))
    off, meta_off = compile_with(redundant, ARGS, fusion_switch_file=switches)
    skipped = {p["pass"] for p in meta_off["passes"] if "skipped" in p}
    assert skipped == set(pipeline.switchable())
    ran = {p["pass"] for p in meta_off["passes"] if "skipped" not in p}
    assert ran >= set(pipeline.REQUIRED) - {"serialize"}
    assert len(off.kernels) > len(on.kernels)          # the duplicate branch stays when off
    assert meta_off["options"]["fusion_switch_file"] == {"ALL": "off"}


# ---- switch files ----------------------------------------------------------------------------

def test_switch_file_formats(tmp_path):
    flat = pass_switches.load(write(tmp_path, {"ALL": "OFF", "simplify_algebra": " on "}))
    assert flat == {"ALL": "off", "simplify_algebra": "on"}
    assert pass_switches.enabled("simplify_algebra", flat)
    assert not pass_switches.enabled("eliminate_common_subexpressions", flat)
    assert pass_switches.enabled("eliminate_common_subexpressions", {})
    ascend = {"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"simplify_algebra": "on"}}}
    assert pass_switches.load(write(tmp_path, ascend)) == flat
    assert pass_switches.load(json.dumps({"simplify_algebra": "off"})) == \
        {"simplify_algebra": "off"}                    # JSON text works too
    assert pass_switches.load({}) == {}


@pytest.mark.parametrize("content,problem", [
    ({"no_such_pass": "off"}, r"'no_such_pass' is not a pass; switchable names: ALL, "),
    ({"precision": "off"}, r"'precision' is required and cannot be switched off"),
    ({"lower": "off"}, r"'lower' is required"),
    ({"simplify_algebra": "disabled"}, r"value 'disabled' for 'simplify_algebra' is not "
                                       r"allowed; values: on, off"),
    ({"simplify_algebra": False}, r"value False .* values: on, off"),
    ('{"ALL": "off",}', r"is not valid JSON"),
    ('["simplify_algebra"]', r"the top level must be a JSON object, got list"),
    ({"Switch": ["ALL"]}, r'"Switch" must map GraphFusion / UBFusion to objects'),
])
def test_switch_file_errors_name_the_file_the_problem_and_the_choices(tmp_path, content,
                                                                       problem):
    path = write(tmp_path, content)
    with pytest.raises(ValueError, match=problem) as err:
        pass_switches.load(path)
    assert path in str(err.value)
    if "switchable names" in problem:
        for name in pipeline.switchable():
            assert name in str(err.value)


def test_unreadable_switch_file(tmp_path):
    missing = str(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=re.escape(f"cannot read file {missing!r}")):
        pass_switches.load(missing)


def test_option_validates_when_set_and_is_part_of_the_fingerprint(tmp_path):
    config = Config(environ={})
    base = config.snapshot().fingerprint
    config.set(fusion_switch_file=write(tmp_path, {"ALL": "off"}))
    assert config.values()["fusion_switch_file"] == {"ALL": "off"}
    assert config.snapshot().fingerprint != base
    bad = write(tmp_path, {"simplify": "off"}, "bad.json")
    with pytest.raises(ValueError) as err:
        config.set(fusion_switch_file=bad)
    message = str(err.value)
    assert "'fusion_switch_file'" in message and bad in message and "simplify_algebra" in message
    assert npu_options.BY_NAME["fusion_switch_file"].allowed in message
    assert config.values()["fusion_switch_file"] == {"ALL": "off"}    # unchanged
    config.set(fusion_switch_file=None, dump_graph_path=str(tmp_path))
    assert config.snapshot().fingerprint != base
    env = Config(environ={"NPU_FUSION_SWITCH_FILE": write(tmp_path, {"simplify_algebra": "off"})})
    assert env.values()["fusion_switch_file"] == {"simplify_algebra": "off"}


def test_passes_added_to_the_pipeline_are_switchable(monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "PASSES",
                        pipeline.PASSES[:1] + [("my_new_pass", lambda c: calls.append(1))])
    assert "my_new_pass" in pipeline.switchable()
    switches = pass_switches.load({"my_new_pass": "off"})
    b = Builder()
    c = b.ret(b.op("Neg", b.arg(SPECIAL)))
    c.options = {"fusion_switch_file": switches}
    pipeline.pipeline().run(c)
    assert calls == [] and c.log[-1] == {"pass": "my_new_pass",
                                         "skipped": "switched off by fusion_switch_file"}


def test_malformed_switches_in_compile_options_are_a_compile_error():
    b = Builder()
    c = b.ret(b.op("Neg", b.arg(SPECIAL)))
    c.options = {"fusion_switch_file": {"lower": "off"}}
    with pytest.raises(CompileError, match="fusion_switch_file: .*'lower' is required"):
        PassManager([("infer_shapes", infer_shapes.run)], ["infer_shapes"]).run(c)


# ---- pass errors -----------------------------------------------------------------------------

def test_pass_bugs_are_reported_with_the_pass_name():
    def broken(c):
        raise KeyError("oops")

    def wrong_stats(c):
        return [1]

    def dangling(c):
        (neg,) = [n for n in c.graph if n.op == "Neg"]
        c.graph.remove(neg.inputs[0].node)

    for fn, message in ((broken, r"internal error in compiler pass 'bad' .*KeyError"),
                        (wrong_stats, r"pass 'bad' returned list, expected a statistics dict"),
                        (dangling, r"pass 'bad' left input _arg of node 'neg' pointing at a "
                                   r"removed node")):
        b = Builder()
        c = b.ret(b.op("Neg", b.arg(SPECIAL)))
        with pytest.raises(CompileError, match=message):
            PassManager([("bad", fn)]).run(c)


# ---- dumps -----------------------------------------------------------------------------------

def parse_dot(text):
    """Minimal Graphviz check: one digraph, declared nodes, edges between declared nodes."""
    lines = text.strip().splitlines()
    assert lines[0].startswith("digraph ") and lines[0].endswith("{") and lines[-1] == "}"
    nodes, edges = set(), []
    for line in lines[1:-1]:
        line = line.strip()
        assert line.endswith(";"), line
        edge = re.fullmatch(r'"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)" \[(.*)\];', line)
        node = re.fullmatch(r'"((?:[^"\\]|\\.)*)" \[label="((?:[^"\\]|\\.)*)"(.*)\];', line)
        if edge:
            edges.append((edge.group(1), edge.group(2), edge.group(3)))
        elif node:
            nodes.add(node.group(1))
        else:
            assert line.startswith("node ["), line
    assert all(a in nodes and b in nodes for a, b, _ in edges)
    return nodes, edges


def test_dumps_after_each_pass_are_written_and_well_formed(tmp_path):
    b = Builder()
    x = b.arg(SPECIAL.reshape(2, 4))
    gate = b.op("Exp", x)
    y = b.op("Mul", b.op("Neg", b.op("Neg", x)), b.const(np.ones(4)), control=[gate.node])
    c = b.ret(y, gate)
    c.name = "my graph/with:odd*chars"
    c.options = {"dump_graph_path": str(tmp_path)}
    pipeline.pipeline().run(c)
    (folder,) = os.listdir(tmp_path)
    assert folder == dump.sanitize(c.name) == "my_graph_with_odd_chars"
    files = sorted(os.listdir(tmp_path / folder))
    ran = [p["pass"] for p in c.log if "skipped" not in p]
    assert files == sorted(f"{i:02d}_{name}.{ext}" for i, name in enumerate(["input"] + ran)
                           for ext in ("txt", "dot"))
    text = (tmp_path / folder / "00_input.txt").read_text()
    assert "mul = Mul(neg_1, const, ^exp)" in text and ":0 float32[2,4] ND" in text
    assert "const" in text.split("const = Const()")[1].splitlines()[1]    # constant-ness
    nodes, edges = parse_dot((tmp_path / folder / "00_input.dot").read_text())
    assert {"_arg", "mul", "exp"} <= nodes
    assert ("exp", "mul", 'style=dashed, label="ctrl"') in edges
    final = (tmp_path / folder / f"{len(ran):02d}_{ran[-1]}.txt").read_text()
    assert "= Neg(" not in final and "= Mul(" not in final and "= Exp(" in final
    for f in files:
        if f.endswith(".dot"):
            parse_dot((tmp_path / folder / f).read_text())
    # a second compile of the same graph name gets its own directory
    c2 = Builder()
    c2 = c2.ret(c2.op("Neg", c2.arg(SPECIAL)))
    c2.name, c2.options = c.name, c.options
    pipeline.pipeline().run(c2)
    assert sorted(os.listdir(tmp_path)) == [folder, folder + ".1"]


def test_dump_shows_formats_and_unwritable_directories_fail_clearly(tmp_path):
    b = Builder()
    c = b.ret(b.op("Neg", b.arg(SPECIAL)))
    infer_shapes.run(c)
    c.graph["neg"].outputs[0].format = mf.Format.NC1HWC0
    assert ":0 float32[8] NC1HWC0" in dump.to_text(c.graph, "t")
    blocker = tmp_path / "file"
    blocker.write_text("")
    c.options = {"dump_graph_path": str(blocker)}
    with pytest.raises(CompileError, match="dump_graph_path: cannot create dump directory"):
        PassManager([]).run(c)


def test_docs_list_every_pass_and_the_required_ones():
    doc_path = os.path.join(os.path.dirname(__file__), "..", "docs", "passes.md")
    with open(doc_path) as f:
        text = f.read()
    missing = [name for name, _ in pipeline.PASSES if f"`{name}`" not in text]
    assert not missing, f"docs/passes.md does not describe {missing}"
    for name in pipeline.REQUIRED:
        assert re.search(rf"\| `{name}`[^|]*\| yes \|", text), name


def test_rewrites_that_forward_inputs_to_outputs_compile_and_run_natively():
    """x*1 and Neg(Neg(x)) make outputs read the graph input directly, and CSE makes two
    outputs read one value: the compiled model must still load and run."""
    from test_kernels_harness import C
    b = Builder()
    x = b.arg(SPECIAL)
    one = b.const(np.ones(8, np.float32))
    c = b.ret(b.op("Mul", x, one), b.op("Exp", x), b.op("Neg", b.op("Neg", x)),
              b.op("Exp", x))
    pipeline.pipeline().run(c)
    assert [k.kernel for k in c.model.kernels] == ["Exp"]
    got = C.load_model(mf.serialize(c.model)).run([SPECIAL])
    with np.errstate(over="ignore"):
        want = [SPECIAL, np.exp(SPECIAL), SPECIAL, np.exp(SPECIAL)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
