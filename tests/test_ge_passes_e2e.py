"""End to end with every optional pass off (fusion_switch_file {"ALL": "off"}) versus on: a
tf.function training step compiled by the graph engine and a Keras training run on the NPU give
the same results within 1e-5, and match TensorFlow on CPU; so does a CNN training step with any
single optional pass off."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from graph_engine.compiler import compile as compile_module
from graph_engine.compiler import model_format as mf
from graph_engine.compiler import options, pipeline, reference_executor

from test_ge_compile import cnn_args, cnn_step, compile_function, mlp_args, mlp_step

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture
def all_off(tmp_path):
    path = tmp_path / "switch.json"
    path.write_text(json.dumps({"ALL": "off"}))
    return str(path)


def test_tf_function_step_same_with_passes_off_and_on():
    args = mlp_args()
    results, kernels = {}, {}
    for mode, opts in (("on", {}), ("off", {"fusion_switch_file": {"ALL": "off"}})):
        model, inputs, routes = compile_function(mlp_step, args, opts)
        got = reference_executor.run(model, inputs)
        results[mode] = [np.asarray(got[routes[i]]) for i in range(len(routes))]
        meta = json.loads(mf.deserialize(model).metadata)
        kernels[mode] = len(meta["kernels"])
        skipped = {p["pass"] for p in meta["passes"] if "skipped" in p}
        assert skipped == (set(pipeline.switchable()) if mode == "off" else set())
    want = tf.function(mlp_step)(*args)
    for on, off, ref in zip(results["on"], results["off"], want):
        np.testing.assert_allclose(on, off, **TOL)
        np.testing.assert_allclose(on, np.asarray(ref), rtol=1e-4, atol=1e-5)
    assert kernels["on"] <= kernels["off"]


@pytest.mark.parametrize("name", pipeline.switchable())
def test_each_optional_pass_can_be_switched_off_alone(name):
    """Passes must not depend on an optional pass having run: any one of them off still gives
    a valid model with TF's results."""
    args = cnn_args()
    model, inputs, routes = compile_function(cnn_step, args, {"fusion_switch_file": {name: "off"}})
    meta = json.loads(mf.deserialize(model).metadata)
    assert {p["pass"] for p in meta["passes"] if "skipped" in p} == {name}
    got = reference_executor.run(model, inputs)
    for i, want in enumerate(tf.function(cnn_step)(*args)):
        np.testing.assert_allclose(got[routes[i]], np.asarray(want), rtol=1e-4, atol=1e-5,
                                   err_msg=f"output {i}")


def train(device, steps=4):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 12)).astype(np.float32)
    y = rng.integers(0, 5, 64).astype(np.int32)
    with tf.device(device):
        model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(16, activation="gelu"),
                                  keras.layers.LayerNormalization(), keras.layers.Dense(5)])
        model.compile(optimizer=keras.optimizers.SGD(0.05),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses = [float(model.train_on_batch(x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]))
                  for i in range(steps)]
        preds = model.predict_on_batch(x[:8])
    return losses, [w.numpy() for w in model.weights], np.asarray(preds)


@tf.function
def features(x, w):
    """Redundant on purpose: CSE and simplification change the compiled graph."""
    a = tf.nn.relu(tf.matmul(x, w))
    b = tf.nn.relu(tf.matmul(x, w)) * 1.0
    return tf.reduce_sum(tf.transpose(tf.transpose(a + b)) ** 2, axis=1)


def test_keras_training_and_tf_function_on_npu_same_with_passes_off_and_on(all_off):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    w = rng.standard_normal((12, 6)).astype(np.float32)
    runs = {}
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    try:
        for mode, switch in (("on", None), ("off", all_off)):
            npu_device.set_npu_config(fusion_switch_file=switch)
            compile_module.clear_recent()
            with tf.device(NPU):
                f = features(tf.constant(x), tf.constant(w)).numpy()
            runs[mode] = train(NPU) + (f,)
            compiled = compile_module.recent_compiles()
            assert compiled, "nothing was compiled for the NPU"
            # the options reached every compile: all optional passes skipped exactly when off
            assert all(any("skipped" in p for p in r["passes"]) == (mode == "off")
                       for r in compiled)
    finally:
        npu_device.set_npu_config(precision_mode=None, fusion_switch_file=None)
    (loss_on, w_on, p_on, f_on), (loss_off, w_off, p_off, f_off) = runs["on"], runs["off"]
    np.testing.assert_allclose(loss_on, loss_off, **TOL)
    for a, b in zip(w_on, w_off):
        np.testing.assert_allclose(a, b, **TOL)
    np.testing.assert_allclose(p_on, p_off, **TOL)
    np.testing.assert_allclose(f_on, f_off, **TOL)
    with tf.device(CPU):
        np.testing.assert_allclose(f_on, features(tf.constant(x), tf.constant(w)).numpy(),
                                   rtol=1e-5, atol=1e-4)
    loss_cpu = train(CPU)[0]
    np.testing.assert_allclose(loss_on, loss_cpu, rtol=1e-4, atol=1e-5)
