"""Model zoo on the NPU: keras.applications CNNs, a small Keras 3-D network (Conv3D, 3-D pooling,
Dropout) and a small BERT-style encoder, each run on the NPU and on the CPU from the same weights.

Per model: inference outputs agree, one training step's loss and gradients agree, and
npu_device.explain of the compiled train step shows nothing on the CPU except `_Arg` plumbing
(Dropout's stateless random ops included: the NPU draws the same masks as the CPU). Inputs are
small (64x64 images, batch 2) to keep the file within a few minutes on two cores.

Tolerances: float32 throughout (precision_mode must_keep_origin_dtype); outputs 1e-4 absolute,
loss 1e-4 relative. Gradients are compared as a whole, not element by element: the relative L2
error of all gradients together, and each variable's largest error against the largest gradient
of the model, must be within 1e-2, or within 3x the CPU's own gradient change under a 1e-6
relative input perturbation where that is larger (cpu_sensitivity). BatchNormalization with batch 2 over 2x2 final feature maps
normalizes eight values per channel, which makes some gradients differences of nearly equal
numbers, dominated by float32 rounding on either device. (At 32x32 inputs the final maps are 1x1
and BatchNormalization of two values amplifies rounding into the loss itself: 64x64 it is.)
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import keras
import numpy as np
import pytest
import tensorflow as tf

from npu_device.explain import explain

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
PLUMBING = {"_Arg", "_Retval"}
FWD_ATOL, LOSS_RTOL, GRAD_RTOL = 1e-4, 1e-4, 1e-2

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    yield
    npu_device.set_npu_config(precision_mode=None)


def application(name, size):
    ctor = getattr(keras.applications, name)
    return lambda: ctor(weights=None, input_shape=(size, size, 3), classes=10)


def bert(vocab=50, seq=8, dim=16, heads=2, dropout=0.0):
    """Embedding + one post-norm transformer block (MultiHeadAttention, gelu feed-forward)."""
    layers = keras.layers
    tokens = keras.Input((seq,), dtype="int32")
    h = layers.Embedding(vocab, dim)(tokens)
    a = layers.MultiHeadAttention(heads, dim // heads, dropout=dropout)(h, h)
    h = layers.LayerNormalization()(h + a)
    f = layers.Dense(2 * dim, activation=keras.activations.gelu)(h)
    f = layers.Dense(dim)(f)
    if dropout:
        f = layers.Dropout(dropout)(f)
    h = layers.LayerNormalization()(h + f)
    return keras.Model(tokens, layers.Dense(vocab)(h))


def conv3d_net():
    """Keras 3-D layers: Conv3D, MaxPooling3D, AveragePooling3D, global pooling, Dropout."""
    layers = keras.layers
    x = keras.Input((4, 8, 8, 2))
    h = layers.Conv3D(4, 3, padding="same", activation="relu")(x)
    h = layers.MaxPooling3D(2)(h)
    h = layers.Conv3D(6, (1, 2, 2), strides=(1, 2, 1), padding="same")(h)
    h = layers.AveragePooling3D((1, 2, 2), padding="same")(h)
    h = layers.Dropout(0.3)(layers.GlobalAveragePooling3D()(h))
    return keras.Model(x, layers.Dense(3, activation="softmax")(h))


def twins(build):
    """The same model built on each device, with the CPU copy's weights."""
    models = {}
    for dev in (CPU, NPU):
        keras.utils.set_random_seed(0)
        with tf.device(dev):
            models[dev] = build()
    models[NPU].set_weights(models[CPU].get_weights())
    return models


def train_step(model, loss_fn):
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        return loss, tape.gradient(loss, model.trainable_variables)
    return step


def cpu_sensitivity(model, loss_fn, x, y, flat_grads):
    """How much the CPU's own gradients move (relative L2) when the input moves by 1e-6
    relative: the float32 conditioning of the step, which bounds how closely two devices can
    agree (ResNet50's batch-2 BatchNormalization moves ~5%)."""
    if not np.issubdtype(x.dtype, np.floating):
        return 0.0
    noise = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    with tf.device(CPU):
        _, g = tf.function(train_step(model, loss_fn))(x * (1 + 1e-6 * noise), y)
    moved = np.concatenate([tf.convert_to_tensor(v).numpy().reshape(-1) for v in g])
    return float(np.linalg.norm(moved - flat_grads) / np.linalg.norm(flat_grads))


def check_model(build, x, y, loss_fn):
    models = twins(build)
    out, loss, grads = {}, {}, {}
    for dev, m in models.items():
        with tf.device(dev):
            out[dev] = np.asarray(tf.function(lambda a: m(a, training=False))(x))
            if dev == NPU:
                report = explain(train_step(m, loss_fn), x, y)
                l, g = report.outputs
            else:
                l, g = tf.function(train_step(m, loss_fn))(x, y)
        # an Embedding's gradient is IndexedSlices
        loss[dev], grads[dev] = float(l), [tf.convert_to_tensor(v).numpy() for v in g]
    np.testing.assert_allclose(out[NPU], out[CPU], atol=FWD_ATOL, rtol=0)
    np.testing.assert_allclose(loss[NPU], loss[CPU], rtol=LOSS_RTOL)
    flat = {dev: np.concatenate([g.reshape(-1) for g in gs]) for dev, gs in grads.items()}
    tol = max(GRAD_RTOL, 3 * cpu_sensitivity(models[CPU], loss_fn, x, y, flat[CPU]))
    rel = np.linalg.norm(flat[NPU] - flat[CPU]) / np.linalg.norm(flat[CPU])
    assert rel <= tol, f"gradients: relative L2 error {rel:.3g} (tolerance {tol:.3g})"
    scale = float(np.abs(flat[CPU]).max())
    for v, gn, gc in zip(models[CPU].trainable_variables, grads[NPU], grads[CPU]):
        err = float(np.abs(gn - gc).max())
        assert err <= tol * scale, f"gradient of {v.path}: max error {err:.3g}, scale {scale:.3g}"
    on_cpu = set(report.ops_on("cpu")) - PLUMBING
    assert not on_cpu, f"ops on CPU: {on_cpu}\n{report}"
    assert report.graphs and not report.failures, str(report)
    return report


def image_batch(size):
    rng = np.random.default_rng(0)
    return rng.random((2, size, size, 3)).astype(np.float32), np.array([1, 3], np.int32)


sparse_xent = keras.losses.sparse_categorical_crossentropy


@pytest.mark.parametrize("name,size", [
    ("MobileNetV2", 64),
    ("ResNet50", 64),
    ("DenseNet121", 64),
    ("EfficientNetB0", 64),       # Dropout: the same masks on both devices
])
def test_application(name, size):
    x, y = image_batch(size)
    check_model(application(name, size), x, y, sparse_xent)


def test_conv3d_step():
    x = np.random.default_rng(0).random((2, 4, 8, 8, 2)).astype(np.float32)
    check_model(conv3d_net, x, np.array([0, 2], np.int32), sparse_xent)


def test_bert_encoder_step():
    tokens = np.random.default_rng(0).integers(0, 50, (2, 8)).astype(np.int32)
    check_model(bert, tokens, tokens,
                lambda y, p: keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True))


def test_bert_encoder_fit_loss_decreases():
    keras.utils.set_random_seed(0)
    tokens = np.random.default_rng(1).integers(0, 50, (8, 8)).astype(np.int32)
    with tf.device(NPU):
        model = bert(dropout=0.1)
        model.compile(optimizer=keras.optimizers.AdamW(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(tokens, tokens, batch_size=4, epochs=4, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
