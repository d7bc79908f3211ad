"""Keras CNN inference graphs compiled with the layout passes on and off: same results (1e-4,
reference executor and the C++ runtime), and at most 2 TransData in the compiled model's
kernel list, none of them for filters (they fold; docs/layouts.md)."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from graph_engine.compiler import model_format as mf
from graph_engine.compiler import reference_executor
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.compile import compilation_for
from graph_engine.compiler.pipeline import pipeline
from graph_engine.compiler.devtools import cluster_request, place
from test_kernels_harness import C

LAYOUT_OFF = {"assign_formats": "off"}      # nothing marked: no conversions anywhere


def small_cnn():
    return keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.ZeroPadding2D(1),
        keras.layers.Conv2D(20, 3, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(24, 3, padding="same", use_bias=False),
        keras.layers.ReLU(6.0),
        keras.layers.AveragePooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(5),
    ])


def mobilenet_v2():
    # Logits: with weights=None the features shrink to ~1e-12 and softmax would be uniform.
    return keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, classes=7,
                                          classifier_activation=None)


def compile_inference(model, x, switches):
    """The compiled model (mf.Model) of model(x, training=False) as one NPU cluster."""
    fn = tf.function(lambda t: model(t, training=False)).get_concrete_function(
        tf.TensorSpec(x.shape, tf.float32))
    fn = convert_variables_to_constants_v2(fn)     # weights become constants
    fetches = [t.name.split(":")[0] for t in fn.outputs]
    placed = place(fn.graph.as_graph_def(), fetches=fetches)
    part = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    clusters = [n for n in part.node if n.op == "NpuGraphOp"]
    assert len(clusters) == 1, [n.op for n in part.node]
    req = cluster_request(clusters[0], [x])
    opts = json.loads(req.attr["options"].s or b"{}")
    opts["fusion_switch_file"] = switches
    req.attr["options"].s = json.dumps(opts).encode()
    return pipeline().run(compilation_for(req.SerializeToString())).model


def transdata_kinds(model):
    kinds = [(k.attrs["src_format"], k.attrs["dst_format"]) for k in model.kernels
             if k.kernel == "TransData"]
    filters = sum(dst in (mf.Format.FRACTAL_Z, mf.Format.FILTER_KN) for _, dst in kinds)
    return len(kinds) - filters, filters


@pytest.mark.parametrize("make", [small_cnn, mobilenet_v2], ids=["cnn", "mobilenet_v2"])
def test_frozen_cnn_inference_has_at_most_two_transdata_and_unchanged_results(make):
    keras.utils.set_random_seed(0)
    model = make()
    x = np.random.default_rng(1).standard_normal((2, *model.input_shape[1:])).astype(np.float32)
    want = model(x, training=False).numpy()
    on = compile_inference(model, x, {})
    off = compile_inference(model, x, LAYOUT_OFF)
    feeds = [x]
    activations, filters = transdata_kinds(on)
    assert activations <= 2 and filters == 0
    assert transdata_kinds(off) == (0, 0)
    assert any(v.format == mf.Format.NC1HWC0 for v in on.values)
    assert np.std(want) > 0                              # a result that can tell kernels apart
    atol = 1e-4 * np.max(np.abs(want))                   # relative to the result's scale
    got_on = reference_executor.run(on, feeds)[0]
    got_off = reference_executor.run(off, feeds)[0]
    np.testing.assert_allclose(got_on, got_off, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(got_on, want, rtol=1e-4, atol=atol)
    device = C.load_model(mf.serialize(on)).run(feeds)[0]       # the 5HD kernels themselves
    np.testing.assert_allclose(device, got_off, rtol=1e-4, atol=atol)
