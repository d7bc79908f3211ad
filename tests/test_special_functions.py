"""Dawson's integral, the Fresnel integrals and Spence's function (runtime/kernels/special.cc,
namespace integrals: our own double-precision evaluations, rounded once to float32) against
TensorFlow on the CPU and scipy, over a dense grid and at the special values."""
import npu_device  # noqa: F401,I001  (loads the NPU plugin before TensorFlow creates devices)

import numpy as np
import pytest
import scipy.special as sp
import tensorflow as tf

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
OPS = {"Dawsn": sp.dawsn, "FresnelCos": lambda x: sp.fresnel(x)[1],
       "FresnelSin": lambda x: sp.fresnel(x)[0], "Spence": sp.spence}

_POS = np.geomspace(1e-6, 1e4, 40000)
GRID = np.concatenate([_POS, -_POS, np.linspace(-40, 40, 20001)]).astype(np.float32)   # 1e5 points
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-6, 0.5, 1.0, -1.0, 1.5,
                    2.0, 3.25, 6.25, 36974.0, 36975.0, 65504.0, 3e9, -3e9, 1e30, 3e38, -3e38],
                   np.float32)


def _run(device, op, x):
    with tf.device(device):
        return getattr(tf.raw_ops, op)(x=tf.constant(x)).numpy()


def _ulps(got, want):
    """|got - want| in units of float32 spacing at want (finite, nonzero references only)."""
    keep = np.isfinite(want) & (want != 0)
    return np.abs(got[keep].astype(np.float64) - want[keep]) / np.spacing(np.abs(want[keep]))


@pytest.fixture(autouse=True)
def npu_only(no_soft_placement):
    """Every test here: its NPU ops must have NPU kernels (conftest.no_soft_placement)."""


@pytest.mark.parametrize("op", sorted(OPS))
def test_grid_against_float64(op):
    """Computed in double and rounded once: within 1 ulp of TF's float64 kernel and of scipy,
    each rounded to float32 (the NaNs, Spence's negative domain, in the same places)."""
    got = _run(NPU, op, GRID)
    for want in (_run(CPU, op, GRID.astype(np.float64)).astype(np.float32),
                 OPS[op](GRID.astype(np.float64)).astype(np.float32)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert _ulps(got, want).max() <= 1.0


@pytest.mark.parametrize("op", sorted(OPS))
def test_grid_against_float32(op):
    """TF's float32 kernels (rational approximations evaluated in float32, up to 13 ulp from the
    float64 values on this grid) are within 16 ulp, 2e-6 relative, of ours; beyond |x| = 10 their
    Fresnel phase pi/2 x^2, computed in float32, is off by up to ~x^2 2^-24 radians: there the
    sweep's rtol 1e-4, met up to |x| = 1000."""
    got, want = _run(NPU, op, GRID), _run(CPU, op, GRID)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fresnel = op.startswith("Fresnel")
    near = np.abs(GRID) <= (10 if fresnel else np.inf)
    np.testing.assert_allclose(got[near], want[near], rtol=2e-6, atol=1e-12)
    assert _ulps(got[near], want[near]).max() <= 16
    if fresnel:
        far = (np.abs(GRID) > 10) & (np.abs(GRID) <= 1000)
        np.testing.assert_allclose(got[far], want[far], rtol=1e-4)


@pytest.mark.parametrize("op", sorted(OPS))
def test_special_values(op):
    """NaN, ±inf, ±0, the largest floats and the intervals' edges as TF's float32 kernel: NaN in,
    NaN out; Dawsn(±inf) = 0; Fresnel(±inf) = ±1/2; Spence NaN for x < 0, for +inf and (as TF's
    float32 kernel, whose 1/x flushes to zero there) past 2^126. The differences left are TF's
    float32 inaccuracies: Dawsn odd here for x <= -1e9 (TF's +0.5/|x| there), Fresnel within
    1/(pi x) of ±1/2 here where TF's returns ±1/2 (past 36974; its phase is off just below)."""
    got, want = _run(NPU, op, SPECIAL), _run(CPU, op, SPECIAL)
    fresnel_tail = op.startswith("Fresnel") & (np.abs(SPECIAL) >= 36974)
    np.testing.assert_allclose(got[~fresnel_tail], want[~fresnel_tail], rtol=1e-6, atol=1e-9,
                               equal_nan=True)
    assert np.all(np.abs(got - want)[fresnel_tail] <= 2 / (np.pi * np.abs(SPECIAL[fresnel_tail])))
    ref = OPS[op](SPECIAL.astype(np.float64)).astype(np.float32)
    if op == "Spence":           # scipy's -inf-bound value where TF's float32 kernel has NaN
        ref[SPECIAL > 2.0 ** 126] = np.nan
        ref[SPECIAL == np.inf] = np.nan
    # atol: the NPU flushes denormal results to zero (Dawsn(3e38) ~ 1.7e-39), as TF's vector loops
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=np.finfo(np.float32).tiny, equal_nan=True)
