"""Tensor dumps (options enable_dump, dump_path, dump_step, dump_mode; docs/debugging.md) and
the precision compare tool python -m npu_device.tools.compare_dump.

Programs run in fresh interpreters (the dump options are process-wide and step numbers count a
compiled model's runs per process); each has a timeout."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import npu_device
from npu_device.tools.compare_dump import load_dump, metrics

TIMEOUT = 300

# A small conv + dense network with variables: inference graphs put the convolution in NC1HWC0
# with a FILTER_KN filter (docs/layouts.md), so dumps must convert both back.
PROGRAM = '''
import os
import sys
import numpy as np
import npu_device
import tensorflow as tf

weights = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights.npz"))
w1 = tf.Variable(weights["w1"])
b1 = tf.Variable(weights["b1"])
w2 = tf.Variable(weights["w2"])
b2 = tf.Variable(weights["b2"])


@tf.function
def forward(x):
    y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w1, 1, "SAME"), b1))
    y = tf.reshape(y, [-1, 8 * 8 * 8])
    return tf.nn.softmax(tf.matmul(y, w2) + b2)


def inputs(step=0):
    return [np.random.default_rng(100 + step).standard_normal((2, 8, 8, 3)).astype(np.float32)]


if __name__ == "__main__":
    for step in range(int(sys.argv[1])):
        forward(*inputs(step))
'''


def weights():
    rng = np.random.default_rng(7)
    return {"w1": (rng.standard_normal((3, 3, 3, 8)) * 0.3).astype(np.float32),
            "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((512, 5)) * 0.1).astype(np.float32),
            "b2": (rng.standard_normal(5) * 0.1).astype(np.float32)}


def x_of(step):
    return np.random.default_rng(100 + step).standard_normal((2, 8, 8, 3)).astype(np.float32)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    np.savez(tmp_path / "weights.npz", **weights())
    return path


def run(args, env, cwd):
    full = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
    r = subprocess.run([sys.executable, *map(str, args)], env=full, cwd=str(cwd),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def run_program(program, steps, **options):
    env = {f"NPU_{k.upper()}": str(v) for k, v in options.items()}
    return run([program, steps], env, program.parent)


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def test_dump_all_writes_logical_shapes_named_by_node_equal_to_tf(program, tmp_path):
    dump_dir = tmp_path / "dump"
    run_program(program, 1, enable_dump=1, dump_path=dump_dir, dump_mode="all")
    dump = load_dump(str(dump_dir))
    assert len(dump.models) == 1
    model = dump.models[0]
    assert sorted(model.steps) == [0]
    tensors = model.steps[0]
    formats = {t.format for t in tensors}
    assert {"NC1HWC0", "FILTER_KN", "ND"} <= formats, formats
    kinds = {t.kind for t in tensors}
    assert kinds == {"model_input", "input", "output"}
    with open(os.path.join(model.directory, "step0", "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["step"] == 0 and manifest["status"] == "ok" and manifest["dump_mode"] == "all"
    for entry in manifest["tensors"]:
        assert {"model", "step", "node", "kernel", "kind", "index", "dtype", "shape",
                "file"} <= set(entry)
    for t in tensors:
        name = os.path.basename(t.path)
        if t.kind == "model_input":
            assert name == f"model_input{t.index}.npy"
        else:
            assert name == f"{safe(t.node)}.{t.kind}{t.index}.npy", (name, t.node)
        array = t.load()
        assert array.shape == t.shape and str(array.dtype) == t.dtype   # logical TF shape
    # Every kernel of the model was dumped, under its node's name.
    assert {t.node for t in tensors if t.kind == "output"} == {k["node"] for k in model.kernels}

    import tensorflow as tf
    w = weights()
    x = x_of(0)
    with tf.device("/CPU:0"):
        relu = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w["w1"], 1, "SAME"), w["b1"])).numpy()
        out = tf.nn.softmax(tf.reshape(relu, [2, 512]) @ w["w2"] + w["b2"]).numpy()
    by_tensor = {}
    for t in tensors:
        by_tensor.setdefault(t.tf_tensor, []).append(t)
    np.testing.assert_array_equal(by_tensor["x:0"][0].load(), x)
    # The convolution's output as the NPU stored it (NC1HWC0), converted back, and after the
    # TransData to ND: both are TF's tensor.
    relus = by_tensor["Relu:0"]
    assert "NC1HWC0" in {t.format for t in relus}
    for t in relus:
        np.testing.assert_allclose(t.load(), relu, rtol=1e-5, atol=1e-5)
    filters = [t for t in tensors if t.format == "FILTER_KN"]
    assert filters
    for t in filters:
        np.testing.assert_array_equal(t.load(), w["w1"])
    np.testing.assert_allclose(by_tensor["Softmax:0"][0].load(), out, rtol=1e-5, atol=1e-6)

    # compare_dump agrees: every dumped tensor of this float32 run is TF's within rounding.
    report = tmp_path / "compare.json"
    r = run(["-m", "npu_device.tools.compare_dump", dump_dir, "--script", program,
             "--function", "forward", "--json", report],
            {}, tmp_path)
    assert "tensor(s) compared" in r.stdout
    result = json.loads(report.read_text())
    assert result["skipped"] == []
    ops = {row["op"] for row in result["rows"]}
    assert {"Relu", "Softmax", "x"} <= ops, ops
    for row in result["rows"]:
        assert row["max_rel"] < 1e-5 and row["cosine"] > 0.999999, row


def test_dump_step_selects_model_runs(program, tmp_path):
    dump_dir = tmp_path / "dump"
    run_program(program, 5, enable_dump=1, dump_path=dump_dir, dump_step="0|2-3")
    model = load_dump(str(dump_dir)).models[0]
    assert sorted(model.steps) == [0, 2, 3]
    for step, tensors in model.steps.items():
        assert {t.step for t in tensors} == {step}
        assert {t.kind for t in tensors} == {"model_input", "output"}   # default dump_mode
        x = next(t for t in tensors if t.tf_tensor == "x:0" and t.kind == "model_input")
        np.testing.assert_array_equal(x.load(), x_of(step))              # step N = N-th run

    # compare_dump on one step, the argument shapes taken from the dump (no inputs() here).
    program.write_text(PROGRAM.replace("def inputs(", "def example_inputs(")
                       .replace("forward(*inputs(", "forward(*example_inputs("))
    report = tmp_path / "compare.json"
    run(["-m", "npu_device.tools.compare_dump", dump_dir, "--script", program, "--function",
         "forward", "--step", "2", "--json", report], {}, tmp_path)
    rows = json.loads(report.read_text())["rows"]
    assert rows and {row["step"] for row in rows} == {2}
    assert all(row["max_rel"] < 1e-5 for row in rows), rows


def test_dump_mode_input_and_output_set_at_run_time_and_turned_off(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    code = f'''
        import numpy as np
        import npu_device
        import tensorflow as tf

        @tf.function
        def f(x):
            return tf.nn.relu(x * 3.0 - 1.0) @ tf.transpose(x)

        x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
        npu_device.set_npu_config(enable_dump=True, dump_path={str(a)!r}, dump_mode="input")
        f(x)
        npu_device.set_npu_config(dump_path={str(b)!r}, dump_mode="output")
        f(x)
        npu_device.set_npu_config(enable_dump=False)
        f(x)
    '''
    run(["-c", textwrap.dedent(code)], {}, tmp_path)
    inputs_only, outputs_only = load_dump(str(a)).models[0], load_dump(str(b)).models[0]
    assert sorted(inputs_only.steps) == [0] and sorted(outputs_only.steps) == [1]
    assert {t.kind for t in inputs_only.steps[0]} == {"model_input", "input"}
    assert {t.kind for t in outputs_only.steps[1]} == {"model_input", "output"}
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    want = np.maximum(x * 3 - 1, 0) @ x.T
    final = [t for t in outputs_only.steps[1] if t.kind == "output"][-1]
    np.testing.assert_allclose(final.load(), want, rtol=1e-5)


def test_overflow_records_the_kernel_whose_float16_store_overflowed(tmp_path):
    dump_dir = tmp_path / "dump"
    code = f'''
        import numpy as np
        import npu_device
        import tensorflow as tf
        npu_device.set_npu_config(precision_mode="force_fp16", enable_dump=True,
                                  dump_path={str(dump_dir)!r}, dump_step="100")

        @tf.function
        def f(x, w):
            return tf.nn.relu(tf.matmul(x, w) * 300.0)

        f(np.full((4, 8), 10.0, np.float32), np.full((8, 4), 10.0, np.float32))
        assert npu_device.precision.float_status()["overflow"]
    '''
    run(["-c", textwrap.dedent(code)], {}, tmp_path)
    model = load_dump(str(dump_dir)).models[0]
    assert model.steps == {}                           # dump_step 100 selects no run
    records = model.overflow[0]
    assert records and all(t.float_status == ("overflow",) for t in records)
    nodes = {t.node for t in records}
    assert len(nodes) == 1                             # only the kernel that overflowed
    kernel = next(k for k in model.kernels if k["node"] in nodes)
    assert kernel["kernel"] != "MatMul"                # 10*10*8 = 800 fits float16
    (inp,) = [t for t in records if t.kind == "input"]
    out = [t for t in records if t.kind == "output"][0]
    np.testing.assert_array_equal(inp.load(), np.full((4, 4), 800, np.float16))   # before it ran
    assert np.all(out.load() == 65504)                # saturated


def test_dump_and_profiling_options_fail_clearly_and_change_nothing(tmp_path):
    before = npu_device.get_npu_config()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="dump_path"):
        npu_device.set_npu_config(enable_dump=True)
    with pytest.raises(ValueError, match="dump_path.*cannot be used.*not a directory"):
        npu_device.set_npu_config(enable_dump=True, dump_path=str(a_file))
    with pytest.raises(ValueError, match="input, output, all"):
        npu_device.set_npu_config(dump_mode="inputs")
    with pytest.raises(ValueError, match="ends before it starts"):
        npu_device.set_npu_config(dump_step="5-2")
    with pytest.raises(ValueError, match="profiling_dir"):
        npu_device.set_npu_config(enable_profiling=True)
    with pytest.raises(ValueError, match="profiling_dir.*cannot be used"):
        npu_device.set_npu_config(enable_profiling=True, profiling_dir=str(a_file / "sub"))
    assert npu_device.get_npu_config() == before


def test_compare_dump_ranks_float16_errors_worst_first(program, tmp_path):
    dump_dir = tmp_path / "dump"
    run_program(program, 2, enable_dump=1, dump_path=dump_dir, dump_step="1",
                precision_mode="force_fp16")
    report = tmp_path / "compare.json"
    r = run(["-m", "npu_device.tools.compare_dump", dump_dir, "--script", program,
             "--function", "forward", "--json", report, "--top", "5"], {}, tmp_path)
    header = r.stdout.splitlines()[1]
    assert "op (TF node)" in header and "max_rel" in header and "cosine" in header
    result = json.loads(report.read_text())
    assert result["sort"] == "max_rel" and result["skipped"] == []
    rows = result["rows"]
    assert {"op", "tensor", "model", "step", "node", "kernel", "kind", "dtype", "format", "shape",
            "file", "max_abs", "max_rel", "mean_abs", "cosine"} <= set(rows[0])
    assert {row["step"] for row in rows} == {1}
    rels = [row["max_rel"] for row in rows]
    assert rels == sorted(rels, reverse=True)
    # float16 compute: the network's ops are off by float16 rounding, and rank first.
    assert rels[0] > 2e-4
    top = {row["op"] for row in rows[:4]}
    assert top & {"Relu", "Softmax", "add", "MatMul"}, rows[:4]
    assert all(row["cosine"] > 0.999 for row in rows)
    # The CPU recomputation used the dumped inputs of step 1, not this process's variables.
    x = next(row for row in rows if row["op"] == "x")
    assert x["max_rel"] < 1e-3                         # only the float16 rounding of x


def test_compare_metrics():
    m = metrics(np.array([1.0, 2.0, 4.0], np.float16), np.array([1.0, 2.0, 3.0], np.float32))
    assert m["max_abs"] == 1.0 and m["max_rel"] == pytest.approx(1 / 3)
    assert m["mean_abs"] == pytest.approx(1 / 3) and 0.98 < m["cosine"] < 1
    assert metrics(np.ones(3), np.ones(3))["cosine"] == 1.0
    nan = metrics(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    assert nan["max_abs"] == float("inf") and nan["nonfinite_mismatches"] == 1
