"""The precision pass: each precision mode rewrites float32 kernels to float16/bfloat16 with
explicit Casts; results follow the mode's numerics and stay close to float32 TF."""
import json

import numpy as np
import pytest
import tensorflow as tf

from graph_engine.ops import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.compiler import options, reference_executor
from graph_engine.compiler.api import CompileError

from test_ge_compile import compile_function, mlp_args, mlp_step  # noqa: E402

R = np.random.default_rng(3)


def two_layers(x, w1, w2):
    h = tf.nn.relu(tf.matmul(x, w1))
    return [tf.nn.softmax(tf.matmul(h, w2)), tf.exp(h)]


ARGS = [R.standard_normal((8, 16)).astype(np.float32),
        (R.standard_normal((16, 32)) * 0.3).astype(np.float32),
        (R.standard_normal((32, 4)) * 0.3).astype(np.float32)]


def compile_with(fn, args, **opts):
    """Partitions with the compile options `opts` (the cluster carries them) and compiles.
    Optional passes are off: these tests count the Casts and kernels the precision pass made,
    which fusion would merge (fusion under precision modes: test_precision_modes_e2e.py)."""
    opts.setdefault("fusion_switch_file", {"ALL": "off"})
    model, inputs, routes = compile_function(fn, args, opts)
    m = mf.deserialize(model)
    got = reference_executor.run(model, inputs)
    return m, [got[routes[i]] for i in range(len(routes))]


def kernel_types(m, name):
    return [m.values[k.outputs[0]].dtype for k in m.kernels if k.kernel == name]


def test_must_keep_origin_dtype_changes_nothing():
    m, got = compile_with(two_layers, ARGS, precision="must_keep_origin_dtype")
    assert "Cast" not in {k.kernel for k in m.kernels}
    want = two_layers(*ARGS)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_cube_fp16in_fp32out_rounds_matmul_operands():
    m, got = compile_with(lambda x, w: [tf.matmul(x, w)], ARGS[:2],
                          precision="cube_fp16in_fp32out")
    assert kernel_types(m, "MatMul") == [dt.DT_FLOAT]
    assert [k.kernel for k in m.kernels].count("Cast") == 4          # 2 operands x (f16, f32)
    x16, w16 = (a.astype(np.float16).astype(np.float32) for a in ARGS[:2])
    np.testing.assert_allclose(got[0], x16 @ w16, rtol=1e-5, atol=1e-6)
    assert got[0].dtype == np.float32


@pytest.mark.parametrize("mode,narrow", [("allow_fp32_to_fp16", dt.DT_HALF),
                                         ("allow_fp32_to_bf16", dt.DT_BFLOAT16)])
def test_allow_fp32_to_narrow_reduces_only_matrix_ops(mode, narrow):
    m, got = compile_with(two_layers, ARGS, precision=mode)
    assert kernel_types(m, "MatMul") == [narrow, narrow]
    assert kernel_types(m, "Relu") == kernel_types(m, "Softmax") == [dt.DT_FLOAT]
    want = two_layers(*ARGS)
    rtol = 2e-2 if narrow == dt.DT_HALF else 6e-2
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max())


def test_force_fp16_reduces_every_float_op():
    m, got = compile_with(two_layers, ARGS, precision="force_fp16")
    compute = [k for k in m.kernels if k.kernel != "Cast"]
    assert all(m.values[k.outputs[0]].dtype == dt.DT_HALF for k in compute)
    # chains stay narrow: only graph inputs are narrowed and graph outputs widened
    assert [k.kernel for k in m.kernels].count("Cast") == len(ARGS) + 2
    for g, w in zip(got, two_layers(*ARGS)):
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=2e-2 * np.abs(w).max())


def test_mixed_precision_follows_the_lists():
    m, _ = compile_with(two_layers, ARGS, precision="allow_mix_precision_fp16")
    assert kernel_types(m, "MatMul") == [dt.DT_HALF, dt.DT_HALF]      # white
    assert kernel_types(m, "Relu") == [dt.DT_HALF]                    # gray after white
    assert kernel_types(m, "Softmax") == kernel_types(m, "Exp") == [dt.DT_FLOAT]   # black
    mix = json.dumps({"black-list": {"to-add": ["MatMul"]}})
    m, _ = compile_with(two_layers, ARGS, precision="allow_mix_precision_bf16",
                        modify_mixlist=mix)
    assert "Cast" not in {k.kernel for k in m.kernels}


def test_mixed_precision_training_step_stays_close():
    """Forward and backward in bfloat16 where the lists allow: loss and gradients stay within
    bfloat16 error of float32 TF. Data of its own, not the shared generator's next draw (which
    depends on the tests run before): about one draw in four puts a hidden pre-activation within
    bfloat16 rounding of zero, ReLU's mask flips there, and a whole row of w1's gradient moves
    (6-7% of its norm), a property of the precision, not an error."""
    args = mlp_args(rng=np.random.default_rng(0))
    m, got = compile_with(mlp_step, args, precision="allow_mix_precision_bf16")
    assert dt.DT_BFLOAT16 in kernel_types(m, "MatMul")
    want = tf.function(mlp_step)(*args)
    for g, w in zip(got, want):
        w = np.asarray(w)
        np.testing.assert_allclose(g, w, rtol=5e-2, atol=5e-2 * np.abs(w).max())


def test_bad_precision_options_are_named():
    with pytest.raises(CompileError, match="precision mode 'fp8' is not implemented; allowed: "):
        compile_with(two_layers, ARGS, precision="fp8")
    with pytest.raises(CompileError, match="modify_mixlist: unknown list 'grey-list'"):
        compile_with(two_layers, ARGS, precision="allow_mix_precision_fp16",
                     modify_mixlist='{"grey-list": {"to-add": ["Relu"]}}')


def test_graph_memory_max_size():
    with pytest.raises(CompileError, match=r"needs \d+ bytes of working memory .* "
                                           r"graph_memory_max_size is 1024"):
        compile_with(mlp_step, mlp_args(), graph_memory_max_size=1024)
