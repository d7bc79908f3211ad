"""Compiling a cluster ahead (npu_device/compile_ahead.py): the partitioner writes the compile
request of an NpuGraphOp whose input shapes the graph fixes (partition/static_shapes.py), a
worker compiles it while TF prepares the step, and the first run takes that model."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2

from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler.cluster_op import CLUSTER_OPS, STATEFUL_CLUSTER_OP
from graph_engine.compiler.devtools import place
from graph_engine.compiler.partition import partition_graph_with_report
from npu_device import compile_ahead, compiler_bridge

NPU = "/device:NPU:0"
R = np.random.default_rng(3)
X = R.normal(size=(6, 5)).astype(np.float32)
W = R.normal(size=(5, 3)).astype(np.float32)


# ---- the partitioner's requests --------------------------------------------------------------

def _graph(x_shape=(6, 5), w_shape=(5, 3)):
    """x (a data arg) @ read(w) (a variable arg), then Relu: the shapes only on the args."""
    gd = graph_pb2.GraphDef()

    def node(name, op, inputs=(), **attrs):
        n = gd.node.add(name=name, op=op, input=list(inputs))
        for k, v in attrs.items():
            n.attr[k].CopyFrom(v)
        return n

    f32, res = types_pb2.DT_FLOAT, types_pb2.DT_RESOURCE
    x = dict(T=attr_util.make(type=f32), index=attr_util.make(0))
    if x_shape is not None:
        x["_output_shapes"] = attr_util.make(shapes=[list(x_shape)])
    node("x", "_Arg", **x)
    node("w", "_Arg", T=attr_util.make(type=res), index=attr_util.make(1),
         _handle_shapes=attr_util.make(shapes=[list(w_shape)]),
         _handle_dtypes=attr_util.make(types=[f32]))
    node("read", "ReadVariableOp", ["w"], dtype=attr_util.make(type=f32))
    node("mm", "MatMul", ["x", "read"], T=attr_util.make(type=f32))
    node("relu", "Relu", ["mm"], T=attr_util.make(type=f32))
    node("out", "_Retval", ["relu"], T=attr_util.make(type=f32), index=attr_util.make(0))
    return place(gd, fetches=["out"]).SerializeToString()


def test_partition_writes_the_request_when_the_graph_fixes_every_input_shape():
    result = partition_graph_with_report(_graph())
    (name, key), = result.clusters.items()
    shapes, request = result.requests[name]
    assert shapes == [(6, 5), (5, 3)]
    nd = node_def_pb2.NodeDef.FromString(request)
    assert nd.attr["cluster_key"].s.decode() == key
    # the cluster reads the weight itself (nothing in the graph writes it): a handle, read only
    assert nd.op == STATEFUL_CLUSTER_OP and list(nd.attr["variable_updates"].list.i) == [-1]
    assert attr_util.to_python(nd.attr["_input_shapes"]) == [[6, 5], [5, 3]]


@pytest.mark.parametrize("x_shape", [None, (-1, 5)])
def test_no_request_when_an_input_shape_is_open(x_shape):
    result = partition_graph_with_report(_graph(x_shape=x_shape))
    assert len(result.clusters) == 1 and result.requests == {}


# ---- the worker ------------------------------------------------------------------------------

class _Builds:
    """A build function whose calls are recorded and may be held until released."""

    def __init__(self):
        self.calls, self.release, self.started = [], threading.Event(), threading.Event()

    def __call__(self, request):
        self.calls.append(request)
        self.started.set()
        assert self.release.wait(10)
        if request == "fails":
            raise RuntimeError("cannot compile")
        return f"model of {request}"


def test_take_waits_for_a_running_job_and_drops_one_not_started():
    builds = _Builds()
    compile_ahead.submit("k-running", [[2]], "a", builds)
    assert builds.started.wait(10)
    compile_ahead.submit("k-queued", [[2]], "b", builds)
    assert compile_ahead.take("k-queued", [[2]]) is None       # not started: caller compiles
    threading.Timer(0.05, builds.release.set).start()
    result, waited = compile_ahead.take("k-running", [(2,)])    # shapes as lists or tuples
    assert result == "model of a" and waited > 0
    assert builds.calls == ["a"]                                # b never ran
    assert compile_ahead.take("k-running", [[2]]) is None       # taken once


def test_a_failed_job_is_compiled_again_by_the_request():
    builds = _Builds()
    builds.release.set()
    compile_ahead.submit("k-fails", [[1]], "fails", builds)
    assert builds.started.wait(10)
    assert compile_ahead.take("k-fails", [[1]]) is None
    assert builds.calls == ["fails"]


def test_jobs_nobody_takes_are_dropped_beyond_the_bound():
    builds = _Builds()
    compile_ahead.submit("k-hold", [[0]], "hold", builds)
    assert builds.started.wait(10)
    for i in range(compile_ahead.MAX_KEPT):              # every older job goes, running or not
        compile_ahead.submit(f"k-{i}", [[0]], f"r{i}", builds)
    assert compile_ahead.pending() == compile_ahead.MAX_KEPT
    assert compile_ahead.take("k-hold", [[0]]) is None
    builds.release.set()
    for _ in range(1000):
        if len(builds.calls) == compile_ahead.MAX_KEPT + 1:
            break
        threading.Event().wait(0.01)
    assert compile_ahead.take("k-0", [[0]])[0] == "model of r0"


# ---- end to end ------------------------------------------------------------------------------

def _first_call_models(fn, *args):
    events = compiler_bridge.start_recording()
    try:
        with tf.device(NPU):
            out = fn(*args)
    finally:
        compiler_bridge.stop_recording(events)
    return out, [e for e in events
                 if isinstance(e, compiler_bridge.ModelEvent) and e.op in CLUSTER_OPS]


def test_first_run_takes_the_model_compiled_ahead():
    with tf.device(NPU):
        w = tf.Variable(W)
    f = tf.function(lambda x: tf.nn.relu(tf.matmul(x, w)) * 2.0 + 1.0)
    out, models = _first_call_models(f, tf.constant(X))
    np.testing.assert_allclose(out.numpy(), np.maximum(X @ W, 0) * 2 + 1, rtol=1e-5, atol=1e-5)
    assert len(models) == 1 and models[0].waited is not None, models
    assert "ahead of its first run" in models[0].summary()
    assert compile_ahead.take(models[0].key, models[0].input_shapes) is None   # taken
    again, models = _first_call_models(f, tf.constant(X[:2]))   # a new shape: a new trace
    np.testing.assert_allclose(again.numpy(), out.numpy()[:2], rtol=1e-6)
    assert len(models) == 1 and models[0].waited is not None


def test_open_shapes_compile_on_request():
    f = tf.function(lambda x: tf.nn.relu(x) * 3.0,
                    input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    out, models = _first_call_models(f, tf.constant(X))
    np.testing.assert_allclose(out.numpy(), np.maximum(X, 0) * 3, rtol=1e-6)
    assert len(models) == 1 and models[0].waited is None


def test_exit_waits_for_the_running_compile_and_drops_queued_ones(tmp_path):
    """No compile may run while the interpreter tears down."""
    import subprocess
    import sys
    script = f"""
import threading, time
from npu_device import compile_ahead
started = threading.Event()
def build(request):
    started.set()
    time.sleep(0.5)
    open({str(tmp_path / 'done')!r} + request, 'w').close()
compile_ahead.submit("k1", [[1]], "1", build)
compile_ahead.submit("k2", [[1]], "2", build)
started.wait(10)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert (tmp_path / "done1").exists() and not (tmp_path / "done2").exists()
