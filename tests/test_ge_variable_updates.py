"""partition/variable_updates.py: AssignAdd/AssignSubVariableOp become AssignVariableOp of a value
the cluster computes (the variable's earlier read plus the delta), and reads ordered after the
update take that value, where no other write can come between; elsewhere the updates stay."""
import collections

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graph_engine.compiler import reports
from graph_engine.compiler.api import partition_graph
from graph_engine.compiler.devtools import place, run_graph
from graph_engine.compiler.graphdef import import_graph_def
from graph_engine.compiler.partition import dag

R = np.random.default_rng(7)
SHAPE = (6, 5)


def _partitioned(fn, *specs):
    """(original GraphDef, partitioned GraphDef, fetches, concrete function); the updates are
    preserved as the plugin marks a step's fetches."""
    cf = tf.function(fn).get_concrete_function(*specs)
    gd = cf.graph.as_graph_def()
    fetches = [t.name for t in cf.outputs]
    preserved = [f.split(":")[0] for f in fetches] + [op.name for op in cf.graph.get_operations()
                                                      if op.type.startswith("Assign")]
    out = graph_pb2.GraphDef.FromString(partition_graph(place(gd, fetches=preserved)
                                                        .SerializeToString()))
    dag.order(import_graph_def(out))                 # raises if the rewrite made a cycle
    return gd, out, fetches, cf


def _variables(cf, *variables):
    """{placeholder name: initial value} of the captured variables."""
    by_handle = {id(v.handle): v for v in variables}
    return {inner.op.name: by_handle[id(outer)].numpy()
            for outer, inner in cf.graph.captures if id(outer) in by_handle}


def _ops(gd):
    ops = collections.Counter(n.op for n in gd.node)
    for c in (n for n in gd.node if n.op == "NpuGraphOp"):
        ops.update(f"cluster:{n.op}" for n in graph_pb2.GraphDef.FromString(
            c.attr["cluster"].s).node)
    return ops


def _same_final_values(gd, out, cf, feeds, fetches, *variables):
    """The partitioned graph leaves the variables as the original does. Both run in a TF1
    session with the plugin loaded (conftest), so the original is partitioned by the plugin's
    Grappler pass too, where TF prunes what no fetch needs."""
    init = _variables(cf, *variables)
    want, want_vars = run_graph(gd, feeds, fetches, init)
    got, got_vars = run_graph(out, feeds, fetches, init)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert set(got_vars) == set(want_vars)
    for k in want_vars:
        np.testing.assert_allclose(got_vars[k], want_vars[k], rtol=1e-6, atol=1e-6)
        assert not np.array_equal(want_vars[k], init[k])       # the step did update it


def test_adam_like_step_updates_in_the_cluster():
    w = tf.Variable(R.standard_normal(SHAPE).astype(np.float32))
    m = tf.Variable(R.standard_normal(SHAPE).astype(np.float32))
    v = tf.Variable(np.abs(R.standard_normal(SHAPE)).astype(np.float32))

    def step(x):
        g = x * w                                     # reads w before its update
        m.assign_add((g - m) * 0.1)
        v.assign_add((tf.square(g) - v) * 0.001)
        w.assign_sub(0.01 * m / (tf.sqrt(v) + 1e-7))  # m and v read again after their updates
        return tf.reduce_sum(g)

    gd, out, fetches, cf = _partitioned(step, tf.TensorSpec(SHAPE))
    ops = _ops(out)
    assert ops["AssignAddVariableOp"] == ops["AssignSubVariableOp"] == 0
    assert ops["AssignVariableOp"] == 3
    assert ops["cluster:AddV2"] >= 2 and ops["cluster:Sub"] >= 1
    # m and v are not read back after their updates: the weight's step uses the cluster's values
    reads = [n for n in out.node if n.op == "ReadVariableOp"]
    consumed = {i.split(":")[0].lstrip("^") for n in out.node for i in n.input if not i.startswith("^")}
    assert sum(r.name in consumed for r in reads) == 3      # w, m, v: one read each
    assert len([n for n in out.node if n.op == "NpuGraphOp"]) == 1
    report = reports.last()
    added = [n for n in report.nodes if n.node.endswith("/new_value")]
    assert len(added) == 3 and all(n.placement == reports.NPU for n in added)
    _same_final_values(gd, out, cf, {"x": R.standard_normal(SHAPE).astype(np.float32)},
                       fetches, w, m, v)


def test_new_value_keeps_its_dtype_in_every_precision_mode():
    m = tf.Variable(np.ones(SHAPE, np.float32))

    def step(x):
        m.assign_add((x - m) * 0.1)
    cf = tf.function(step).get_concrete_function(tf.TensorSpec(SHAPE))
    gd = cf.graph.as_graph_def()
    assigns = [op.name for op in cf.graph.get_operations() if op.type.startswith("Assign")]
    out = graph_pb2.GraphDef.FromString(partition_graph(
        place(gd, fetches=assigns).SerializeToString(), {"precision": "force_fp16"}))
    (cluster,) = [n for n in out.node if n.op == "NpuGraphOp"]
    body = graph_pb2.GraphDef.FromString(cluster.attr["cluster"].s)
    (add,) = [n for n in body.node if n.name.endswith("/new_value")]
    assert add.attr["_keep_dtype"].b and add.attr["T"].type == tf.float32.as_datatype_enum


def test_updates_stay_where_another_write_could_come_between():
    a = tf.Variable(np.ones(SHAPE, np.float32))
    b = tf.Variable(np.ones(SHAPE, np.float32))
    c = tf.Variable(np.ones(SHAPE, np.float32))

    def step(x):
        a.assign_add(x * a)          # a: written twice in the step
        a.assign_add(x * 2.0)
        b.assign_sub(x * 3.0)        # b: never read before its update
        y = c + x                    # c: read, updated, and handed to a loop (which may write)
        c.assign_add(y * 0.5)

        def body(i):
            c.assign_add(x)
            return (i + 1,)
        tf.while_loop(lambda i: i < 3, body, (0,))
        return tf.reduce_sum(y)

    _, out, _, _ = _partitioned(step, tf.TensorSpec(SHAPE))
    ops = _ops(out)
    assert ops["AssignVariableOp"] == 0
    assert ops["AssignAddVariableOp"] == 3 and ops["AssignSubVariableOp"] == 1


def test_update_inside_a_lowered_loop_stays():
    """An update in a TF1 loop body (control flow v1, a VarHandleOp's variable): nothing orders
    an iteration's read after the previous iteration's update (a TF2 function body's outputs
    wait for its stateful ops: partition.variable_updates.IterationGates), so an earlier
    iteration's update could come between a read and this iteration's update."""
    from tensorflow.python.ops import control_flow_v2_toggles
    control_flow_v2_toggles.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as graph:
            v = tf.compat.v1.get_variable("v", SHAPE, use_resource=True)
            x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x")

            def body(i):
                with tf.control_dependencies([v.assign_add(v.read_value() * x)]):
                    return i + 1
            (out,) = tf.while_loop(lambda i: i < 3, body, [tf.constant(0)])
        gd = graph.as_graph_def()
    finally:
        control_flow_v2_toggles.enable_control_flow_v2()
    update = next(n.name for n in gd.node if n.op == "AssignAddVariableOp")
    placed = place(gd, fetches=[out.op.name, update])
    parted = graph_pb2.GraphDef.FromString(partition_graph(placed.SerializeToString()))
    assert next(n for n in parted.node if n.name == update).op == "AssignAddVariableOp"


def test_keras_adam_step_on_the_npu_matches_cpu():
    """Adam's update (Keras 3: assign_add on m and v, assign_sub on the weight) trained on the
    NPU equals TF on the CPU, step after step."""
    import keras
    import npu_device  # noqa: F401

    def run(device):
        keras.utils.set_random_seed(3)
        with tf.device(device):
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                      keras.layers.Dense(3)])
            opt = keras.optimizers.Adam(0.01)
            x = tf.constant(np.linspace(-1, 1, 80, dtype=np.float32).reshape(10, 8))
            y = tf.constant(np.arange(10) % 3)

            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                        y, model(x), from_logits=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            losses = [float(step()) for _ in range(4)]
        return losses, [v.numpy() for v in model.weights + opt.variables]

    npu_losses, npu_values = run("/device:NPU:0")
    cpu_losses, cpu_values = run("/device:CPU:0")
    np.testing.assert_allclose(npu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    assert len(npu_values) == len(cpu_values)
    for got, want in zip(npu_values, cpu_values):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
