"""Variables a cluster updates in place (partition/variables_in_place.py, the compiler's
order_in_place_writes and plan_memory's outputs over inputs, NpuGraphOp's `variables`): the
cluster reads the variable itself and writes the new value over its buffer when nothing else
holds it, and never when something does."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, node_def_pb2

import npu_device
from graph_engine.compiler import model_format as mf
from graph_engine.compiler.api import compile_model, partition_graph
from graph_engine.compiler.cluster_op import CLUSTER_OPS, STATEFUL_CLUSTER_OP
from graph_engine.compiler.devtools import place

NPU = "/device:NPU:0"
R = np.random.default_rng(11)


def _placed(fn, *specs, keep_assigns=True, keep_reads=False):
    """fn's function graph placed as Grappler hands it over (bytes): the captured variables'
    handles become _Args; its outputs (and with `keep_assigns` its updates, with `keep_reads`
    its reads: a tf.function's control outputs) are preserved."""
    cf = tf.function(fn).get_concrete_function(*specs)
    gd = cf.graph.as_graph_def()
    for index, n in enumerate(n for n in gd.node if n.op == "Placeholder"
                              and n.attr["dtype"].type == tf.resource.as_datatype_enum):
        n.op = "_Arg"
        n.attr["T"].type = n.attr.pop("dtype").type
        n.attr["index"].i = index
    keep = [t.name.split(":")[0] for t in cf.outputs] + [
        op.name for op in cf.graph.get_operations()
        if keep_assigns and op.type.startswith("Assign")
        or keep_reads and op.type == "ReadVariableOp"]
    return place(gd, fetches=keep).SerializeToString()


def _cluster(fn, *specs):
    """The cluster NodeDef (one) of fn's partitioned graph, and the partitioned GraphDef."""
    return _cluster_of(fn, *specs)


def _cluster_of(fn, *specs, keep_reads=False):
    out = graph_pb2.GraphDef.FromString(partition_graph(_placed(fn, *specs, keep_reads=keep_reads)))
    (cluster,) = [n for n in out.node if n.op in CLUSTER_OPS]
    return cluster, out


def _compiled(cluster, shapes, options=None):
    nd = node_def_pb2.NodeDef()
    nd.CopyFrom(cluster)
    nd.attr["_input_shapes"].list.shape.extend([tf.TensorShape(s).as_proto() for s in shapes])
    return mf.deserialize(compile_model(nd.SerializeToString(), options))


def test_adam_like_step_reads_its_variables_in_the_cluster():
    w = tf.Variable(R.standard_normal((4, 3)).astype(np.float32))
    m = tf.Variable(np.zeros((4, 3), np.float32))

    def step(x):
        g = x * w
        m.assign_add((g - m) * 0.1)
        w.assign_sub(0.01 * m)
        return tf.reduce_sum(g)

    cluster, out = _cluster(step, tf.TensorSpec((4, 3)))
    assert cluster.op == STATEFUL_CLUSTER_OP and cluster.attr["Nvariables"].i == 2
    read_by = {i.split(":")[0] for n in out.node for i in n.input if not i.startswith("^")}
    assert not [n for n in out.node if n.op == "ReadVariableOp" and n.name in read_by]
    # each variable's new value is the result its AssignVariableOp stores
    handles = [i for i in cluster.input if not i.startswith("^")][
        len(cluster.attr["Tin"].list.type) + len(cluster.attr["Thost_in"].list.type):]
    stores = {n.input[0]: n.input[1] for n in out.node if n.op == "AssignVariableOp"}
    for handle, result in zip(handles, cluster.attr["variable_updates"].list.i):
        assert stores[handle] == (f"{cluster.name}:{result}" if result else cluster.name)


def test_preserved_reads_nothing_uses_become_noops_of_their_names():
    """A tf.function preserves its reads (control outputs): those the cluster took over and the
    one after the update stand as NoOps of their names, keeping their control edges; a read
    whose value something outside the cluster uses stays a read."""
    w = tf.Variable(R.standard_normal((4, 3)).astype(np.float32))
    m = tf.Variable(np.zeros((4, 3), np.float32))

    def step(x):
        g = x * w
        m.assign_add((g - m) * 0.1)
        w.assign_sub(0.01 * m)
        with tf.control_dependencies([w.read_value()]):       # read after the update, unused
            return tf.reduce_sum(g), m.read_value()

    placed = _placed(step, tf.TensorSpec((4, 3)), keep_reads=True)
    reads = {n.name: n for n in graph_pb2.GraphDef.FromString(placed).node
             if n.op == "ReadVariableOp"}
    out = {n.name: n for n in graph_pb2.GraphDef.FromString(partition_graph(placed)).node}
    consumed = {i.split(":")[0] for n in out.values() for i in n.input if not i.startswith("^")}
    assert set(reads) <= set(out)                               # every name is kept
    stayed = [name for name in reads if out[name].op == "ReadVariableOp"]
    assert all(name in consumed for name in stayed)
    noops = [name for name in reads if out[name].op == "NoOp"]
    assert len(noops) == len(reads) - len(stayed) >= 3
    for name in noops:
        assert not out[name].input or all(i.startswith("^") for i in out[name].input)
        assert out[name].device == reads[name].device and "_npu_preserve" not in out[name].attr
    # the reads after an update still wait for it
    after = [name for name in noops if any(i.startswith("^") for i in reads[name].input)]
    assert after and all(out[name].input for name in after)
    # the NoOps without inputs order nothing, and nothing waits for them (as TF's dependency
    # optimizer would leave it); nor does a control input repeat what a data input implies
    free = {name for name in noops if not out[name].input}
    assert free
    for n in out.values():
        controls = {i[1:] for i in n.input if i.startswith("^")}
        data = {i.split(":")[0] for i in n.input if not i.startswith("^")}
        assert not controls & free and not controls & data, n.name
        for producer in data & {c for c in out if out[c].op in CLUSTER_OPS}:
            assert not controls & {i.lstrip("^").split(":")[0] for i in out[producer].input}


def test_an_old_value_the_step_returns_is_not_written_over():
    """The cluster may read the variable itself, but the update cannot share the buffer of a
    value the cluster also returns."""
    w = tf.Variable(np.ones((4, 3), np.float32))

    def step(x):
        r = w.read_value()
        w.assign_sub(r * x)
        return r                      # the old value leaves the function

    cluster, _ = _cluster(step, tf.TensorSpec((4, 3)))
    if cluster.attr["Nvariables"].i:
        assert _compiled(cluster, [(4, 3), (4, 3)]).in_place == []
    with tf.device(NPU):
        v = tf.Variable(np.full((4, 3), 2.0, np.float32))

        @tf.function
        def npu_step(x):
            r = v.read_value()
            v.assign_sub(r * x)
            return r
        old = npu_step(tf.fill((4, 3), 0.25)).numpy()
    np.testing.assert_array_equal(old, 2.0)
    np.testing.assert_array_equal(v.numpy(), 1.5)


def test_the_update_is_ordered_after_the_weights_last_reader():
    """MatMul and the update both read w and need nothing of each other: the update, written
    over w, must run after the MatMul. With the ordering pass off, whatever order topological
    sorting gives is only accepted when it is already safe."""
    w = tf.Variable(R.standard_normal((3, 3)).astype(np.float32))

    def step(x):
        y = tf.matmul(x, w)
        w.assign(w * 0.5 + 1.0)
        return y

    cluster, _ = _cluster(step, tf.TensorSpec((4, 3)))
    shapes = [(4, 3), (3, 3)]                                # x, then the variable
    model = _compiled(cluster, shapes)
    assert model.in_place == [(cluster.attr["variable_updates"].list.i[0], 1)]
    names = [k.kernel for k in model.kernels]
    matmul = next(i for i, n in enumerate(names) if "MatMul" in n)
    writer = next(i for i, k in enumerate(model.kernels)
                  if model.outputs[model.in_place[0][0]] in k.outputs)
    assert writer > matmul
    unordered = _compiled(cluster, shapes, {"fusion_switch_file": {"order_in_place_writes": "off"}})
    writer = next(i for i, k in enumerate(unordered.kernels)
                  if unordered.outputs[cluster.attr["variable_updates"].list.i[0]] in k.outputs)
    reads_after = any(unordered.inputs[1] in k.inputs for k in unordered.kernels[writer + 1:])
    assert bool(unordered.in_place) == (not reads_after)


@pytest.mark.timeout(300)
def test_step_on_the_npu_matches_cpu_and_reads_see_the_old_value():
    """A matmul reading the weight, the weight's update and a read ordered before the update in
    one step: on the NPU as on the CPU, step after step."""
    def run(device):
        with tf.device(device):
            w = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
            m = tf.Variable(np.zeros((3, 4), np.float32))

            @tf.function
            def step(x):
                before = tf.identity(w)
                y = tf.matmul(x, w)
                g = tf.matmul(x, y, transpose_a=True)[:, :4] * 0.01
                m.assign_add((g - m) * 0.1)
                w.assign_sub(0.5 * m)
                return y, before
            x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
            out = [[t.numpy() for t in step(x)] for _ in range(4)]
        return out, w.numpy(), m.numpy()

    got, want = run(NPU), run("/device:CPU:0")
    for (gy, gb), (wy, wb) in zip(got[0], want[0]):
        np.testing.assert_allclose(gy, wy, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb, wb, rtol=1e-6, atol=0)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)


def test_an_inference_cluster_reads_the_weights_itself():
    """Variables nothing in the graph writes come in as handles too (variable_updates -1): no
    ReadVariableOp is left to run per step, only the NoOps standing for the preserved reads."""
    w = tf.Variable(R.standard_normal((3, 4)).astype(np.float32))
    b = tf.Variable(np.zeros(4, np.float32))

    def infer(x):
        return tf.nn.relu(tf.matmul(x, w) + b)

    cluster, out = _cluster_of(infer, tf.TensorSpec((2, 3)), keep_reads=True)
    assert cluster.op == STATEFUL_CLUSTER_OP and cluster.attr["Nvariables"].i == 2
    assert list(cluster.attr["variable_updates"].list.i) == [-1, -1]
    reads = [n.name for n in graph_pb2.GraphDef.FromString(
        _placed(infer, tf.TensorSpec((2, 3)))).node if n.op == "ReadVariableOp"]
    ops = {n.name: n.op for n in out.node}
    assert len(reads) == 2 and [ops[name] for name in reads] == ["NoOp", "NoOp"]
    assert "ReadVariableOp" not in ops.values()
    assert _compiled(cluster, [(2, 3), (3, 4), (4,)]).in_place == []


@pytest.mark.timeout(300)
def test_inference_on_read_only_variables_sees_every_assignment():
    """The kernel reads the weights at each call: after an eager assign, a scatter (which puts
    the variable in copy-on-read mode: the kernel copies it) and from concurrent callers, the
    results are TF-CPU's."""
    import threading
    w0 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6

    def run(device):
        with tf.device(device):
            w = tf.Variable(w0)
            b = tf.Variable(np.ones(4, np.float32))
            f = tf.function(lambda x: tf.matmul(x, w) + b)
            xs = tf.constant(x)
            out = [f(xs).numpy()]
            w.assign(w0 * 2.0)
            out.append(f(xs).numpy())
            w.scatter_update(tf.IndexedSlices(tf.constant([[5.0, 6.0, 7.0, 8.0]]), [1]))
            out.append(f(xs).numpy())
            results = [None] * 4

            def call(i):
                results[i] = f(xs).numpy()
            threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            return out + results

    for got, want in zip(run(NPU), run("/device:CPU:0")):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.timeout(300)
def test_written_in_place_only_when_nothing_else_holds_the_buffer():
    """No new buffer when the variable alone holds its value (device memory's peak does not
    rise by the variable's size); a tensor read eagerly before the step still holds the old
    value afterwards (the step wrote a new buffer instead)."""
    n = 1 << 20                                             # 4 MiB of float32
    with tf.device(NPU):
        w = tf.Variable(np.ones(n, np.float32))

        @tf.function
        def halve():
            w.assign(w * 0.5)
        halve()                                              # compiles
        np.testing.assert_array_equal(w.numpy()[:3], 0.5)
        before = npu_device.memory_stats()["in_use"]
        npu_device.reset_peak_memory()
        halve()
        assert npu_device.memory_stats()["peak"] - before < n * 4 // 2
        np.testing.assert_array_equal(w.numpy()[:3], 0.25)

        snapshot = w.read_value()                            # shares the variable's buffer
        halve()
        np.testing.assert_array_equal(snapshot.numpy()[:3], 0.25)
        np.testing.assert_array_equal(w.numpy()[:3], 0.125)


@pytest.mark.timeout(300)
def test_a_loop_updates_in_place_and_reads_see_each_iterations_value():
    """In a tf.while_loop body (a function argument's variable through the loop's Enter): a
    read ordered before the update sees the iteration's old value, the next iteration sees the
    update; on the NPU as on the CPU. The update writes over the variable's buffer (the
    device's peak does not rise by the variable's size)."""
    n = 1 << 20

    def run(device):
        with tf.device(device):
            w = tf.Variable(np.linspace(1, 2, n, dtype=np.float32))

            @tf.function
            def steps(x):
                seen = tf.zeros((), tf.float32)
                for i in tf.range(3):
                    seen += tf.reduce_sum(w[:4])           # read before the update
                    w.assign(w * x + tf.cast(i, tf.float32))
                return seen
            x = tf.constant(0.5)
            steps(x)                                       # compiles
            if device == NPU:
                before = npu_device.memory_stats()["in_use"]
                npu_device.reset_peak_memory()
            seen = steps(x).numpy()
            if device == NPU:
                assert npu_device.memory_stats()["peak"] - before < n * 4 // 2
            return seen, w.numpy()

    (got_seen, got_w), (want_seen, want_w) = run(NPU), run("/device:CPU:0")
    np.testing.assert_allclose(got_seen, want_seen, rtol=1e-6)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-6)


@pytest.mark.timeout(600)
def test_keras_fit_with_steps_per_execution_updates_in_place_and_matches_cpu():
    """Keras runs `steps_per_execution` steps as a while loop whose body is a cond: Adam's
    updates of the weights, m and v there are written in place too, and training matches TF
    on the CPU (50 samples at batch 8: a partial last batch)."""
    import keras
    from graph_engine.compiler import compile as ge_compile
    x = np.linspace(-1, 1, 50 * 6, dtype=np.float32).reshape(50, 6)
    y = np.arange(50) % 3

    def run(device):
        keras.utils.set_random_seed(5)
        with tf.device(device):
            model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                                      keras.layers.Dense(3)])
            model.compile(optimizer=keras.optimizers.Adam(0.01), steps_per_execution=3,
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            ge_compile.clear_recent()
            history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        pairs = sum(len(r.get("outputs_over_inputs", [])) for r in ge_compile.recent_compiles())
        return history.history["loss"], [w.numpy() for w in model.weights], pairs

    got_loss, got_weights, pairs = run(NPU)
    want_loss, want_weights, _ = run("/device:CPU:0")
    assert pairs >= 12                    # weights, m and v of both layers
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
    for g, w in zip(got_weights, want_weights):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_partitioning_and_compiling_leave_no_reference_cycles():
    """The IR goes by reference counting once partitioning or a compile ends (Graph.dispose):
    the cyclic collector, paused meanwhile, would otherwise walk every node of a large graph
    when it resumes (a ResNet50 training graph: 180,000 objects, 70 ms)."""
    import gc
    from graph_engine.compiler.api import compile_model_with_report, partition_graph_with_report
    w = tf.Variable(R.standard_normal((4, 3)).astype(np.float32))

    def step(x):
        w.assign_sub(0.01 * x * w)
        return tf.reduce_sum(x * w)

    request = _placed(step, tf.TensorSpec((4, 3)), keep_assigns=False)
    gc.collect()
    gc.disable()
    try:
        result = partition_graph_with_report(request)
        assert gc.collect() == 0
        (cluster,) = [n for n in graph_pb2.GraphDef.FromString(result.graph_def).node
                      if n.op == STATEFUL_CLUSTER_OP]   # the path that indexes the graph ran
        cluster.attr["_input_shapes"].list.shape.extend(
            [tf.TensorShape((4, 3)).as_proto()] * 2)
        gc.collect()
        assert compile_model_with_report(cluster.SerializeToString()).kernels
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("new_value, factor", [(np.full(8, 3.0, np.float32), 0.5),
                                               (np.full(5, 4.0, np.float32), 0.25)],
                         ids=["same_shape", "new_shape"])
def test_the_variables_are_not_locked_while_a_signature_compiles(monkeypatch, new_value, factor):
    """A cluster that updates a variable in place finds its model (a signature's first call
    compiles: seconds for a large model) before it locks the variable: another thread reads and
    assigns it meanwhile without waiting, and the step runs on what that thread assigned (of
    another shape too: then that signature compiles under the lock)."""
    import threading
    from npu_device import compiler_bridge
    compiling, assigned = threading.Event(), threading.Event()
    waited = []
    compile_model = compiler_bridge._compile_model

    def slow_compile(request):
        if node_def_pb2.NodeDef.FromString(bytes(request)).op in CLUSTER_OPS and not waited:
            compiling.set()
            waited.append(assigned.wait(20))   # a kernel holding the lock: the reader waits
        return compile_model(request)
    monkeypatch.setattr(compiler_bridge, "_compile_model", slow_compile)
    with tf.device(NPU):
        w = tf.Variable(np.ones(8, np.float32), shape=tf.TensorShape(None))
        seen = []

        def reader():
            compiling.wait(60)
            with tf.device(NPU):
                seen.append(w.read_value().numpy())
                w.assign(new_value)
            assigned.set()

        @tf.function                               # a cluster of its own for each case
        def scale():
            w.assign(w * factor)
        thread = threading.Thread(target=reader)
        thread.start()
        scale()
        thread.join(60)
    assert waited == [True]
    np.testing.assert_array_equal(seen[0], np.ones(8, np.float32))
    np.testing.assert_array_equal(w.numpy(), new_value * factor)
