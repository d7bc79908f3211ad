"""TF1 optimizers training variables that live on the NPU (tf_plugin_cc/training_ops.cc).

tf.compat.v1.train.*Optimizer.minimize updates each variable with a ResourceApply* op (dense
gradients) or a ResourceSparseApply* op (the IndexedSlices gradient of an embedding lookup). With
soft placement off those ops must run on the NPU next to their variables; the same program on the
CPU is the reference: the weights after a few steps must agree to float32 rounding. Eagerly and in
a tf.compat.v1.Session graph; and invalid input is TF's InvalidArgumentError with TF's message.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import re

import numpy as np
import pytest
import tensorflow as tf

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
STEPS = 4
# float32 on both devices; the matmuls of the loss may sum in another order on the NPU
RTOL, ATOL = 1e-5, 1e-6

_R = np.random.default_rng(0)
X = _R.standard_normal((8, 4)).astype(np.float32)
Y = _R.standard_normal((8, 3)).astype(np.float32)
IDS = np.array([1, 3, 3, 7, 0, 2, 9, 1], np.int32)      # a repeated row: summed, then applied
W0 = _R.standard_normal((4, 3)).astype(np.float32)
EMB0 = _R.standard_normal((10, 4)).astype(np.float32)

v1 = tf.compat.v1.train
# (optimizer, the update ops it uses for the dense weights and for the embedding's rows)
OPTIMIZERS = {
    "GradientDescent": (lambda: v1.GradientDescentOptimizer(0.25),
                        {"ResourceApplyGradientDescent"}),
    "Momentum": (lambda: v1.MomentumOptimizer(0.1, 0.9),
                 {"ResourceApplyMomentum", "ResourceSparseApplyMomentum"}),
    "MomentumNesterov": (lambda: v1.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                         {"ResourceApplyMomentum", "ResourceSparseApplyMomentum"}),
    "Adam": (lambda: v1.AdamOptimizer(0.1), {"ResourceApplyAdam"}),
    "Adagrad": (lambda: v1.AdagradOptimizer(0.1),
                {"ResourceApplyAdagrad", "ResourceSparseApplyAdagrad"}),
    "RMSProp": (lambda: v1.RMSPropOptimizer(0.05, momentum=0.5),
                {"ResourceApplyRMSProp", "ResourceSparseApplyRMSProp"}),
    "RMSPropCentered": (lambda: v1.RMSPropOptimizer(0.05, momentum=0.5, centered=True),
                        {"ResourceApplyCenteredRMSProp", "ResourceSparseApplyCenteredRMSProp"}),
    "Ftrl": (lambda: v1.FtrlOptimizer(0.5, l1_regularization_strength=0.01,
                                      l2_regularization_strength=0.01),
             {"ResourceApplyFtrl", "ResourceSparseApplyFtrl"}),
    "FtrlShrinkage": (lambda: v1.FtrlOptimizer(0.5, l1_regularization_strength=0.01,
                                               l2_shrinkage_regularization_strength=0.01),
                      {"ResourceApplyFtrlV2", "ResourceSparseApplyFtrlV2"}),
    "Adadelta": (lambda: v1.AdadeltaOptimizer(1.0),
                 {"ResourceApplyAdadelta", "ResourceSparseApplyAdadelta"}),
    "ProximalAdagrad": (lambda: v1.ProximalAdagradOptimizer(0.1, l1_regularization_strength=0.01),
                        {"ResourceApplyProximalAdagrad", "ResourceSparseApplyProximalAdagrad"}),
    "ProximalGradientDescent": (
        lambda: v1.ProximalGradientDescentOptimizer(0.1, l1_regularization_strength=0.01),
        {"ResourceApplyProximalGradientDescent", "ResourceSparseApplyProximalGradientDescent"}),
}


@pytest.fixture(scope="module", autouse=True)
def exact_float32_no_soft_placement():
    # The loss and its gradients compile on the NPU: keep them float32 there. Soft placement off:
    # an update without an NPU kernel is an error, not a silent CPU run.
    npu_device.set_npu_config(precision_mode="must_keep_origin_dtype")
    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    yield
    tf.config.set_soft_device_placement(soft)
    npu_device.set_npu_config(precision_mode=None)


def _loss(w, b, emb):
    """A linear layer on an embedding lookup: dense gradients for w and b, IndexedSlices for
    emb."""
    return tf.reduce_mean(tf.square(tf.matmul(tf.gather(emb, IDS) + X, w) + b - Y))


def train_eager(device, make_optimizer):
    with tf.device(device):
        variables = [tf.Variable(W0), tf.Variable(np.zeros(3, np.float32)), tf.Variable(EMB0)]
        optimizer = make_optimizer()
        for _ in range(STEPS):
            optimizer.minimize(lambda: _loss(*variables), var_list=variables)
        assert all(v.device.endswith(device[1:]) for v in variables)
        return [v.numpy() for v in variables]


def train_graph(device, make_optimizer):
    """The same training in a TF1 graph and session; also returns the graph's update ops with
    their devices."""
    with tf.Graph().as_default() as graph, tf.device(device):
        variables = [tf.compat.v1.Variable(W0, use_resource=True),
                     tf.compat.v1.Variable(np.zeros(3, np.float32), use_resource=True),
                     tf.compat.v1.Variable(EMB0, use_resource=True)]
        train_op = make_optimizer().minimize(_loss(*variables), var_list=variables)
        config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(STEPS):
                sess.run(train_op)
            values = sess.run(variables)
    updates = {op.type: op.device for op in graph.get_operations()
               if op.type.startswith(("ResourceApply", "ResourceSparseApply"))}
    return values, updates


def assert_same_weights(cpu, npu):
    assert not np.allclose(cpu[0], W0) and not np.allclose(cpu[2], EMB0)   # it trained
    for c, n in zip(cpu, npu):
        np.testing.assert_allclose(n, c, rtol=RTOL, atol=ATOL)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_eager_training_matches_cpu(name):
    make_optimizer, _ = OPTIMIZERS[name]
    assert_same_weights(train_eager(CPU, make_optimizer), train_eager(NPU, make_optimizer))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_session_training_matches_cpu(name):
    make_optimizer, ops = OPTIMIZERS[name]
    cpu, _ = train_graph(CPU, make_optimizer)
    npu, updates = train_graph(NPU, make_optimizer)
    assert_same_weights(cpu, npu)
    assert ops <= set(updates), (ops, updates)
    assert all(d.upper().endswith("NPU:0") for d in updates.values()), updates


@pytest.mark.timeout(300)
def test_adagrad_da_with_global_step():
    def train(device):
        with tf.device(device):
            step = tf.Variable(0, dtype=tf.int64)
            w, b, emb = tf.Variable(W0), tf.Variable(np.zeros(3, np.float32)), tf.Variable(EMB0)
            optimizer = v1.AdagradDAOptimizer(0.1, step, l1_regularization_strength=0.01)
            for _ in range(STEPS):
                optimizer.minimize(lambda: _loss(w, b, emb), var_list=[w, b, emb])
                step.assign_add(1)
            return [w.numpy(), b.numpy(), emb.numpy()]
    assert_same_weights(train(CPU), train(NPU))


def _message(err):
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(err))
    return text.split(" [Op:")[0].strip()


def _ones(*shape):
    return tf.Variable(np.ones(shape, np.float32))


def _error(device, fn):
    with tf.device(device):
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            fn()
    return _message(info.value)


@pytest.mark.timeout(300)
def test_bad_shapes_are_tf_errors():
    def dense():
        var, accum = _ones(3, 4), _ones(3, 4)
        tf.raw_ops.ResourceApplyAdagrad(var=var.handle, accum=accum.handle, lr=np.float32(0.1),
                                        grad=np.ones((2, 4), np.float32))

    def sparse_index():
        var, accum = _ones(3, 4), _ones(3, 4)
        tf.raw_ops.ResourceSparseApplyMomentum(
            var=var.handle, accum=accum.handle, lr=np.float32(0.1),
            grad=np.ones((2, 4), np.float32), indices=np.array([0, 3], np.int32),
            momentum=np.float32(0.9))

    def slot_shape():
        var, m = _ones(3, 4), _ones(4, 3)
        tf.raw_ops.ResourceApplyAddSign(var=var.handle, m=m.handle, lr=np.float32(0.1),
                                        alpha=np.float32(1), sign_decay=np.float32(0.5),
                                        beta=np.float32(0.9), grad=np.ones((3, 4), np.float32))

    def not_positive():
        var, accum = _ones(3), _ones(3)
        tf.raw_ops.ResourceApplyProximalAdagrad(
            var=var.handle, accum=accum.handle, lr=np.float32(-0.1), l1=np.float32(0),
            l2=np.float32(0), grad=np.ones(3, np.float32))

    expected = {dense: "var and grad do not have the same shape[3,4] [2,4]",
                sparse_index: "Index 3 at offset 1 in indices is out of range",
                slot_shape: "var and m do not have the same shape[3,4] [4,3]",
                not_positive: "lr is not a positive scalar: []"}
    for fn, message in expected.items():
        assert _error(NPU, fn) == _error(CPU, fn) == message


@pytest.mark.timeout(300)
def test_failed_sparse_update_changes_nothing():
    with tf.device(NPU):
        var, accum = _ones(3, 2), _ones(3, 2)
        with pytest.raises(tf.errors.InvalidArgumentError, match="indices"):
            tf.raw_ops.ResourceSparseApplyAdagrad(
                var=var.handle, accum=accum.handle, lr=np.float32(0.1),
                grad=np.ones((2, 2), np.float32), indices=np.array([0, -1], np.int64))
        np.testing.assert_array_equal(var.numpy(), np.ones((3, 2), np.float32))


@pytest.mark.timeout(300)
def test_a_value_read_before_an_update_keeps_it():
    # The read may share the variable's buffer: the update writes a copy (copy-on-write).
    with tf.device(NPU):
        var, accum = _ones(4), _ones(4)
        before = var.read_value()
        tf.raw_ops.ResourceApplyMomentum(var=var.handle, accum=accum.handle, lr=np.float32(0.5),
                                         grad=np.ones(4, np.float32), momentum=np.float32(0.0))
        np.testing.assert_array_equal(before.numpy(), np.ones(4, np.float32))
        np.testing.assert_array_equal(var.numpy(), np.full(4, 0.5, np.float32))
