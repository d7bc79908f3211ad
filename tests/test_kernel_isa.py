"""The runtime's GEMM has an AVX-512 and an AVX2 (the build's baseline) block product; a machine
runs the best it has. Both are checked here on every machine: each case runs in a subprocess
once as chosen ('auto') and once with NPU_KERNEL_ISA=avx2, so an AVX-512 CI machine also tests
the path AVX2-only machines take (on an AVX2-only machine both runs take that path).

The cases reach every Gemm caller (MatMul with each transpose, BatchMatMul, Einsum, Conv2D and
its backprops, Conv3D's accumulating products, the NC1HWC0 convolution of a compiled graph) at
sizes around the 16-wide register tiles, and compare with TF on CPU (forms plain Eigen computes).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import json, sys
import npu_device
import numpy as np
import tensorflow as tf
from npu_device import runtime

R = np.random.default_rng(0)
def f32(*s): return R.standard_normal(s).astype(np.float32)

def both(fn, *args):
    with tf.device("/CPU:0"):
        want = fn(*args)
    with tf.device("/NPU:0"):
        got = fn(*args)
    want, got = np.asarray(want), np.asarray(got)
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    return float(np.abs(got - want).max(initial=0)) / scale

errors = {}
# A B^T with few rows of A and k >= 128 runs as dot products (gemm.cc UseDot): 15x17x133,
# 5x6x260 and 33x47x1000 there, with tiles and the contraction cut short. A B with k >= 128 and
# several channel groups copies each group's rows of B into a panel first (conv_direct_impl.h
# Group): 40x64x130 (groups of 32) and 21x48x150 (of 16), with strips cut short
for m, n, k in ((1, 1, 1), (15, 17, 33), (16, 16, 16), (47, 130, 70), (200, 3, 129),
                (15, 17, 133), (5, 6, 260), (33, 47, 1000), (40, 64, 130), (21, 48, 150)):
    for ta in (False, True):
        for tb in (False, True):
            a = f32(k, m) if ta else f32(m, k)
            b = f32(n, k) if tb else f32(k, n)
            errors[f"matmul {m}x{n}x{k} ta={ta} tb={tb}"] = both(
                lambda a, b: tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb), a, b)
errors["batch_matmul"] = both(tf.linalg.matmul, f32(3, 19, 40), f32(3, 40, 21))
errors["einsum"] = both(lambda a, b: tf.einsum("bhqd,bhkd->bhqk", a, b), f32(2, 3, 17, 32), f32(2, 3, 18, 32))

x, w = f32(2, 11, 13, 5), f32(3, 3, 5, 18)
conv = lambda x, w: tf.nn.conv2d(x, w, strides=2, padding="SAME")
errors["conv2d"] = both(conv, x, w)
dy = f32(*conv(x, w).shape)
errors["conv2d_backprop_input"] = both(
    lambda w, dy: tf.raw_ops.Conv2DBackpropInput(input_sizes=list(x.shape), filter=w, out_backprop=dy,
                                                 strides=[1, 2, 2, 1], padding="SAME"), w, dy)
errors["conv2d_backprop_filter"] = both(
    lambda x, dy: tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=list(w.shape), out_backprop=dy,
                                                  strides=[1, 2, 2, 1], padding="SAME"), x, dy)
# 144 output pixels: the direct convolution (conv.cc, from 128), its panel rows read in 3 runs
errors["conv2d, 144-long contraction"] = both(
    lambda x, w: tf.nn.conv2d(x, w, strides=1, padding="SAME"), f32(1, 12, 12, 16), f32(3, 3, 16, 64))
errors["conv3d"] = both(lambda x, w: tf.nn.conv3d(x, w, strides=[1] * 5, padding="SAME"),
                        f32(1, 5, 6, 7, 3), f32(2, 3, 2, 3, 17))

@tf.function
def graph_conv(x, w):          # compiled: the layout passes give it an NC1HWC0 convolution
    return tf.nn.relu(tf.nn.conv2d(x, w, strides=1, padding="SAME") + 1.0)
errors["graph conv (NC1HWC0)"] = both(graph_conv, f32(2, 9, 9, 20), f32(3, 3, 20, 33))

# A constant B of a compiled graph (a frozen weight) is packed once into the packed kernel's
# panels and kept (matmul.cc PackedB, gemm_packed_impl.h): rows and columns that end in partial
# tiles and panels, threads splitting rows (37x70) and panels (37x130), B^T's storage, a weight
# shared by a batch, and a fused bias + ReLU that runs the product in blocks of rows. Each runs
# twice: the second run reads the kept panels.
def constant_b(w, **kw):
    return tf.function(lambda a: tf.nn.relu(tf.linalg.matmul(a, tf.constant(w), **kw) + 0.5))
for name, fn, a in (("37x70x300", constant_b(f32(300, 70)), f32(37, 300)),
                    ("37x130x300 B^T", constant_b(f32(130, 300), transpose_b=True), f32(37, 300)),
                    ("150x33x520", constant_b(f32(520, 33)), f32(150, 520)),
                    ("batch 3x19x260 @ 260x45", constant_b(f32(260, 45)), f32(3, 19, 260))):
    for run in (1, 2):
        errors[f"constant B {name}, run {run}"] = both(fn, a)

print(json.dumps({"isa": runtime.kernel_isa(), "errors": errors}))
"""


def _run(isa):
    env = {**os.environ, "NPU_KERNEL_ISA": isa, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("isa", ["auto", "avx2"])
def test_gemm_paths_match_tensorflow(isa):
    result = _run(isa)
    if isa == "avx2":
        assert result["isa"] == "avx2"
    else:
        assert result["isa"] in ("avx2", "avx512")
    bad = {case: err for case, err in result["errors"].items() if not err <= 2e-5}
    assert not bad, f"{result['isa']} GEMM differs from TF on CPU (relative max error): {bad}"
