"""Shape inference and constant folding against TensorFlow: every shape the compiler infers
and every value it folds must equal what TF computes when it runs the same graph. Graphs are
traced with a dynamic batch (as Keras does), so they carry real shape computations (Shape,
BroadcastGradientArgs, GatherV2 of shapes ...) that only fold once the batch is concrete."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler import model_format as mf
from graph_engine.compiler import reference_executor
from graph_engine.compiler.api import compile_model, partition_graph
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.graphdef import import_graph_def
from graph_engine.compiler.pass_manager import Compilation
from graph_engine.compiler.passes import infer_shapes
from graph_engine.compiler.devtools import cluster_request, place

from test_ge_compile import cnn_args, cnn_step, mlp_args, mlp_step  # noqa: E402

SHAPE_OPS = {"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs", "Range"}
CASES = [(mlp_step, mlp_args(), 2), (cnn_step, cnn_args(), 2)]     # (fn, args, dynamic args)


def dynamic_batch_function(fn, args, n_dynamic):
    specs = [tf.TensorSpec([None] + list(a.shape[1:]), a.dtype) for a in args[:n_dynamic]] + \
        [tf.TensorSpec(a.shape, a.dtype) for a in args[n_dynamic:]]
    return tf.function(fn).get_concrete_function(*specs)


def tf_runtime_values(graph_def, feeds):
    """Every output of every op, as TF computes it."""
    with tf.Graph().as_default() as g:
        tf.graph_util.import_graph_def(graph_def, name="")
        tensors = [t for op in g.get_operations() for t in op.outputs]
        with tf.compat.v1.Session(graph=g) as sess:
            values = sess.run(tensors, {k + ":0": v for k, v in feeds.items()})
    return {t.name: v for t, v in zip(tensors, values)}


@pytest.mark.parametrize("fn,args,n_dynamic", CASES, ids=["mlp", "cnn"])
def test_shapes_and_folded_values_match_tensorflow(fn, args, n_dynamic):
    gd = dynamic_batch_function(fn, args, n_dynamic).graph.as_graph_def()
    placeholders = [n.name for n in gd.node if n.op == "Placeholder"]
    feeds = dict(zip(placeholders, args))
    want = tf_runtime_values(gd, feeds)
    g = import_graph_def(gd)
    for name, a in feeds.items():                      # the concrete shapes of this call
        g[name].set_attr("shape", shape=a.shape)
    infer_shapes.run(Compilation(name="t", graph=g, input_shapes=[]))
    folded = set()
    for node in g:
        for v in node.outputs:
            w = want[f"{node.name}:{v.index}"]
            assert v.shape == w.shape, (node.name, v.shape, w.shape)
            if v.const is not None:
                np.testing.assert_array_equal(v.const, w, err_msg=node.name)
                folded.add(node.op)
    assert folded & SHAPE_OPS, "the traced graph should have had shape computations to fold"


@pytest.mark.parametrize("fn,args,n_dynamic", CASES, ids=["mlp", "cnn"])
def test_dynamic_batch_compiles_with_concrete_shapes(fn, args, n_dynamic):
    cf = dynamic_batch_function(fn, args, n_dynamic)
    tf_ops = {n.op for n in cf.graph.as_graph_def().node}
    assert tf_ops & SHAPE_OPS
    fetches = [t.op.name for t in cf.outputs]
    gd = place(cf.graph.as_graph_def(), fetches=fetches)
    out = graph_pb2.GraphDef.FromString(partition_graph(gd.SerializeToString()))
    (cluster,) = [n for n in out.node if n.op == "NpuGraphOp"]
    names = [n.name for n in gd.node if n.op == "Placeholder"]
    inputs = [args[names.index(i)] for i in cluster.input]
    model = compile_model(cluster_request(cluster, inputs).SerializeToString())
    assert not {k.kernel for k in mf.deserialize(model).kernels} & (SHAPE_OPS | {"GatherV2"})
    got = reference_executor.run(model, inputs)
    want = cf(*args)
    by_name = {n.name: n for n in out.node}
    for i, name in enumerate(fetches):
        ref = by_name[name].input[0]
        idx = int(ref.split(":")[1]) if ":" in ref else 0
        np.testing.assert_allclose(got[idx], want[i], rtol=1e-4, atol=1e-6)


def test_shape_errors_name_the_node():
    gd = tf.function(mlp_step).get_concrete_function(
        *[tf.TensorSpec(a.shape, a.dtype) for a in mlp_args()]).graph.as_graph_def()
    g = import_graph_def(gd)
    g["x"].set_attr("shape", shape=[16, 21])            # 21 does not match w1's 20 rows
    with pytest.raises(CompileError, match=r"node 'MatMul' \(op MatMul\): .*inner dimensions"):
        infer_shapes.run(Compilation(name="t", graph=g, input_shapes=[]))
