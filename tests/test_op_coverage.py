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
from npu_device.tools import cases, op_cases, op_coverage



def _tf(op, inputs, attrs):
    out = op_cases.tf_cpu_op(op, inputs, attrs)
    return [np.asarray(t) for t in (out if isinstance(out, (list, tuple)) else [out])]


_GE_CASES = [c for c in cases.all_cases() if ops.get(c[0]) is not None]   # plugin kernels have no numpy reference


@pytest.mark.parametrize("case", _GE_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(_GE_CASES)])
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
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if i in _SIGN_FREE_COLUMNS.get(op, ()):
            # numpy's LAPACK and TF's Eigen may pick opposite signs for a singular vector or an
            # eigenvector (both right); the NPU kernels use Eigen, so the sweep checks the signs
            g, w = np.abs(g), np.abs(w)
        # a narrow result TF accumulates in its own dtype (CropAndResizeGradImage): its rounding
        tol = op_coverage.TOLERANCE.get(str(w.dtype), (1e-5,))[0] if w.dtype.itemsize == 2 else 1e-5
        as_wide = np.complex128 if w.dtype.kind == "c" else np.float64      # both parts of complex
        np.testing.assert_allclose(g.astype(as_wide), w.astype(as_wide), rtol=tol, atol=tol)


_SIGN_FREE_COLUMNS = {"Svd": (1, 2), "SelfAdjointEigV2": (1,)}   # output positions


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


def test_at_least_400_tf_ops_run_on_the_npu():
    # graph-engine ops and the plugin's own kernels (variable updates, data-dependent shapes)
    assert len(op_coverage.npu_ops()) >= 400, len(op_coverage.npu_ops())


@pytest.mark.parametrize("op", [o for o in op_coverage.npu_ops() if o not in op_coverage.EAGER_LESS])
def test_sweep_on_npu(op):
    """Every TF op with an NPU kernel (the plugin's own, variable updates ..., included), every
    dtype it claims, forward and gradient, against TF on the CPU."""
    results = op_coverage.sweep({op})
    assert results, f"{op} has an NPU kernel but no case in the sweep"
    failures = [r for r in results if r.failed]
    assert not failures, "\n".join(f"{r.op} {r.dtype}: {r.forward}; {r.gradient}" for r in failures)
    # "skipped" is for runs TF on the CPU has no reference for, even in op_cases.tf_cpu_op's
    # equivalent forms; there are none: a new one needs an equivalent form there, not a pass
    unchecked = [r for r in results if r.skipped]
    assert not unchecked, "no TF reference for:\n" + "\n".join(
        f"{r.op} {r.dtype}: {r.forward}; {r.gradient}" for r in unchecked)


def test_coverage_table_lists_every_op():
    text = op_coverage.markdown([])
    assert all(f"| {name} |" in text or f"| {name} (plugin) |" in text for name in op_coverage.npu_ops())


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
     dict(strides=[1, 1, 1, 1, 1], padding="VALID"), "evenly divisible by filter depth"),
])
def test_bad_attributes_are_clear_errors_on_npu(op, inputs, attrs, message):
    with tf.device("/device:NPU:0"), pytest.raises((tf.errors.InvalidArgumentError,
                                                    tf.errors.InternalError, ValueError)) as e:
        getattr(tf.raw_ops, op)(**inputs, **attrs)
    assert message in str(e.value)
