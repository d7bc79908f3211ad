"""Einsum's batched-GEMM path: which equations take it, and its numerics against TF on the CPU.

The runtime counts the Einsum kernels it builds on the GEMM path (npuEinsumGemmKernelsBuilt,
read through ctypes); loading a one-kernel model tells which path that equation took.
"""
import ctypes

import numpy as np
import pytest

from tests.test_kernels_harness import C, FLOAT_TYPES, assert_float_close, random, run1, tf_cpu


def _gemm_counter():
    from npu_device import precision     # the loaded runtime, by soname (in-tree or installed)
    fn = precision._runtime().npuEinsumGemmKernelsBuilt
    fn.restype = ctypes.c_int64
    return fn


gemm_kernels_built = _gemm_counter()

# Keras MultiHeadAttention (projections, scores, combination, output) and the equations of
# their gradients as TF's Einsum gradient writes them, with BERT-like small shapes.
ATTENTION = [
    ("abc,cde->abde", (2, 5, 8), (8, 2, 4)),
    ("abde,cde->abc", (2, 5, 2, 4), (8, 2, 4)),
    ("abde,abc->cde", (2, 5, 2, 4), (2, 5, 8)),
    ("aecd,abcd->acbe", (2, 6, 2, 4), (2, 5, 2, 4)),
    ("acbe,abcd->aecd", (2, 2, 5, 6), (2, 5, 2, 4)),
    ("acbe,aecd->abcd", (2, 2, 5, 6), (2, 6, 2, 4)),
    ("abcd,aecd->acbe", (2, 5, 2, 4), (2, 6, 2, 4)),
    ("abcd,acbe->aecd", (2, 5, 2, 4), (2, 2, 5, 6)),
    ("abcd,cde->abe", (2, 5, 2, 4), (2, 4, 8)),
    ("abe,cde->abcd", (2, 5, 8), (2, 4, 8)),
    ("abe,abcd->cde", (2, 5, 8), (2, 5, 2, 4)),
]

# Other batched products: transposed operands, a swapped output, no contraction, no batch,
# an ellipsis, an empty contraction and an empty batch.
OTHER_GEMM = [
    ("ij,jk->ik", (7, 5), (5, 3)),
    ("ji,kj->ik", (5, 7), (3, 5)),
    ("ij,jk->ki", (7, 5), (5, 3)),
    ("bij,bkj->bik", (3, 4, 5), (3, 6, 5)),
    ("ib,jb->bji", (4, 3), (5, 3)),
    ("i,j->ij", (4,), (5,)),
    ("i,i->", (6,), (6,)),
    ("ab,ab->ab", (3, 4), (3, 4)),
    ("...ij,...jk->...ik", (2, 3, 4, 5), (2, 3, 5, 2)),
    ("ij,jk->ik", (3, 0), (0, 4)),
    ("bij,bjk->bik", (0, 2, 3), (0, 3, 4)),
]

# The general path: a sum over one operand's label, a repeated label, a broadcast size-1 dim.
GENERAL = [
    ("ij,jk->i", (3, 4), (4, 5)),
    ("ii,ij->j", (4, 4), (4, 3)),
    ("...ij,...jk->...ik", (1, 3, 4), (2, 4, 5)),
]


def _run(equation, sa, sb, dtype, seed=0):
    a, b = random(sa, dtype, seed=seed), random(sb, dtype, seed=seed + 1)
    expected = tf_cpu("Einsum", inputs=[a.astype(np.float32), b.astype(np.float32)], equation=equation)
    before = gemm_kernels_built()
    actual = run1("Einsum", [a, b], dtype, expected.shape, equation=equation)
    return actual, expected, gemm_kernels_built() - before


@pytest.mark.parametrize("equation,sa,sb", ATTENTION + OTHER_GEMM)
def test_batched_products_take_the_gemm_path_and_match_tf(equation, sa, sb):
    actual, expected, gemm = _run(equation, sa, sb, np.float32)
    assert gemm == 1, f"{equation} did not take the GEMM path"
    assert_float_close(actual, expected, np.float32)


@pytest.mark.parametrize("equation,sa,sb", GENERAL)
def test_other_equations_take_the_general_path_and_match_tf(equation, sa, sb):
    actual, expected, gemm = _run(equation, sa, sb, np.float32)
    assert gemm == 0, f"{equation} took the GEMM path"
    assert_float_close(actual, expected, np.float32)


@pytest.mark.parametrize("dtype", FLOAT_TYPES[1:])
@pytest.mark.parametrize("equation,sa,sb", [ATTENTION[3], ATTENTION[5], ATTENTION[0]])
def test_half_storage_rounds_once(equation, sa, sb, dtype):
    actual, expected, gemm = _run(equation, sa, sb, dtype)
    assert gemm == 1
    assert actual.dtype == np.dtype(dtype)
    assert_float_close(actual, expected, dtype)


def test_attention_sized_products_match_tf():
    """BERT-base-like shapes: enough products to split over threads, matrices above Gemm's
    block sizes."""
    for equation, sa, sb in [("aecd,abcd->acbe", (2, 64, 4, 32), (2, 64, 4, 32)),
                             ("acbe,aecd->abcd", (2, 4, 64, 64), (2, 64, 4, 32)),
                             ("abc,cde->abde", (2, 64, 128), (128, 4, 32))]:
        actual, expected, gemm = _run(equation, sa, sb, np.float32, seed=3)
        assert gemm == 1
        assert_float_close(actual, expected, np.float32)
