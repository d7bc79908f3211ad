"""npu_device.explain, log_compile_summary and the runtime counters: what a user sees about where
ops ran and what was compiled."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import logging

import numpy as np
import pytest
import tensorflow as tf

from npu_device import compiler_bridge
from npu_device.explain import explain

NPU = "/device:NPU:0"
X = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)


@tf.function
def model(x):
    with tf.device(NPU):
        h = tf.nn.relu(tf.matmul(x, x, transpose_b=True) + 1.0)
        text = tf.strings.as_string(h)                  # strings never run on the NPU
        return tf.reduce_sum(h, axis=1), tf.strings.length(text)


def test_explain_is_public():
    assert npu_device.explain is explain


def test_explain_reports_placement_clusters_and_kernels():
    model(tf.constant(X))                       # already traced and optimized: explain retraces
    e = explain(model, tf.constant(X))
    total, lengths = e.outputs
    h = np.maximum(X @ X.T + 1.0, 0)
    np.testing.assert_allclose(total.numpy(), h.sum(axis=1), rtol=1e-5)
    assert lengths.shape == (4, 4)

    assert len(e.graphs) == 1, str(e)           # Grappler's second pass is folded into the first
    g = e.graphs[0]
    assert len(g.report.clusters) == 1
    (cluster, members), = g.report.clusters.items()
    assert {"MatMul", "AddV2", "Relu", "Sum"} <= {n.op for n in g.report.nodes
                                                   if n.cluster == cluster}
    kernels = [k for m in g.models[cluster] for k in m.kernels]
    assert "MatMul" in kernels and "NpuElementwise" in kernels   # + 1.0 and Relu fused
    # the lengths are made on the CPU and returned from there (partition/cpu_results.py)
    assert e.ops_on("cpu") == {"AsString": 1, "StringLength": 1, "_Retval": 1}
    assert all(n.reason for n in e.fallbacks() if n.placement == "cpu")

    text = str(e)
    assert f"cluster {cluster}" in text and "kernels: " in text
    mem = g.models[cluster][0].memory()
    assert 0 < mem["lower_bound_bytes"] <= mem["arena_bytes"] <= mem["no_reuse_bytes"], mem
    assert f"memory {mem['arena_bytes']} bytes planned, lower bound" in text
    header = next(line.split() for line in text.splitlines() if "runs on" in line)
    assert header == ["node", "op", "runs", "on", "why"], text
    assert "AsString" in text and "CPU" in text


def test_explain_keeps_the_input_signature():
    sig = tf.function(lambda x: tf.nn.relu(x) * 2.0,
                      input_signature=[tf.TensorSpec([None, 5], tf.float32)])

    def on_npu(x):
        with tf.device(NPU):
            return sig.python_function(x)

    wrapped = tf.function(on_npu, input_signature=sig.input_signature)
    e = explain(wrapped, tf.constant(X))
    np.testing.assert_allclose(e.outputs.numpy(), np.maximum(X, 0) * 2.0)
    assert e.graphs and "Relu" in e.ops_on("npu"), str(e)


def test_explain_shows_a_failed_partition(monkeypatch):
    def refuse(request):
        raise ValueError("partitioner unavailable in this test")

    monkeypatch.setattr(compiler_bridge, "_partition", refuse)
    e = explain(lambda x: tf.nn.relu(x) + 1.0, tf.constant(X))
    np.testing.assert_allclose(e.outputs.numpy(), np.maximum(X, 0) + 1.0)  # still correct
    assert e.failures and not e.graphs
    assert "FAILED" in str(e) and "partitioner unavailable in this test" in str(e)


def test_explain_rejects_a_non_function():
    with pytest.raises(TypeError, match="function"):
        explain(42)


def test_log_compile_summary(caplog):
    npu_device.set_npu_config(log_compile_summary=True)
    try:
        with caplog.at_level(logging.INFO, logger="npu_device"):
            tf.function(lambda x: tf.nn.sigmoid(x) * 3.0)(tf.constant(X))
    finally:
        npu_device.set_npu_config(log_compile_summary=None)
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("npu_device: graph ") and "cluster" in m and " ms" in m
               for m in lines), lines
    assert any(m.startswith("npu_device: compiled cluster") and "kernel" in m for m in lines), lines
    caplog.clear()
    tf.function(lambda x: tf.nn.sigmoid(x) * 4.0)(tf.constant(X))
    assert not [r for r in caplog.records if r.getMessage().startswith("npu_device: graph")]


def test_counters_count_what_the_sim_ran():
    c = npu_device.counters()
    assert set(c) == {"models_loaded", "models_run", "kernels_executed", "conversions_reused",
                      "kernels_run_concurrently", "weights_kept"}
    f = tf.function(lambda x: tf.nn.tanh(x) - 1.0)
    with tf.device(NPU):
        x = tf.constant(X)
    f(x)
    before = npu_device.counters()
    for _ in range(3):
        f(x)
    after = npu_device.counters()
    assert after["models_run"] - before["models_run"] == 3
    assert after["kernels_executed"] - before["kernels_executed"] >= 3
    assert after["models_loaded"] == before["models_loaded"]
