"""Windows of fixed size at starts known only at run time (random crops) compile once
(graph_engine/compiler/partition/runtime_windows.py): tf.slice with a run-time begin,
tf.image.random_crop, Keras' RandomCrop, a sliding window in a loop, and their gradients
(StridedSliceGrad). Each new start used to
compile the whole cluster again and, past max_value_specializations, put it on the CPU."""
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import run_python
from tests.test_compile_boundary import assert_computes_as_tf, partitioned

pytestmark = pytest.mark.timeout(300)


def _value_input_producers(graph_def):
    """The ops feeding the clusters' `values` inputs (the last data inputs)."""
    ops = {n.name: n.op for n in graph_def.node}
    producers = []
    for c in (c for c in graph_def.node if c.op == "NpuGraphOp"):
        data = [i for i in c.input if not i.startswith("^")]
        k = len(c.attr["Tvalues"].list.type)
        producers += [ops[i.split(":")[0]] for i in data[len(data) - k:] if k]
    return producers


def test_slices_at_run_time_starts_need_no_value_inputs():
    # Slice with a Pack begin (constant zeros and run-time starts), Slice with a computed begin
    # vector: gathers, no `values` inputs. Python slicing x[:, h:h + 3] (StridedSlice with Pack
    # begin/end), which TF clamps to the axis: its length, computed by int32 host ops outside
    # the cluster, is the only compile-time value (the start is data). Past the axis, before
    # it, and wholly outside (empty), the graph computes what TF's does.
    def f(x, h, w, offset):
        a = tf.slice(x, tf.stack([0, h % 4, w % 4]), [2, 3, 2]) * 2.0
        b = tf.slice(x, offset % [2, 5, 4], [1, 2, 2]) + 1.0
        c = x[:, h:h + 3, w:w + 1] - 1.0
        return a, b, c

    specs = (tf.TensorSpec([2, 6, 5]), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32),
             tf.TensorSpec([3], tf.int32))
    gd, out, _ = partitioned(f, *specs)
    assert _value_input_producers(out) == ["Maximum", "Maximum"]     # c's two lengths
    x = np.arange(60, dtype=np.float32).reshape(2, 6, 5)
    assert_computes_as_tf(gd, out, [
        {"x": x, "h": np.int32(h), "w": np.int32(w), "offset": np.int32(offset)}
        for h, w, offset in ((0, 0, [0, 0, 0]), (3, 3, [1, 4, 2]), (2, 1, [2, 2, 5]),
                             (5, 4, [0, 1, 1]), (-2, -5, [1, 0, 0]), (-8, 7, [0, 0, 0]))])


def test_a_random_crop_provably_inside_needs_no_clamping():
    # Keras' RandomCrop start: int(uniform * (H - h + 1)) always fits: a fixed-size gather, no
    # compile-time value (no host ops that would split the cluster). One more and it might not.
    def crop(extra):
        def f(x, seed):
            u = tf.raw_ops.StatelessRandomUniform(shape=[], seed=seed)     # in [0, 1)
            h = tf.cast(u * (6.0 - 3.0 + 1.0 + extra), tf.int32)
            w = tf.math.floormod(tf.cast(u * 100.0, tf.int32), 3 + extra)
            return x[:, h:h + 3, w:w + 3] * 2.0
        return f

    specs = (tf.TensorSpec([2, 6, 5]), tf.TensorSpec([2], tf.int32))
    gd, out, _ = partitioned(crop(0), *specs)
    assert _value_input_producers(out) == []
    assert_computes_as_tf(gd, out, [{"x": np.arange(60, dtype=np.float32).reshape(2, 6, 5),
                                     "seed": np.int32([s, 1])} for s in range(6)])
    _, out, _ = partitioned(crop(1), *specs)
    assert _value_input_producers(out) == ["Maximum"] * 2


def test_window_gradients_need_no_value_inputs():
    # StridedSliceGrad at run-time starts (a window with constant axes, a start counted from the
    # end, a begin-masked prefix, clamped ends): gathers of dy padded with a zero slice.
    def f(x, h):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.sin(x[:, h:h + 3, 1:4])) + tf.reduce_sum(x[-h:] ** 2) + \
                tf.reduce_sum(x[:h + 1, :, -2:] * 3.0)
        return tape.gradient(y, x)

    def fixed(x, h):             # windows of fixed size only
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.sin(x[:, h:h + 3, 1:4])) + tf.reduce_sum(x[:2, h:h + 2, -2:])
        return tape.gradient(y, x)

    specs = (tf.TensorSpec([3, 6, 5]), tf.TensorSpec([], tf.int32))
    _, out, _ = partitioned(fixed, *specs)
    assert _value_input_producers(out) == ["Maximum"] * 2      # the forward windows' lengths
    # the others' forward sizes depend on h (a value input), their gradients do not
    gd, out, _ = partitioned(f, *specs)
    x = np.random.default_rng(2).normal(size=(3, 6, 5)).astype(np.float32)
    assert_computes_as_tf(gd, out, [{"x": x, "h": np.int32(h)} for h in (0, 1, 2, 3)],
                          rtol=1e-6, atol=1e-6)           # (h = 3: x[:h + 1] clamps)


def test_slice_gradient_padding_at_a_run_time_begin_needs_no_value_inputs():
    # TF's Slice gradient pads dy by a run-time begin b in front and (shape - size - b) behind:
    # Grappler folds (shape - size) to a constant, so the result's shape is known; dy placed
    # at b by gathers. Also a Slice taking constant axes to their end (-1).
    def f(x, dy, t, u):
        b = tf.stack([t, 0, u])
        paddings = tf.concat([tf.reshape(b, [3, 1]), tf.reshape([2, 0, 3] - b, [3, 1])], 1)
        return tf.pad(dy, paddings), tf.slice(x, tf.stack([0, t, 0]), [-1, 2, -1])

    specs = (tf.TensorSpec([3, 6, 5]), tf.TensorSpec([2, 4, 2]), tf.TensorSpec([], tf.int32),
             tf.TensorSpec([], tf.int32))
    gd, out, _ = partitioned(f, *specs)
    assert all(not c.attr["Tvalues"].list.type for c in out.node if c.op == "NpuGraphOp")
    rng = np.random.default_rng(3)
    feeds = {"x": rng.normal(size=(3, 6, 5)).astype(np.float32),
             "dy": rng.normal(size=(2, 4, 2)).astype(np.float32)}
    assert_computes_as_tf(gd, out, [dict(feeds, t=np.int32(t), u=np.int32(u))
                                    for t, u in ((0, 0), (2, 3), (1, 2))])


def test_chunks_of_a_tensor_in_a_loop_with_a_ragged_last_chunk_equal_cpu():
    # x[i:i + 4] over 10 elements: TF clamps the last chunk to 2 elements (an error on the NPU
    # before); one compile per chunk length.
    r = run_python("""
    import numpy as np, tensorflow as tf, npu_device
    x = tf.constant(np.arange(30, dtype=np.float32).reshape(10, 3))

    @tf.function
    def f(x):
        def body(i, acc):
            return i + 4, acc + tf.reduce_sum(tf.sin(x[i:i + 4]), axis=0)
        return tf.while_loop(lambda i, acc: i < 10, body, (0, tf.zeros([3])))[1]

    got = f(x).numpy()
    s = npu_device.compile_stats()
    with tf.device("/CPU:0"):
        want = f(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert s["max_signatures_per_cluster"] == 2 and s["fallbacks"] == 0, s
    print("OK")
    """, timeout=240)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-4000:]


def test_a_hand_written_rnn_slicing_its_input_trains_with_one_compile_per_cluster():
    # tf.slice(x, [0, t, 0], [-1, 1, -1]) in a loop over time and its gradient (a Pad at the
    # popped begin): each value of t compiled the cluster again, after 16 it ran on the CPU.
    r = run_python("""
    import numpy as np, tensorflow as tf, npu_device
    x = tf.constant(np.random.default_rng(0).normal(size=(4, 24, 8)).astype(np.float32))
    w = tf.Variable(np.random.default_rng(1).normal(size=(8, 8)).astype(np.float32) * 0.3)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            def cell(t, h):
                return t + 1, tf.tanh(tf.matmul(tf.slice(x, [0, t, 0], [-1, 1, -1])[:, 0, :],
                                                w) + h)
            h = tf.while_loop(lambda t, h: t < 24, cell, (0, tf.zeros([4, 8])))[1]
            loss = tf.reduce_sum(h * h)
        return [loss] + tape.gradient(loss, [w, x])

    got = [t.numpy() for t in step(x)]
    s = npu_device.compile_stats()
    with tf.device("/CPU:0"):
        want = [t.numpy() for t in step(x)]
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-5)
    assert s["max_signatures_per_cluster"] == 1 and s["fallbacks"] == 0, s
    print("OK")
    """, timeout=240)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-4000:]


def test_random_crops_compile_once_and_equal_cpu():
    r = run_python("""
    import numpy as np, tensorflow as tf, npu_device
    x = tf.constant(np.random.default_rng(0).uniform(size=(4, 12, 12, 3)).astype(np.float32))
    w = tf.Variable(tf.ones([8 * 8 * 3, 2]) * 0.01)

    @tf.function
    def step(x, offset, seed):
        crop = tf.slice(x, tf.concat([[0], offset, [0]], 0), [4, 8, 8, 3])
        random = tf.image.stateless_random_crop(x, [4, 8, 8, 3], seed)
        h, v = offset[0], offset[1]
        window = x[:, h:h + 8, v:v + 8, :]                # Keras RandomCrop's slicing
        loss = tf.reduce_sum(tf.matmul(tf.reshape(crop + random * window, [4, -1]), w) ** 2)
        w.assign_sub(0.001 * tf.gradients(loss, w)[0])
        return crop, random, window

    offsets = [(i % 5, (3 * i) % 5) for i in range(20)]
    got = [step(x, tf.constant(o), tf.constant([i, 7])) for i, o in enumerate(offsets)]
    s = npu_device.compile_stats()
    w_npu = w.numpy()
    with tf.device("/CPU:0"):
        w.assign(tf.ones([8 * 8 * 3, 2]) * 0.01)
        want = [step(x, tf.constant(o), tf.constant([i, 7])) for i, o in enumerate(offsets)]
    for g, wv in zip(got, want):
        for a, b in zip(g, wv):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(w_npu, w.numpy(), rtol=1e-5)
    assert s["max_signatures_per_cluster"] == 1 and s["fallbacks"] == 0, s
    try:
        step(x, tf.constant([5, 0]), tf.constant([0, 7]))       # 5 + 8 > 12: past the axis
    except tf.errors.InvalidArgumentError as e:
        print("OK", str(e).splitlines()[0][:200])
    """, timeout=240)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-4000:]


def test_keras_random_crop_fit_matches_cpu_without_recompiles():
    # Keras' RandomCrop (seeded: the same crops on both devices) in a model trained with fit,
    # 50 samples in batches of 16: a new crop per batch, one compile.
    r = run_python("""
    import numpy as np, tensorflow as tf, keras, npu_device
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(50, 14, 14, 3)).astype(np.float32)
    y = rng.integers(0, 3, 50).astype(np.int32)
    runs = []
    for device in ("/device:NPU:0", "/CPU:0"):
        with tf.device(device):
            keras.utils.set_random_seed(0)
            model = keras.Sequential([
                keras.Input((14, 14, 3)), keras.layers.RandomCrop(10, 10, seed=5),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            losses = model.fit(x, y, batch_size=16, epochs=3, shuffle=False,
                               verbose=0).history["loss"]
            runs.append((losses, model.get_weights()))
            if device != "/CPU:0":
                stats = npu_device.compile_stats()
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-4)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    assert stats["fallbacks"] == 0 and stats["max_signatures_per_cluster"] <= 2, stats
    print("OK")
    """, timeout=240)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-4000:]


def test_a_sliding_window_in_a_loop_and_its_gradient_compile_once():
    r = run_python("""
    import numpy as np, tensorflow as tf, npu_device
    x = tf.constant(np.random.default_rng(1).normal(size=(20, 6)).astype(np.float32))

    @tf.function
    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            def body(i, acc):
                return i + 1, acc + tf.reduce_sum(tf.tanh(x[i:i + 4, 1:5] * 2.0), axis=0)
            acc = tf.while_loop(lambda i, acc: i < 16, body, (0, tf.zeros([4])))[1]
            loss = tf.reduce_sum(acc ** 2)
        return acc, tape.gradient(loss, x)

    got = [t.numpy() for t in f(x)]
    s = npu_device.compile_stats()
    with tf.device("/CPU:0"):
        want = [t.numpy() for t in f(x)]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-4)
    assert s["max_signatures_per_cluster"] == 1 and s["fallbacks"] == 0, s
    print("OK")
    """, timeout=240)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-4000:]
