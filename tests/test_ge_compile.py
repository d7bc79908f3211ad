"""compile_model end to end: forward+backward graphs traced from tf.function are partitioned,
compiled with concrete shapes and run by the reference executor; results match TF on CPU.
Also the memory plan, folding into kernels, errors, metadata and the compile cache."""
import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler import attrs as attr_util
from graph_engine.compiler import compile as compile_module
from graph_engine.compiler import model_format as mf
from graph_engine.compiler import reference_executor
from graph_engine.compiler.api import CompileError, compile_model, compile_model_with_report
from graph_engine.compiler.devtools import cluster_request, op_request, single_cluster

R = np.random.default_rng(2)


def compile_function(fn, args, options=None):
    """Traces fn, places it on the NPU, partitions it into exactly one cluster (which carries
    the compile options `options`) and compiles that cluster. Returns (model bytes, cluster
    inputs, {fetch index: cluster output index})."""
    cluster, inputs, routes = single_cluster(fn, args, options)
    model = compile_model(cluster_request(cluster, inputs).SerializeToString())
    return model, inputs, dict(enumerate(routes))


def run_and_compare(fn, args, tolerances):
    """tolerances: (rtol, atol) per output of fn."""
    model, inputs, routes = compile_function(fn, args)
    got = reference_executor.run(model, inputs)
    want = tf.function(fn)(*args)
    for i, (rtol, atol) in enumerate(tolerances):
        np.testing.assert_allclose(np.asarray(got[routes[i]], np.float32),
                                   np.asarray(want[i], np.float32), rtol=rtol, atol=atol,
                                   err_msg=f"output {i}")
    check_memory_plan(mf.deserialize(model))
    return mf.deserialize(model)


def mlp_step(x, y, w1, b1, w2, b2):
    with tf.GradientTape() as tape:
        tape.watch([w1, b1, w2, b2])
        h = tf.nn.relu(tf.matmul(x, w1) + b1)
        logits = tf.matmul(h, w2) + b2
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grads = tape.gradient(loss, [w1, b1, w2, b2])
    return [loss, logits] + grads


def mlp_args(dtype=np.float32, rng=R):
    return [rng.standard_normal((16, 20)).astype(dtype), rng.integers(0, 10, 16).astype(np.int32),
            (rng.standard_normal((20, 32)) * 0.3).astype(dtype), np.zeros(32, dtype),
            (rng.standard_normal((32, 10)) * 0.3).astype(dtype), np.zeros(10, dtype)]


FWD, GRAD = (1e-5, 1e-6), (1e-4, 1e-6)


def test_mlp_forward_and_backward_match_tensorflow():
    model = run_and_compare(mlp_step, mlp_args(), [FWD, FWD] + [GRAD] * 4)
    kernels = {k.kernel for k in model.kernels}
    assert {"MatMul", "ReluGrad", "SparseSoftmaxCrossEntropyWithLogits"} <= kernels
    assert not kernels & {"Shape", "ShapeN", "BroadcastGradientArgs", "Identity"}


def cnn_step(x, y, k1, b1, w2, b2):
    """Conv -> ReLU -> MaxPool -> AvgPool -> dense, softmax cross-entropy, SGD update."""
    with tf.GradientTape() as tape:
        tape.watch([k1, b1, w2, b2])
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k1, 1, "SAME"), b1))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.nn.avg_pool2d(h, 3, 1, "SAME")
        logits = tf.matmul(tf.reshape(h, [tf.shape(h)[0], -1]), w2) + b2
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, logits))
    grads = tape.gradient(loss, [k1, b1, w2, b2])
    return [loss] + grads + [v - 0.1 * g for v, g in zip([k1, b1, w2, b2], grads)]


def cnn_args():
    labels = np.eye(5, dtype=np.float32)[R.integers(0, 5, 4)]
    return [R.standard_normal((4, 8, 8, 3)).astype(np.float32), labels,
            (R.standard_normal((3, 3, 3, 6)) * 0.3).astype(np.float32), np.zeros(6, np.float32),
            (R.standard_normal((96, 5)) * 0.1).astype(np.float32), np.zeros(5, np.float32)]


def test_cnn_train_step_matches_tensorflow():
    model = run_and_compare(cnn_step, cnn_args(), [FWD] + [GRAD] * 8)
    kernels = {k.kernel for k in model.kernels}
    # conv + bias + relu fuse; ReluGrad + BiasAddGrad fuse (docs/fusion.md)
    assert {"NpuFusedConv2D", "Conv2DBackpropFilter", "MaxPoolGrad", "AvgPoolGrad",
            "NpuFusedActivationGradBiasAddGrad"} <= kernels
    assert "Conv2DBackpropInput" not in kernels          # d(loss)/d(x) is dead code
    meta = json.loads(model.metadata)
    assert meta["arena_bytes"] < meta["no_reuse_bytes"]


def conv_input_grad(x, k):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.conv2d(x, k, 2, "SAME")
        loss = tf.reduce_sum(y * y)
    return [y, tape.gradient(loss, x)]


def test_conv_input_gradient_matches_tensorflow():
    args = [R.standard_normal((2, 7, 7, 3)).astype(np.float32),
            R.standard_normal((3, 3, 3, 4)).astype(np.float32)]
    run_and_compare(conv_input_grad, args, [FWD, GRAD])


@pytest.mark.parametrize("dtype,rtol", [(np.float16, 2e-2), (tf.bfloat16.as_numpy_dtype, 8e-2)],
                         ids=["float16", "bfloat16"])
def test_mlp_in_half_precision(dtype, rtol):
    """float16/bfloat16 storage: each kernel rounds once on store; TF's CPU kernels round
    similarly, so results agree within a few storage ulps per layer (rtol scaled to the
    output's magnitude)."""
    args = mlp_args(dtype)
    model, inputs, routes = compile_function(mlp_step, args)
    got = reference_executor.run(model, inputs)
    want = tf.function(mlp_step)(*args)
    for i in range(len(want)):
        g, w = np.asarray(got[routes[i]], np.float32), np.asarray(want[i], np.float32)
        assert got[routes[i]].dtype == dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max())


# ---- memory plan ------------------------------------------------------------------------------

def check_memory_plan(model):
    """Arena values live at the same kernel do not overlap, except for storage shared exactly
    by an alias (Reshape and the like: a value no kernel writes) or by an in-place output over
    an input that dies at that kernel; the arena is no bigger than giving every value its own
    slot and no smaller than the peak of live bytes."""
    n = len(model.kernels)
    life, writer = {}, {}
    for step, k in enumerate(model.kernels):
        for v in k.outputs:
            life.setdefault(v, [step, step])
            writer[v] = step
        for v in k.inputs:                      # an alias lives from its first read
            life.setdefault(v, [step, step])[1] = step
    for v in model.outputs:                     # read when the run ends
        life.setdefault(v, [n, n])[1] = n
    arena = [i for i, v in enumerate(model.values) if v.kind == mf.Kind.ARENA]
    assert set(arena) <= set(life)
    for i in arena:
        v = model.values[i]
        assert v.where % 64 == 0 and v.where + v.nbytes <= model.arena_bytes

    def may_share(a, b):
        alias = a not in writer or b not in writer
        inplace = life[a][1] == life[b][0] == writer[b] or life[b][1] == life[a][0] == writer[a]
        return alias or inplace

    for a in arena:
        for b in arena:
            va, vb = model.values[a], model.values[b]
            if a < b and life[a][0] <= life[b][1] and life[b][0] <= life[a][1]:
                shared = (va.where, va.nbytes) == (vb.where, vb.nbytes) and may_share(a, b)
                assert shared or va.where + va.nbytes <= vb.where or vb.where + vb.nbytes <= va.where, \
                    f"values {a} and {b} are live together and overlap"
    meta = json.loads(model.metadata)
    assert meta["live_bytes_lower_bound"] <= model.arena_bytes <= meta["no_reuse_bytes"]
    for i, v in enumerate(model.values):
        if v.kind == mf.Kind.CONST:
            assert v.where % mf.CONST_ALIGNMENT == 0
    for i, vid in enumerate(model.outputs):            # kernels write outputs in place
        v = model.values[vid]
        if vid in writer and model.outputs.index(vid) == i:
            assert (v.kind, v.where) == (mf.Kind.OUTPUT, i)


def test_passthrough_constant_and_duplicate_outputs():
    def f(x):
        y = tf.exp(x)
        return tf.identity(x), y, y, tf.constant([1.0, 2.0])
    x = R.standard_normal((3,)).astype(np.float32)
    cf = tf.function(f).get_concrete_function(tf.TensorSpec([3]))
    gd = graph_pb2.GraphDef()
    arg = gd.node.add(name="a", op="_Arg")
    arg.attr["T"].type, arg.attr["index"].i = 1, 0
    for n in cf.graph.as_graph_def().node:
        if n.op != "Placeholder":
            gd.node.add().CopyFrom(n)
            gd.node[-1].input[:] = ["a" if i == "x" else i for i in n.input]
    for i, t in enumerate(cf.outputs):
        r = gd.node.add(name=f"r{i}", op="_Retval", input=[t.op.name])
        r.attr["T"].type, r.attr["index"].i = 1, i
    nd = cluster_request(_npu_graph_op(gd), [x])
    model = mf.deserialize(compile_model(nd.SerializeToString()))
    assert [k.kernel for k in model.kernels] == ["Exp"]
    kinds = [model.values[v].kind for v in model.outputs]
    assert kinds == [mf.Kind.INPUT, mf.Kind.OUTPUT, mf.Kind.OUTPUT, mf.Kind.CONST]
    got = reference_executor.run(model, [x])
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_allclose(got[1], np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(got[2], got[1])
    assert got[2] is not got[1]
    np.testing.assert_array_equal(got[3], [1.0, 2.0])


def _npu_graph_op(body):
    from tensorflow.core.framework import node_def_pb2
    nd = node_def_pb2.NodeDef(name="c", op="NpuGraphOp")
    nd.attr["cluster"].s = body.SerializeToString()
    nd.attr["cluster_name"].s = b"test_cluster"
    return nd


def test_shape_computations_fold_into_kernel_attrs():
    def f(x):
        n = tf.shape(x)[0]
        return tf.reshape(x, [n, -1]), tf.reduce_sum(x, axis=tf.range(1, tf.rank(x)))
    x = R.standard_normal((2, 3, 4)).astype(np.float32)
    model, inputs, routes = compile_function(f, [x])
    m = mf.deserialize(model)
    assert [(k.kernel, {a: v for a, v in k.attrs.items() if a in ("shape", "reduction_indices")})
            for k in m.kernels] == [("Reshape", {"shape": [2, -1]}),
                                    ("Sum", {"reduction_indices": [1, 2]})]
    got = reference_executor.run(model, inputs)
    np.testing.assert_allclose(got[routes[1]], x.sum(axis=(1, 2)), rtol=1e-6)


def test_large_results_are_not_folded():
    def f(x):
        return x + tf.fill([600, 600], 1.5)           # 1.4 MB: computed at run time
    x = np.float32(2.0)
    model, inputs, routes = compile_function(f, [np.asarray(x)])
    m = mf.deserialize(model)
    assert [k.kernel for k in m.kernels] == ["Fill", "AddV2"] and len(m.const_blob) < 1024
    assert (reference_executor.run(model, inputs)[0] == 3.5).all()


# ---- errors, metadata, cache ----------------------------------------------------------------

def test_errors_name_node_op_and_reason():
    nd, _ = op_request("Reverse", {"tensor": np.ones(3, np.float32), "dims": np.array([True])})
    with pytest.raises(CompileError, match=r"node 'Reverse' \(op Reverse\): op Reverse has no NPU "
                                           r"implementation"):
        compile_model(nd.SerializeToString())
    nd, _ = op_request("AddV2", {"x": np.ones(3), "y": np.ones(3)})
    with pytest.raises(CompileError, match="dtype float64 not supported for op AddV2"):
        compile_model(nd.SerializeToString())
    nd, _ = op_request("MatMul", {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 2), np.float32)})
    nd.attr["_input_shapes"].CopyFrom(attr_util.make(shapes=[[2, 3], [2, 3]]))
    with pytest.raises(CompileError, match="MatMul.*inner dimensions differ"):
        compile_model(nd.SerializeToString())
    nd, _ = op_request("Reshape", {"tensor": np.ones(6, np.float32), "shape": np.int32([2, 3])})
    del nd.attr["_const_input_indices"], nd.attr["_const_inputs"]
    with pytest.raises(CompileError, match="input 'shape'.*must be a compile-time constant"):
        compile_model(nd.SerializeToString())
    del nd.attr["_input_shapes"]
    with pytest.raises(CompileError, match="lacks attr _input_shapes"):
        compile_model(nd.SerializeToString())
    with pytest.raises(CompileError, match="not a serialized tensorflow.NodeDef"):
        compile_model(b"\x08\xff\xff")


def test_metadata_describes_the_model():
    nd, inputs = op_request("MatMul", {"a": np.ones((2, 3), np.float32),
                                       "b": np.ones((3, 4), np.float32)})
    meta = json.loads(mf.deserialize(compile_model(nd.SerializeToString())).metadata)
    assert meta["name"] == "MatMul" and meta["source"] == "eager op"
    assert meta["inputs"] == [{"name": "MatMul/a_0", "dtype": "float32", "shape": [2, 3]},
                              {"name": "MatMul/b_1", "dtype": "float32", "shape": [3, 4]}]
    assert meta["outputs"][0]["shape"] == [2, 4] and meta["kernels"] == ["MatMul"]
    assert {p["pass"] for p in meta["passes"]} >= {"infer_shapes", "lower", "plan_memory"}
    assert meta["arena_bytes"] == 0 and isinstance(meta["options"], dict)


def test_eager_options_are_explicit():
    nd, _ = op_request("Exp", {"x": np.ones(3, np.float32)})
    request = nd.SerializeToString()
    assert json.loads(mf.deserialize(compile_model(request)).metadata)["options"] == {}
    result = compile_model_with_report(request, {"precision_mode": "x"})
    meta = json.loads(mf.deserialize(result.model).metadata)
    assert meta["options"] == {"precision_mode": "x"} and result.metadata == meta
    assert result.kernels == meta["kernels"] == ["Exp"]
    assert result.arena_bytes == meta["arena_bytes"]
    assert compile_module.recent_compiles()[-1]["options"] == {"precision_mode": "x"}


def test_cluster_options_travel_in_the_node():
    nd, _ = op_request("Exp", {"x": np.ones(3, np.float32)})
    gd = graph_pb2.GraphDef()
    a = gd.node.add(name="a", op="_Arg")
    a.attr["T"].type, a.attr["index"].i = 1, 0
    e = gd.node.add(name="e", op="Exp", input=["a"])
    e.attr["T"].type = 1
    r = gd.node.add(name="r", op="_Retval", input=["e"])
    r.attr["T"].type, r.attr["index"].i = 1, 0
    node = _npu_graph_op(gd)
    node.attr["options"].s = b'{"precision_mode": "force_fp32"}'
    request = cluster_request(node, [np.ones(3, np.float32)])
    meta = json.loads(mf.deserialize(compile_model(request.SerializeToString())).metadata)
    assert meta["name"] == "test_cluster" and meta["options"] == {"precision_mode": "force_fp32"}
    request.attr["_input_shapes"].CopyFrom(attr_util.make(shapes=[[3], [3]]))
    with pytest.raises(CompileError, match="2 shapes, the cluster has 1 inputs"):
        compile_model(request.SerializeToString())
