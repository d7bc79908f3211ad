"""Weights converted once (issue 17): an inference graph's variable filters go into their
weight format (FILTER_KN in float32, FRACTAL_Z in float16; inference batch norm folded in) as
CACHED values the executor keeps between runs. The conversion is skipped while the weights are
the same buffers, and runs again after any write to them: assign, assign_add/sub, an optimizer
step, Keras fit. The 5HD convolution keeps its float32 copy of a FRACTAL_Z filter while the
converted filter's version holds, so a stale one would show here too (the float16 case).
Results are checked against TensorFlow on the CPU with the same weights after every kind of
write."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import npu_device
from graph_engine.compiler import compile as ge_compile
from npu_device import runtime

pytestmark = pytest.mark.timeout(600)
NPU = "/device:NPU:0"


def cnn(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.Conv2D(6, 3, padding="same"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4),
    ])


def cpu_reference(model, x):
    """The model's inference on TF's CPU with the model's current weights."""
    with tf.device("/CPU:0"):
        twin = keras.models.clone_model(model)
        twin.set_weights([w.numpy() for w in model.weights])
        return twin(x, training=False).numpy()


def compiled(model):
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def reused():
    return runtime.counters()["conversions_reused"]


def check(model, infer, x, tol=1e-4):
    got = infer(x).numpy()
    np.testing.assert_allclose(got, cpu_reference(model, x), rtol=tol, atol=tol)
    return got


@pytest.fixture(params=["must_keep_origin_dtype", "force_fp16"])
def precision(request):
    """The filters' storage: FILTER_KN (float32, read in place) or FRACTAL_Z (float16, whose
    float32 copy the convolution keeps); yields the tolerance against TF's float32."""
    npu_device.set_npu_config(precision_mode=request.param)
    try:
        yield 1e-4 if request.param == "must_keep_origin_dtype" else 3e-2
    finally:
        npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")


def test_inference_converts_weights_once_and_compiles_no_per_step_weight_transdata():
    x = np.random.default_rng(1).standard_normal((3, 12, 12, 3)).astype(np.float32)
    with tf.device(NPU):
        model = cnn()
        infer = tf.function(lambda t: model(t, training=False))
        first = check(model, infer, x)
        meta = [m for m in ge_compile.recent_compiles() if m.get("cached_conversions")]
        assert meta, "no compiled model keeps converted weights"
        assert all(m["weight_transdata"] == 0 for m in meta)
        assert sum(m["cached_conversions"] for m in meta) >= 2     # two filters at least
        before, kernels = reused(), runtime.counters()["kernels_executed"]
        again = [infer(x).numpy() for _ in range(3)]
        per_step = (runtime.counters()["kernels_executed"] - kernels) / 3
    assert (reused() - before) / 3 >= 2
    for y in again:
        np.testing.assert_array_equal(y, first)
    # the cached conversions are not launched: fewer kernels than in the first run
    assert per_step < sum(len(m["kernels"]) for m in meta)


def test_folded_filters_share_bytes_and_one_filter_changing_alone_is_seen():
    """A filter scaled by its folded batch norm is read only by its own conversion, so the
    scaled filters share bytes in the cached region (plan_memory._place_cached). A write to one
    layer's filter or batch-norm scale converts that layer again and keeps the other's."""
    keras.utils.set_random_seed(7)
    model = keras.Sequential([
        keras.Input((10, 10, 4)),
        keras.layers.Conv2D(16, 3, padding="same"), keras.layers.BatchNormalization(),
        keras.layers.Conv2D(32, 3, padding="same"), keras.layers.BatchNormalization(),
        keras.layers.GlobalAveragePooling2D(),
    ])
    x = np.random.default_rng(8).standard_normal((2, 10, 10, 4)).astype(np.float32)
    with tf.device(NPU):
        for bn in (model.layers[1], model.layers[3]):       # not the identity batch norm
            bn.moving_variance.assign(tf.fill(bn.moving_variance.shape, 2.5))
            bn.gamma.assign(tf.fill(bn.gamma.shape, 0.7))
        ge_compile.clear_recent()
        infer = tf.function(lambda t: model(t, training=False))
        check(model, infer, x)
        (meta,) = [m for m in ge_compile.recent_compiles() if m.get("cached_conversions")]
        assert meta["cached_transient"] >= 2, meta          # both scaled filters
        infer(x)                                            # cached now
        model.layers[2].kernel.assign(model.layers[2].kernel * -2.0)
        check(model, infer, x)
        model.layers[1].gamma.assign(tf.fill(model.layers[1].gamma.shape, -1.3))
        check(model, infer, x)
        model.layers[0].kernel.assign(model.layers[0].kernel * 0.5)
        check(model, infer, x)


@pytest.mark.parametrize("write", ["assign", "assign_add", "assign_sub", "optimizer", "tf1_apply"])
def test_a_write_to_a_weight_is_seen_by_the_next_inference(write, precision):
    x = np.random.default_rng(2).standard_normal((2, 12, 12, 3)).astype(np.float32)
    with tf.device(NPU):
        model = cnn(seed=3)
        ge_compile.clear_recent()
        infer = tf.function(lambda t: model(t, training=False))
        before = check(model, infer, x, precision)
        formats = {dst for m in ge_compile.recent_compiles() for dst in m.get("weight_formats", ())}
        assert formats == ({"FILTER_KN"} if precision < 1e-3 else {"FRACTAL_Z"}), formats
        infer(x)                                  # the conversions are cached now
        kernel, gamma = model.layers[0].kernel, model.layers[1].gamma
        delta = tf.fill(kernel.shape, 0.25)
        if write == "assign":
            kernel.assign(kernel * -1.5)
            gamma.assign(gamma * 3.0)             # folded into the first filter
        elif write == "assign_add":
            kernel.assign_add(delta)
        elif write == "assign_sub":
            kernel.assign_sub(delta)
        elif write == "optimizer":
            opt = keras.optimizers.SGD(0.5)
            opt.apply_gradients([(tf.ones_like(kernel), kernel)])
        else:
            tf.raw_ops.ResourceApplyGradientDescent(var=kernel.handle, alpha=tf.constant(0.5),
                                                    delta=delta)
        after = check(model, infer, x, precision)
        assert not np.allclose(after, before)
        np.testing.assert_array_equal(infer(x).numpy(), after)   # and cached again


def test_fit_with_validation_then_predict_matches_the_cpu_with_the_trained_weights():
    """Training steps write the weights between validation passes that reuse conversions."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((45, 12, 12, 3)).astype(np.float32)   # 45: partial last batch
    y = rng.integers(0, 4, 45)
    with tf.device(NPU):
        model = compiled(cnn(seed=5))
        start = reused()
        model.fit(x, y, batch_size=8, epochs=3, validation_data=(x[:20], y[:20]), verbose=0)
        assert reused() > start                   # validation batches reused conversions
        got = model.predict(x, batch_size=16, verbose=0)
    np.testing.assert_allclose(got, cpu_reference(model, x), rtol=1e-4, atol=1e-4)


def mlp(seed=0):
    """K of 300 and 200 with 40 rows: both products take the packed-weight path."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((300,)), keras.layers.Dense(200, activation="relu"),
                             keras.layers.Dense(10)])


def kept():
    return runtime.counters()["weights_kept"]


@pytest.mark.parametrize("write", ["assign", "assign_add", "optimizer"])
def test_dense_weights_are_packed_once_and_a_write_is_seen(write):
    """A MatMul keeps its weight packed while the executor vouches the variable's buffer
    unchanged: from the second call on, each product reads the kept panels; a write gives the
    variable a new buffer, so the next call reads it as stored, then packs it again."""
    x = np.random.default_rng(5).standard_normal((40, 300)).astype(np.float32)
    with tf.device(NPU):
        model = mlp(seed=6)
        infer = tf.function(lambda t: model(t, training=False))
        first = check(model, infer, x)
        start = kept()
        again = [infer(x).numpy() for _ in range(3)]
        assert kept() - start == 3 * 2                    # both weights, every call
        for y in again:
            np.testing.assert_allclose(y, first, rtol=1e-5, atol=1e-5)
        kernel = model.layers[0].kernel
        if write == "assign":
            kernel.assign(kernel * -1.5)
        elif write == "assign_add":
            kernel.assign_add(tf.fill(kernel.shape, 0.05))
        else:
            keras.optimizers.SGD(0.5).apply_gradients([(tf.ones_like(kernel), kernel)])
        start = kept()
        after = check(model, infer, x)
        assert kept() - start == 1                        # the other layer's weight held
        assert not np.allclose(after, first)
        check(model, infer, x)                            # packed again
        assert kept() - start == 1 + 2


def test_eager_ops_vouch_for_no_packed_weight():
    """An eager op's model serves every caller of its signature (two layers of one shape): it
    never holds their weights, so eager updates stay in place."""
    x = np.random.default_rng(9).standard_normal((40, 300)).astype(np.float32)
    with tf.device(NPU):
        model = mlp(seed=10)
        start = kept()
        for _ in range(3):
            got = model(x).numpy()
        model.layers[0].kernel.assign_add(tf.fill(model.layers[0].kernel.shape, 0.01))
        got = model(x).numpy()
    assert kept() == start
    np.testing.assert_allclose(got, cpu_reference(model, x), rtol=1e-4, atol=1e-4)


def test_training_keeps_no_weight_and_predict_after_fit_sees_the_trained_weights():
    """A training step updates its weights (in place where it can): none is versioned, so
    nothing is packed per step; predict after fit reads the trained weights, packed."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((75, 300)).astype(np.float32)     # 75: partial last batch
    y = rng.integers(0, 10, 75)
    with tf.device(NPU):
        model = compiled(mlp(seed=8))
        start = kept()
        model.fit(x, y, batch_size=16, epochs=2, verbose=0)
        assert kept() == start
        for _ in range(2):
            got = model.predict(x, batch_size=40, verbose=0)
            np.testing.assert_allclose(got, cpu_reference(model, x), rtol=1e-4, atol=1e-4)
        assert kept() > start                             # the second predict's batches
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        got = model.predict(x, batch_size=40, verbose=0)
    np.testing.assert_allclose(got, cpu_reference(model, x), rtol=1e-4, atol=1e-4)
