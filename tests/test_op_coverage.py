"""The ops added for model coverage, and the coverage sweep (npu_device/tools/op_coverage.py).

* their numpy references (what constant folding and the reference executor run) against TF on
  the CPU, through an eager compile request as in tests/test_ge_ops.py;
* the sweep: every registered op, every dtype it claims, eagerly on the NPU with soft placement
  off (the C++ kernels) against TF on the CPU, forward and gradient; any failing run fails, and
  so does any run left unchecked for want of a TF reference;
* bad attributes give errors naming the problem, on the NPU as well.

TF on the CPU is op_cases.tf_cpu_op throughout: cases that only oneDNN builds of TF compute
directly (NCDHW, dilated Conv3D, ...) are computed in an equivalent form that plain Eigen builds
support, so these tests check the same thing on Intel and AMD machines.
"""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import numpy as np
import pytest
import tensorflow as tf

from graph_engine import ops
from graph_engine.ops import dtypes as gdt
from graph_engine.compiler import reference_executor
from graph_engine.compiler.compile import compile_model
from graph_engine.compiler.devtools import op_request
from npu_device.tools import op_cases, op_coverage



def _tf(op, inputs, attrs):
    out = op_cases.tf_cpu_op(op, inputs, attrs)
    return [np.asarray(t) for t in (out if isinstance(out, (list, tuple)) else [out])]


@pytest.mark.parametrize("case", op_cases.CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(op_cases.CASES)])
def test_reference_matches_tensorflow(case):
    op, inputs, attrs = case
    want = _tf(op, inputs, attrs)
    if op == "ConcatOffset":     # always folded in graphs (its inputs are shapes): no model
        got = ops.evaluate(ops.get(op), inputs["shape"], {"concat_dim": [int(inputs["concat_dim"])]},
                           [gdt.from_numpy(w.dtype) for w in want])
    else:
        nd, model_inputs = op_request(op, inputs, **attrs)
        got = reference_executor.run(compile_model(nd.SerializeToString()), model_inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_every_added_op_has_a_case():
    added = {"Erf", "Erfc", "Expm1", "Tan", "Atan", "Asin", "Acos", "Sinh", "Cosh", "Asinh",
             "Acosh", "Atanh", "Rint", "Inv", "Invert", "Selu", "SeluGrad", "SoftsignGrad",
             "InvGrad", "Atan2", "Xlogy", "Xlog1py", "Xdivy", "MulNoNan", "TruncateDiv",
             "TruncateMod", "ApproximateEqual", "Einsum", "ConcatOffset", "MirrorPad",
             "MirrorPadGrad", "ResizeBilinear", "ResizeBilinearGrad",
             "StatelessRandomGetKeyCounter", "StatelessRandomUniformV2", "StatelessRandomNormalV2",
             "StatelessTruncatedNormalV2", "StatelessRandomUniform", "StatelessRandomNormal",
             "StatelessTruncatedNormal", "Cumsum", "Cumprod", "MaxPoolGradGrad", "Conv3D",
             "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2", "GatherNd", "ScatterNd",
             "MaxPool3D", "AvgPool3D", "MaxPool3DGrad", "AvgPool3DGrad", "MaxPool3DGradGrad"}
    assert added <= set(ops.registered())
    assert added - {c[0] for c in op_cases.CASES} == set()


def test_registry_covers_at_least_150_ops():
    assert len(ops.registered()) >= 150, len(ops.registered())


def test_sweep_every_op_and_dtype_on_npu():
    results = op_coverage.sweep()
    swept = {r.op for r in results}
    assert set(ops.registered()) - swept <= op_coverage.EAGER_LESS
    failures = [r for r in results if r.failed]
    assert not failures, "\n".join(f"{r.op} {r.dtype}: {r.forward}; {r.gradient}" for r in failures)
    # "skipped" is for runs TF on the CPU has no reference for, even in op_cases.tf_cpu_op's
    # equivalent forms; there are none: a new one needs an equivalent form there, not a pass
    unchecked = [r for r in results if r.skipped]
    assert not unchecked, "no TF reference for:\n" + "\n".join(
        f"{r.op} {r.dtype}: {r.forward}; {r.gradient}" for r in unchecked)
    # the markdown lists every registered op
    text = op_coverage.markdown(results)
    assert all(f"| {name} |" in text for name in ops.registered())


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("Einsum", {"inputs": [np.ones((2, 3), np.float32)]}, {"equation": "ij"}, "->"),
    ("Einsum", {"inputs": [np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)]},
     {"equation": "ij,jk->ik"}, ""),
    ("MirrorPad", {"input": np.ones((2, 3), np.float32), "paddings": np.array([[0, 0], [3, 0]], np.int32)},
     {"mode": "REFLECT"}, "paddings"),
    ("Cumsum", {"x": np.ones(3, np.float32), "axis": np.int32(2)}, {}, "axis 2 is out of range"),
    ("GatherNd", {"params": np.ones((4, 3), np.float32), "indices": np.array([[1], [5]], np.int32)}, {},
     "out of range"),
    ("ScatterNd", {"indices": np.array([[4]], np.int32), "updates": np.ones((1, 3), np.float32),
                   "shape": np.array([4, 3], np.int32)}, {}, "out of range"),
    ("Conv3D", {"input": np.ones((1, 2, 2, 2, 3), np.float32), "filter": np.ones((1, 1, 1, 2, 1), np.float32)},
     dict(strides=[1, 1, 1, 1, 1], padding="VALID"), "channels"),
])
def test_bad_attributes_are_clear_errors_on_npu(op, inputs, attrs, message):
    with tf.device("/device:NPU:0"), pytest.raises((tf.errors.InvalidArgumentError,
                                                    tf.errors.InternalError, ValueError)) as e:
        getattr(tf.raw_ops, op)(**inputs, **attrs)
    assert message in str(e.value)
