"""The precision pass beyond the modes themselves: keep_dtype_scope pins ops, exact Cast chains
cancel in every mode (no Cast of a Cast whose middle type holds the source exactly; narrowing
chains round on purpose and stay; no duplicate Casts), and docs/precision.md shows the current
op lists."""
import os

import numpy as np
import pytest
import tensorflow as tf

from graph_engine.ops import dtypes as dt
from graph_engine.compiler import mixlist
from graph_engine.compiler.passes.cancel_casts import holds
from graph_engine.compiler.passes.precision import MODES

from test_ge_compile import mlp_args, mlp_step  # noqa: E402
from test_ge_precision import ARGS, compile_with, kernel_types  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def keep_second_matmul(x, w1, w2):
    from npu_device.precision import keep_dtype_scope
    h = tf.nn.relu(tf.matmul(x, w1))
    with keep_dtype_scope():
        y = tf.matmul(h, w2)
    return [y]


@pytest.mark.parametrize("mode", ["allow_mix_precision_fp16", "force_fp16",
                                  "allow_fp32_to_fp16", "cube_fp16in_fp32out"])
def test_keep_dtype_scope_pins_ops(monkeypatch, mode):
    m, got = compile_with(keep_second_matmul, ARGS, precision=mode)
    first, second = (k for k in m.kernels if k.kernel == "MatMul")
    assert m.values[second.outputs[0]].dtype == dt.DT_FLOAT
    producers = {o: k for k in m.kernels for o in k.outputs}
    # the pinned MatMul reads float32 that was not rounded through float16 for it
    assert all(producers[v].kernel != "Cast" or producers[v].node != second.node
               for v in second.inputs if v in producers)
    if mode != "cube_fp16in_fp32out":
        assert m.values[first.outputs[0]].dtype == dt.DT_HALF
    h = np.maximum(ARGS[0].astype(np.float16).astype(np.float32)
                   @ ARGS[1].astype(np.float16).astype(np.float32), 0)
    # float16 rounding of the first layer only: within fp16 error of float32
    np.testing.assert_allclose(got[0], h @ ARGS[2], rtol=1e-2, atol=1e-2)


def cast_problems(m):
    producers = {o: k for k in m.kernels for o in k.outputs}
    problems, seen = [], set()
    for k in m.kernels:
        if k.kernel != "Cast":
            continue
        key = (k.inputs[0], m.values[k.outputs[0]].dtype)
        if key in seen:
            problems.append(f"duplicate cast {k.node}")
        seen.add(key)
        src = producers.get(k.inputs[0])
        # a chain whose middle type holds the source exactly is redundant; a narrowing middle
        # rounds on purpose (the user's own, or cube_fp16in_fp32out's)
        if src is not None and src.kernel == "Cast" and holds(
                m.values[src.outputs[0]].dtype, m.values[src.inputs[0]].dtype):
            problems.append(f"cast chain {src.node} -> {k.node}")
    return problems


def user_casts(x):
    x16 = tf.cast(x, tf.float16)
    back = tf.cast(tf.cast(x16, tf.float32), tf.float16)        # exact round trip: cancels
    rounded = tf.cast(x16, tf.float32)                           # deliberate rounding: stays
    return [tf.cast(back, tf.float32) * 2.0, rounded, tf.cast(tf.cast(x16, tf.float32),
                                                              tf.bfloat16)]


def test_user_cast_chains_cancel(monkeypatch):
    x = (ARGS[0] * 1000).astype(np.float32)
    m, got = compile_with(user_casts, [x], precision="must_keep_origin_dtype")
    assert cast_problems(m) == []
    casts = [(m.values[k.inputs[0]].dtype, m.values[k.outputs[0]].dtype)
             for k in m.kernels if k.kernel == "Cast"]
    assert sorted(casts) == sorted([(dt.DT_FLOAT, dt.DT_HALF), (dt.DT_HALF, dt.DT_FLOAT),
                                    (dt.DT_HALF, dt.DT_BFLOAT16)])
    want = [np.asarray(w, np.float32) for w in tf.function(user_casts)(x)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g, np.float32), w)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_no_redundant_casts_in_a_training_step(monkeypatch, mode):
    m, _ = compile_with(mlp_step, mlp_args(), precision=mode)
    assert cast_problems(m) == []


def test_mixed_graph_with_user_casts_reads_narrow_values_directly(monkeypatch):
    """A Keras mixed_float16 style graph (fp16 values cast to float32 before a white op):
    the pass's Cast back to float16 cancels with the user's, no Cast is left before the MatMul."""
    def f(x, w):
        return [tf.matmul(tf.cast(tf.cast(x, tf.float16), tf.float32), w)]
    m, _ = compile_with(f, ARGS[:2], precision="allow_mix_precision_fp16")
    assert cast_problems(m) == []
    assert kernel_types(m, "MatMul") == [dt.DT_HALF]
    assert [k.kernel for k in m.kernels].count("Cast") == 3      # x, w to fp16; result to fp32


def test_docs_show_the_current_lists():
    with open(os.path.join(ROOT, "docs", "precision.md")) as f:
        assert mixlist.markdown_table() in f.read(), \
            "docs/precision.md is stale: paste `python -m graph_engine.compiler.mixlist`"


def test_modify_mixlist_moves_ops_between_lists():
    white, black, gray = mixlist.mix_lists({"white-list": {"to-add": ["Exp"]},
                                            "gray-list": {"to-remove": ["Tanh"]}})
    assert "Exp" in white and "Exp" not in black and "Tanh" not in gray
    assert "Tanh" not in white | black


def test_every_configurable_mode_is_implemented():
    from npu_device.configuration import options
    assert set(options.CANONICAL_PRECISION.values()) == set(MODES)


def test_integer_chains_cancel_only_when_exact():
    from graph_engine.compiler.passes.cancel_casts import _skippable
    assert _skippable(dt.DT_INT8, dt.DT_FLOAT, dt.DT_INT32)        # int8 -> int32 directly
    assert not _skippable(dt.DT_INT16, dt.DT_FLOAT, dt.DT_INT8)    # float->int8 saturates
    assert not _skippable(dt.DT_FLOAT, dt.DT_HALF, dt.DT_FLOAT)    # rounds on purpose
    assert _skippable(dt.DT_HALF, dt.DT_FLOAT, dt.DT_BFLOAT16)
