"""Loops stay on the NPU without a copy per iteration: loop counters and conditions cross
cluster boundaries in host memory (TF's loop-control ops keep them there), TensorLists of bool
and complex64 elements and the gradient's sums of lists have NPU kernels, so a masked RNN's
step runs nothing on the CPU. Results are checked against TensorFlow on CPU."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

import npu_device  # noqa: F401  (registers the NPU)

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
R = np.random.default_rng(5)
pytestmark = pytest.mark.timeout(300)


def partition_graphs(fn, *args):
    """Result of a fresh tf.function of fn on the NPU and the post-partition graphs TF ran."""
    ctx = context.context()
    ctx.enable_run_metadata()
    ctx.export_run_metadata()
    try:
        with tf.device(NPU):
            result = tf.nest.map_structure(np.asarray, tf.function(fn)(*args))
        graphs = [pg for fg in ctx.export_run_metadata().function_graphs
                  for pg in fg.partition_graphs]
    finally:
        ctx.disable_run_metadata()
    return result, graphs


# TF's plumbing between partitions and functions: present whatever runs where.
PLUMBING = {"_Arg", "_Retval", "_Send", "_Recv", "_HostSend", "_HostRecv", "Const", "NoOp",
            "Identity", "_DeviceArg", "_DeviceRetval"}


def test_while_loop_needs_no_host_device_copies():
    w = tf.constant(R.standard_normal((16, 16)).astype(np.float32) * 0.2)
    x = tf.constant(R.standard_normal((4, 16)).astype(np.float32))

    def loop(x):
        return tf.while_loop(lambda i, v: i < 50, lambda i, v: (i + 1, tf.tanh(v @ w + 0.1)),
                             (tf.constant(0), x))[1]
    got, graphs = partition_graphs(loop, x)
    with tf.device(CPU):
        want = tf.function(loop)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    copies = [n.name for g in graphs for n in g.node if n.op in ("_HostSend", "_HostRecv")]
    assert not copies, copies        # counter and condition stay in host memory end to end


@pytest.mark.parametrize("dtype", [tf.bool, tf.complex64])
def test_tensor_lists_of_bool_and_complex_run_on_the_npu(dtype, no_soft_placement):
    real = R.standard_normal((5, 3)).astype(np.float32)
    values = real > 0 if dtype == tf.bool else (real + 1j * real[::-1]).astype(np.complex64)
    shape = tf.constant([3])

    def ops(device):
        with tf.device(device):
            t = tf.constant(values)
            lst = tf.raw_ops.TensorListFromTensor(tensor=t, element_shape=shape)
            item = tf.raw_ops.TensorListGetItem(input_handle=lst, index=2, element_shape=shape,
                                                element_dtype=dtype)
            stack = tf.raw_ops.TensorListStack(input_handle=lst, element_shape=shape,
                                               element_dtype=dtype)
            gathered = tf.raw_ops.TensorListGather(input_handle=lst, indices=[4, 0],
                                                   element_shape=shape, element_dtype=dtype)
            scattered = tf.raw_ops.TensorListScatterV2(
                tensor=t[:2], indices=[3, 1], element_shape=shape, num_elements=5)
            rest, last = tf.raw_ops.TensorListPopBack(input_handle=lst, element_shape=shape,
                                                      element_dtype=dtype)
            concat, _ = tf.raw_ops.TensorListConcatV2(
                input_handle=tf.raw_ops.TensorListSplit(tensor=t, element_shape=[-1, 3],
                                                        lengths=[2, 3]),
                element_shape=[-1, 3], leading_dims=tf.constant([], tf.int64),
                element_dtype=dtype)
            zeros = tf.raw_ops.ZerosLike(x=lst)
            summed = tf.raw_ops.AddN(inputs=[scattered, scattered]) if dtype != tf.bool else None
            out = [item, stack, gathered, last, concat,
                   tf.raw_ops.TensorListStack(input_handle=rest, element_shape=shape,
                                              element_dtype=dtype),
                   tf.raw_ops.TensorListStack(input_handle=zeros, element_shape=shape,
                                              element_dtype=dtype)]
            if summed is not None:
                out.append(tf.raw_ops.TensorListStack(input_handle=summed, element_shape=shape,
                                                      element_dtype=dtype, num_elements=5))
            assert all(o.device.endswith(device[-5:]) for o in out), [o.device for o in out]
            return [o.numpy() for o in out]
    for got, want in zip(ops(NPU), ops(CPU)):
        np.testing.assert_array_equal(got, want)


def test_variant_add_n_checks_shapes(no_soft_placement):
    with tf.device(NPU):
        one = tf.raw_ops.TensorListFromTensor(tensor=tf.ones([2, 3]), element_shape=[3])
        with tf.device(CPU):
            two = tf.stack([one, one])              # a [2] tensor of lists
        with pytest.raises(tf.errors.InvalidArgumentError, match="same size and shape"):
            tf.raw_ops.AddN(inputs=[one, two])


def test_masked_lstm_step_runs_nothing_on_the_cpu():
    """Keras' masked LSTM keeps its time-step masks in bool TensorLists and its gradient sums
    TensorLists: with NPU kernels for both, all of the training step's math stays on the NPU."""
    import keras
    tokens = R.integers(1, 50, (8, 12)).astype(np.int32)
    tokens[:, 9:] = 0                                          # padding, masked
    labels = R.integers(0, 2, 8).astype(np.int32)

    def build():
        keras.utils.set_random_seed(3)
        return keras.Sequential([keras.Input((12,), dtype="int32"),
                                 keras.layers.Embedding(50, 8, mask_zero=True),
                                 keras.layers.LSTM(6), keras.layers.Dense(2)])

    def grads_on(device):
        with tf.device(device):
            model = build()
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

            def step(x, y):
                with tf.GradientTape() as tape:
                    value = loss(y, model(x, training=True))
                grads = tape.gradient(value, model.trainable_variables)
                return [value] + [tf.convert_to_tensor(g) for g in grads]
            return partition_graphs(step, tf.constant(tokens), tf.constant(labels))
    got, graphs = grads_on(NPU)
    want, _ = grads_on(CPU)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    # Nothing runs on the CPU, not even a share of the loops: the gradient's int32 accumulators
    # (a TensorArray's length and element shape, the time step) stay on the NPU, their elements
    # handed over in host memory (cpu_lists.py), and nothing crosses devices inside a loop.
    on_cpu = [n for g in graphs for n in g.node
              if n.device.endswith("CPU:0") and n.op not in PLUMBING]
    assert not on_cpu, sorted({n.op for n in on_cpu})
    int32_lists = [n for g in graphs for n in g.node if n.op in ("TensorListPushBack",
                   "TensorListPopBack") and n.attr["element_dtype"].type == tf.int32.as_datatype_enum]
    assert int32_lists and all(n.attr["_input_hostmem" if n.op == "TensorListPushBack"
                                      else "_output_hostmem"].list.i == [1] for n in int32_lists)
    in_loops = [n.name for g in graphs for n in g.node
                if n.op in ("_Send", "_Recv", "_HostSend", "_HostRecv") and "while" in n.name]
    assert not in_loops, in_loops
    assert all(n.attr["element_dtype"].type == tf.int32.as_datatype_enum for n in on_cpu
               if "element_dtype" in n.attr), sorted({n.op for n in on_cpu})


def test_nested_loop_gradient_matches_cpu():
    """The gradient of a loop in a loop: the inner loop's accumulators are made in the outer
    loop's frame and pushed, as lists, into the outer loop's accumulators."""
    w = tf.constant(R.standard_normal((5, 5)).astype(np.float32) * 0.4)
    x = tf.constant(R.standard_normal((3, 5)).astype(np.float32))

    def grads(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])

            def inner(j, h):
                return j + 1, tf.tanh(h @ w) * tf.sigmoid(h)

            def outer(i, h):
                return i + 1, tf.while_loop(lambda j, h: j < 3, inner, (0, h))[1] + 0.1

            h = tf.while_loop(lambda i, h: i < 4, outer, (0, x))[1]
            loss = tf.reduce_sum(h * h)
        return tape.gradient(loss, [x, w])
    got, _ = partition_graphs(grads, x, w)
    with tf.device(CPU):
        want = tf.function(grads)(x, w)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_.numpy(), rtol=1e-4, atol=1e-5)
