"""Stateless random integers and categorical draws on the NPU (graph_engine/ops/random.py,
kernels/random.cc): tf.random.stateless_uniform with integer dtypes and
tf.random.stateless_categorical give exactly what TensorFlow gives on the CPU, in compiled
functions and eagerly, with TF's errors for bad bounds. Also ScaleAndTranslate(Grad)
(graph_engine/ops/image.py, kernels/scale_translate.cc), the last ops of the same coverage
round: tf.image.resize with antialias (and lanczos, gaussian, mitchellcubic) and its gradient
on the NPU match TF on the CPU."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import numpy as np
import pytest
import tensorflow as tf

from graph_engine.compiler import reference_executor
from graph_engine.compiler.compile import compile_model
from graph_engine.compiler.devtools import op_request
from graph_engine.ops import random as ge_random
from npu_device.explain import explain
from test_ge_random import CPU, NPU, on

pytestmark = pytest.mark.timeout(300)

KEY = np.array([0x0123456789ABCDEF], np.uint64)
COUNTER = np.array([0xFFFFFFFFFFFFFFFF, 41], np.uint64)     # the first call carries into word 2


@pytest.fixture(autouse=True)
def _npu_kernels_only(no_soft_placement):
    """Every test here: its NPU ops must have NPU kernels (conftest.no_soft_placement)."""


def assert_same(npu, cpu):
    for n, c in zip(npu, cpu):
        assert n.dtype == c.dtype and n.shape == c.shape
        np.testing.assert_array_equal(n, c)


def test_a_program_of_random_ints_and_categorical_draws_runs_on_the_npu_as_on_the_cpu():
    logits = np.log(np.random.default_rng(3).dirichlet(np.ones(10), size=6)).astype(np.float32)
    logits[2, 4] = -np.inf                          # a class that is never drawn

    def program(lg, seed):         # a seed tensor: Grappler would fold constant-seeded draws
        ints = tf.random.stateless_uniform([6, 9], seed=seed, minval=-10, maxval=250, dtype=tf.int32)
        wide = tf.random.stateless_uniform([7], seed=seed + 1, minval=-2**40, maxval=2**41, dtype=tf.int64)
        bits = tf.random.stateless_uniform([5], seed=seed * 3, minval=None, maxval=None, dtype=tf.int64)
        picks = tf.random.stateless_categorical(lg, 12, seed=seed)
        return ints, wide, bits, picks, tf.gather(lg, picks, batch_dims=1)

    seed = np.array([3, -4], np.int32)
    with tf.device(NPU):
        report = explain(program, logits, seed)
    with tf.device(CPU):
        cpu = [t.numpy() for t in tf.function(program)(logits, seed)]
    assert_same([t.numpy() for t in report.outputs], cpu)
    assert not set(report.ops_on("cpu")) - {"_Arg", "_Retval"}, str(report)
    assert {"StatelessRandomUniformIntV2", "StatelessRandomUniformFullIntV2",
            "StatelessMultinomial"} <= set(report.ops_on("npu")), str(report)
    assert cpu[0].min() >= -10 and cpu[0].max() < 250 and not np.any(cpu[3][2] == 4)


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("bounds", [(0, 7), (-9, -8), ("min", "max"), (-1000, 10**9)],
                         ids=["small", "one-value", "whole-range", "across-zero"])
def test_uniform_int_v2_and_v1_equal_cpu(dtype, bounds):
    info = np.iinfo(dtype.as_numpy_dtype)
    lo, hi = (getattr(info, b) if isinstance(b, str) else b for b in bounds)
    lo, hi = tf.constant(lo, dtype), tf.constant(hi, dtype)
    for draw in (lambda: tf.raw_ops.StatelessRandomUniformIntV2(shape=[3, 11], key=KEY, counter=COUNTER,
                                                                 alg=1, minval=lo, maxval=hi),
                 lambda: tf.raw_ops.StatelessRandomUniformInt(shape=[11], seed=tf.constant([5, -6], tf.int32),
                                                              minval=lo, maxval=hi)):
        assert_same(on(NPU, draw), on(CPU, draw))


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64, tf.uint64], ids=lambda d: d.name)
def test_full_int_v2_and_v1_equal_cpu(dtype):
    # 7 values: a 64-bit draw ends half way through a Philox call
    seed = tf.constant([2**40, -1], tf.int64)
    for draw in (lambda: tf.raw_ops.StatelessRandomUniformFullIntV2(shape=[7], key=KEY, counter=COUNTER,
                                                                     alg=3, dtype=dtype),
                 lambda: tf.raw_ops.StatelessRandomUniformFullInt(shape=[7, 1], seed=seed, dtype=dtype)):
        npu = on(NPU, draw)
        assert_same(npu, on(CPU, draw))
        assert len(np.unique(npu[0])) == 7


def test_bounds_are_checked_as_tf_checks_them():
    key, counter = tf.constant(KEY), tf.constant(COUNTER)
    for lo, hi in ((3, 3), (4, -4)):
        draw = lambda: tf.raw_ops.StatelessRandomUniformIntV2(shape=[2], key=key, counter=counter, alg=1,
                                                               minval=tf.constant(lo), maxval=tf.constant(hi))
        with tf.device(NPU), pytest.raises(tf.errors.InvalidArgumentError, match="minval < maxval"):
            draw()
    # an empty result is never checked (TF returns before looking at the bounds)
    empty = lambda: tf.raw_ops.StatelessRandomUniformInt(shape=[0, 3], seed=tf.constant([1, 2]),
                                                         minval=tf.constant(5), maxval=tf.constant(1))
    assert on(NPU, empty)[0].shape == (0, 3)


def test_categorical_edge_rows_equal_cpu():
    logits = np.array([[0.0, -np.inf, 1.0, np.nan],          # NaN and -inf are left out
                       [-np.inf] * 4,                          # nothing to draw: class 4 (TF's)
                       [np.inf, 0.0, 0.0, 0.0],               # +inf is left out too
                       [3e38, -3e38, 3e38, 0.0]], np.float32)
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
        with np.errstate(over="ignore"):            # 3e38 is inf in float16: left out as well
            narrow = logits.astype(dtype.as_numpy_dtype)
        for out in (tf.int32, tf.int64):
            draw = lambda: tf.random.stateless_categorical(narrow, 25, seed=[-1, 2**31 - 1], dtype=out)
            npu = on(NPU, draw)
            assert_same(npu, on(CPU, draw))
    assert set(npu[0][0]) <= {0, 2} and set(npu[0][1]) == {4}


def test_categorical_follows_tf_row_blocks(python_subprocess):
    """TF's CPU kernel restarts the stream at each block of rows its thread pool runs; with a
    3-thread intra-op pool these rows fall into several blocks."""
    assert len(ge_random.multinomial_row_blocks(64, 100, 1000, 3)) > 1
    r = python_subprocess("""
        import npu_device, numpy as np, tensorflow as tf
        logits = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
        draw = lambda: tf.random.stateless_categorical(logits, 100, seed=[11, 12])
        with tf.device("/device:CPU:0"):
            cpu = draw().numpy()
        with tf.device("/device:NPU:0"):
            npu = draw()
        assert npu.device.endswith("NPU:0"), npu.device
        np.testing.assert_array_equal(npu.numpy(), cpu)
        print("same")
    """, env={"TF_NUM_INTRAOP_THREADS": "3"})
    assert r.returncode == 0 and "same" in r.stdout, r.stderr[-3000:]


def test_numpy_reference_matches_tensorflow():
    """The reference (constant folding, reference executor) draws TF's values too."""
    shape, seed = (lambda *d: np.array(d, np.int32)), np.array([3, 1], np.int64)
    logits = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    stream = {"key": KEY, "counter": COUNTER, "alg": np.int32(1)}
    cases = [("StatelessRandomUniformIntV2", {"shape": shape(4, 3), **stream, "minval": np.int64(-2**62),
                                              "maxval": np.int64(2**62 + 9)}, {}),
             ("StatelessRandomUniformInt", {"shape": np.array([5], np.int64), "seed": seed.astype(np.int32),
                                            "minval": np.int32(-3), "maxval": np.int32(1000)}, {}),
             ("StatelessRandomUniformFullIntV2", {"shape": shape(3), **stream}, {"dtype": tf.uint64}),
             ("StatelessRandomUniformFullInt", {"shape": shape(6), "seed": seed}, {"dtype": tf.int32}),
             ("StatelessMultinomial", {"logits": logits, "num_samples": np.int32(13), "seed": seed}, {})]
    for op, args, attrs in cases:
        with tf.device(CPU):
            expected = getattr(tf.raw_ops, op)(**args, **attrs).numpy()
        nd, inputs = op_request(op, args, **attrs)
        (got,) = reference_executor.run(compile_model(nd.SerializeToString()), inputs)
        assert got.dtype == expected.dtype, op
        np.testing.assert_array_equal(got, expected, err_msg=op)


# ---- ScaleAndTranslate: tf.image.resize(antialias=True) ----------------------------------------

RESIZE_TOL = dict(rtol=1e-5, atol=1e-5)      # float32 resampling sums; TF's order of operations


@pytest.mark.parametrize("method", ["bilinear", "bicubic", "lanczos3", "lanczos5", "gaussian",
                                    "mitchellcubic"])
@pytest.mark.parametrize("size", [(5, 9), (23, 17)], ids=["down", "up"])
def test_antialiased_resize_and_its_gradient_run_on_the_npu(method, size):
    rng = np.random.default_rng(5)
    images = rng.uniform(0, 1, (2, 12, 14, 3)).astype(np.float32)
    weights = rng.standard_normal((2, *size, 3)).astype(np.float32)

    def resize_and_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.image.resize(x, size, method=method, antialias=True)
            loss = tf.reduce_sum(y * weights)
        return y, tape.gradient(loss, x)

    with tf.device(NPU):
        report = explain(resize_and_gradient, images)
    with tf.device(CPU):
        cpu = [t.numpy() for t in tf.function(resize_and_gradient)(images)]
    assert {"ScaleAndTranslate", "ScaleAndTranslateGrad"} <= set(report.ops_on("npu")), str(report)
    assert not set(report.ops_on("cpu")) - {"_Arg", "_Retval"}, str(report)
    for got, want in zip(report.outputs, cpu):
        np.testing.assert_allclose(got.numpy(), want, **RESIZE_TOL)


@pytest.mark.parametrize("kernel", ["lanczos3", "keyscubic", "box"])
def test_translated_resampling_with_non_finite_pixels_equals_cpu(kernel):
    """Outputs sampled outside the image are 0; an inf pixel turns every output whose span
    touches it (even with weight 0) into NaN or inf, as in TF."""
    images = np.random.default_rng(6).uniform(-1, 1, (1, 6, 7, 2)).astype(np.float32)
    images[0, 2, 3, 0] = np.inf
    args = dict(images=images, size=np.array([8, 5], np.int32), scale=np.float32([0.9, 1.3]),
                translation=np.float32([-1.5, 2.25]), kernel_type=kernel, antialias=True)
    draw = lambda: tf.raw_ops.ScaleAndTranslate(**args)    # noqa: E731
    (npu,), (cpu,) = on(NPU, draw), on(CPU, draw)
    np.testing.assert_array_equal(np.isnan(npu), np.isnan(cpu))
    np.testing.assert_array_equal(np.isinf(npu), np.isinf(cpu))
    finite = np.isfinite(cpu)
    np.testing.assert_allclose(npu[finite], cpu[finite], **RESIZE_TOL)
    assert np.any(cpu == 0) and np.any(~finite)


def test_scale_must_be_positive_even_for_an_empty_batch():
    for images in (np.ones((1, 4, 4, 1), np.float32), np.ones((0, 4, 4, 1), np.float32)):
        with tf.device(NPU), pytest.raises(tf.errors.InvalidArgumentError, match="Scale must be greater"):
            tf.raw_ops.ScaleAndTranslate(images=images, size=[2, 2], scale=np.float32([0.5, 0.0]),
                                         translation=np.float32([0, 0]))
