"""tf.random.Generator with its state on the NPU (tf_plugin_cc/random_ops.cc: RngReadAndSkip).

A Generator's state variable lands on the NPU like any other variable, and its one stateful
op must run there too: every draw is checked against a Generator with the same seed on the
CPU, and the state it leaves behind against the CPU's, eagerly and inside tf.function."""
import logging

import numpy as np
import pytest
import tensorflow as tf

import npu_device  # noqa: F401  (registers the NPU)

pytestmark = pytest.mark.timeout(300)
NPU, CPU = "/device:NPU:0", "/device:CPU:0"


def device_type(name):
    return tf.DeviceSpec.from_string(name).device_type


def draws(g):
    """One of each of the Generator's distributions (each advances its state)."""
    return [g.normal([3, 5]), g.uniform([7], minval=-2.0, maxval=3.0),
            g.truncated_normal([4, 2]), g.uniform([6], minval=0, maxval=100, dtype=tf.int32),
            g.uniform_full_int([5], dtype=tf.int64), g.normal([2], dtype=tf.float16)]


def assert_same_draws(got, want):
    for a, b in zip(got, want):
        a, b = a.numpy(), b.numpy()
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-6 if a.dtype == np.float32 else 1e-3)
        else:
            np.testing.assert_array_equal(a, b)


def test_a_generator_without_a_device_scope_draws_on_the_npu_as_on_the_cpu():
    g = tf.random.Generator.from_seed(1234)
    assert device_type(g.state.device) == "NPU"
    with tf.device(CPU):
        ref = tf.random.Generator.from_seed(1234)
    for _ in range(2):                 # the second round starts from the advanced state
        assert_same_draws(draws(g), draws(ref))
    np.testing.assert_array_equal(g.state.numpy(), ref.state.numpy())


def test_a_generator_in_a_function_advances_its_state_on_every_call():
    with tf.device(NPU):
        g = tf.random.Generator.from_seed(7)
        step = tf.function(lambda: draws(g))
    with tf.device(CPU):
        ref = tf.random.Generator.from_seed(7)
        ref_step = tf.function(lambda: draws(ref))
    for _ in range(3):
        assert_same_draws(step(), ref_step())
    np.testing.assert_array_equal(g.state.numpy(), ref.state.numpy())
    # the global generator, seeded from the OS, and a split one are usable too
    assert tf.random.get_global_generator().normal([2]).shape == (2,)
    with tf.device(NPU):
        children = g.split(2)
    assert [c.normal([3]).shape for c in children] == [(3,), (3,)]


def test_a_value_read_before_a_draw_keeps_its_contents():
    """In a function the read aliases the state's buffer: the skip copies it before writing."""
    with tf.device(NPU):
        g = tf.random.Generator.from_seed(5)

        @tf.function
        def read_then_draw():
            return g.state.read_value(), g.normal([4])

        start = g.state.numpy()
        before, _ = read_then_draw()
    np.testing.assert_array_equal(before.numpy(), start)
    assert not np.array_equal(g.state.numpy(), start)


def read_and_skip(state, alg, delta, device):
    with tf.device(device):
        v = tf.Variable(state)
        out = tf.raw_ops.RngReadAndSkip(resource=v.handle, alg=alg,
                                        delta=tf.constant(delta, tf.uint64))
        return out.numpy(), v.numpy()


@pytest.mark.parametrize("state, delta, want", [
    ([5, 7, 9], 10, [5 + 2560, 7, 9]),          # the counter advances by delta * 256
    ([-1, 7, 9], 10, [2559, 8, 9]),             # carrying into its high half
    ([-1, -1, 9], 1, [255, 0, 9]),              # wrapping at 2^128; the key never changes
    ([5, 7, 9], 2 ** 56, [5, 7, 9]),            # delta * 256 is computed in 64 bits
    ([5, 7, 9, 11], 0, [5, 7, 9, 11]),          # a longer state: the first three are read
])
def test_read_and_skip_matches_the_cpu_kernel(state, delta, want):
    state = np.array(state, np.int64)
    out, after = read_and_skip(state, 1, delta, NPU)
    np.testing.assert_array_equal(out, state[:3])
    np.testing.assert_array_equal(after, np.array(want, np.int64))
    if len(state) == 3:                          # TF's CPU kernel overruns a longer state
        cpu_out, cpu_after = read_and_skip(state, 3, delta, CPU)
        np.testing.assert_array_equal(out, cpu_out)
        np.testing.assert_array_equal(after, cpu_after)


@pytest.mark.parametrize("state, alg, error", [
    (np.array([1, 2, 3], np.int64), 2, tf.errors.UnimplementedError),     # ThreeFry
    (np.array([1, 2, 3], np.int64), 7, tf.errors.InvalidArgumentError),
    (np.array([1, 2], np.int64), 1, tf.errors.InvalidArgumentError),       # too short
    (np.array([[1, 2, 3]], np.int64), 1, tf.errors.InvalidArgumentError),  # rank 2
    (np.array([1.0, 2.0, 3.0], np.float32), 1, tf.errors.InvalidArgumentError),
])
def test_bad_states_and_algorithms_raise_what_the_cpu_raises(state, alg, error):
    for device in (CPU, NPU):
        with pytest.raises(error) as e:
            read_and_skip(state, alg, 1, device)
        if device == CPU:
            want = str(e.value).split("[Op:")[0].split("}}")[-1].strip()
    assert want in str(e.value)
    out, _ = read_and_skip(np.array([1, 2, 3], np.int64), 1, 1, NPU)   # still working
    np.testing.assert_array_equal(out, [1, 2, 3])


def test_eager_draws_run_on_the_npu_without_falling_back(caplog):
    # a draw casts its count to uint64 and bitcasts the int64 state: both have NPU kernels
    g = tf.random.Generator.from_seed(3)
    with caplog.at_level(logging.WARNING, logger="npu_device"):
        draws(g)
    assert not [r.getMessage() for r in caplog.records if "ran on CPU" in r.getMessage()]
