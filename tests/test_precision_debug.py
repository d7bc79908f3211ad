"""Precision debugging: compare() runs a graph in a mixed mode and in float32, ranks ops by the
error they add and suggests the modify_mixlist entry that repairs the worst."""
import numpy as np
import pytest
import tensorflow as tf

from graph_engine.ops.errors import CompileError
from graph_engine.compiler.precision_compare import compare

R = np.random.default_rng(0)


def overflowing(x, w1, w2):
    # x @ w1 exceeds float16's range (65504): the white-listed MatMul saturates in fp16
    h = tf.nn.relu(tf.matmul(x, w1)) * 1e-3
    return [tf.tanh(tf.matmul(h, w2))]


ARGS = [(R.standard_normal((8, 64)) * 100).astype(np.float32),
        (R.standard_normal((64, 32)) * 100).astype(np.float32),
        (R.standard_normal((32, 4)) * 0.01).astype(np.float32)]


def test_ranks_the_op_that_adds_error_and_fixes_it():
    report = compare(overflowing, ARGS, precision="allow_mix_precision_fp16", top=1)
    worst = report.ops[0]
    assert (worst.node, worst.op, worst.dtype) == ("MatMul", "MatMul", "float16")
    # its error against numpy float32, recomputed independently
    want = ARGS[0] @ ARGS[1]
    got = np.clip(ARGS[0].astype(np.float16).astype(np.float32)
                  @ ARGS[1].astype(np.float16).astype(np.float32), -65504, 65504)
    assert worst.error == pytest.approx(np.abs(got - want).max() / np.abs(want).max(), rel=1e-3)
    assert report.output_error > 0.05
    assert report.suggestion == {"black-list": {"to-add": ["MatMul"]}}
    assert report.fixed_error < 1e-5
    text = str(report)
    assert 'modify_mixlist={"black-list": {"to-add": ["MatMul"]}}' in text


def test_float32_modes_report_no_error():
    report = compare(overflowing, ARGS, precision="must_keep_origin_dtype")
    assert report.output_error == 0 and report.suggestion is None
    assert all(e.error == 0 for e in report.ops)


def test_bad_requests_are_named():
    with pytest.raises(ValueError, match="overflow_mode 'wrap' is not allowed; allowed: "):
        compare(overflowing, ARGS, overflow_mode="wrap")
    # an Identity alone forms no cluster (it computes nothing)
    with pytest.raises(CompileError, match="forms one NPU cluster; it forms"):
        compare(lambda x: [tf.raw_ops.Identity(input=x)], [np.ones((2, 2), np.float32)])
