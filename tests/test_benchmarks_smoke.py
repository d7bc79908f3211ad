"""The benchmark harness (benchmarks/run.py) on its smallest model: it runs, writes JSON and
markdown, and its numbers agree with each other. No timing is asserted: only that times exist."""
import json

import pytest

from benchmarks import report, run

ROW_KEYS = {"model", "mode", "batch", "graphs", "nodes_before", "nodes_after", "kernels",
            "transdata", "weight_transdata", "arena_bytes", "lower_bound_bytes", "no_reuse_bytes",
            "compile_seconds_cold", "compile_seconds_warm", "npu_kernels_per_step",
            "npu_tf_ops_outside_clusters", "npu_launches_per_step", "cpu_tf_ops_per_step",
            "launches_over_cpu_ops", "npu_step_seconds", "cpu_step_seconds", "speed_ratio"}


@pytest.fixture(scope="module")
def mlp_result(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bench") / "latest")
    assert run.main(["--models", "mlp", "--steps", "1", "--out", out]) == 0
    with open(out + ".json") as f, open(out + ".md") as g:
        return json.load(f), g.read()


def test_rows_have_every_field(mlp_result):
    result, _ = mlp_result
    assert [(r["model"], r["mode"]) for r in result["rows"]] == [("mlp", "train"), ("mlp", "infer")]
    for r in result["rows"]:
        assert ROW_KEYS <= set(r), ROW_KEYS - set(r)
    assert "python -m benchmarks.run" in result["command"]


def test_numbers_are_consistent(mlp_result):
    result, _ = mlp_result
    for r in result["rows"]:
        assert r["graphs"] >= 1 and r["nodes_before"] > 0 and r["nodes_after"] > 0
        # the step runs every compiled cluster once: each compiled kernel launches once
        assert r["npu_kernels_per_step"] == r["kernels"]
        assert r["npu_launches_per_step"] == r["kernels"] + r["npu_tf_ops_outside_clusters"]
        assert r["lower_bound_bytes"] <= r["arena_bytes"] <= r["no_reuse_bytes"]
        assert r["transdata"] + r["weight_transdata"] == r["top_kernels"].get("TransData", 0)
        assert r["cpu_tf_ops_per_step"] > 0
        assert r["npu_step_seconds"] > 0 and r["cpu_step_seconds"] > 0
        assert r["speed_ratio"] == pytest.approx(r["cpu_step_seconds"] / r["npu_step_seconds"])
        assert r["launches_over_cpu_ops"] == pytest.approx(
            r["npu_launches_per_step"] / r["cpu_tf_ops_per_step"])
        # warm: the recompile of a tiny inference graph can finish below the clock's resolution
        assert r["compile_seconds_cold"] > 0 and r["compile_seconds_warm"] >= 0
    train, infer = result["rows"]
    assert train["kernels"] > infer["kernels"]       # backward pass and optimizer update


def test_markdown_has_the_table_and_targets(mlp_result):
    result, md = mlp_result
    assert md == report.markdown(result)
    assert "| mlp | train |" in md and "| mlp | infer |" in md
    assert "Targets (issue 5)" in md


def test_bad_arguments_are_clear_errors(capsys):
    with pytest.raises(SystemExit) as e:
        run.parse_args(["--models", "mlp,nosuch"])
    assert e.value.code == 2
    assert "nosuch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.parse_args(["--modes", "fly"])
    with pytest.raises(SystemExit):
        run.parse_args(["--steps", "0"])


def test_update_doc_replaces_only_the_marked_section(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"intro\n{run.DOC_BEGIN}\nold\n{run.DOC_END}\noutro\n")
    run.update_doc("new table", str(doc))
    assert doc.read_text() == f"intro\n{run.DOC_BEGIN}\nnew table\n{run.DOC_END}\noutro\n"
    doc.write_text("no markers")
    with pytest.raises(ValueError, match="markers"):
        run.update_doc("x", str(doc))
