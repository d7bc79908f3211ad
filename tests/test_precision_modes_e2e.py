"""Every precision_mode / precision_mode_v2 value through the real stack (Grappler, partition,
compile, C++ kernels): a MatMul whose result (5.76e6) exceeds float16's range shows which dtype
the mode ran it in, and keep_dtype_scope pins it to float32 in every mode."""
import npu_device  # noqa: I001  (loads the NPU plugin before TensorFlow creates devices)

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from npu_device import precision

X = np.full((4, 64), 300.0, np.float32)      # 300 is exact in float16 and bfloat16
W = np.full((64, 4), 300.0, np.float32)
EXACT = 64 * 300.0 * 300.0                   # 5.76e6
FP16 = 65504.0                               # saturated float16 store
BF16 = float(np.float32(EXACT).astype(ml_dtypes.bfloat16))
MODES = [("precision_mode", "must_keep_origin_dtype", EXACT),
         ("precision_mode_v2", "origin", EXACT),
         ("precision_mode", "force_fp32", EXACT),  # fp16 operands (exact here), fp32 result
         ("precision_mode", "cube_fp16in_fp32out", EXACT),
         ("precision_mode_v2", "cube_fp16in_fp32out", EXACT),
         ("precision_mode", "allow_fp32_to_fp16", FP16), ("precision_mode", "force_fp16", FP16),
         ("precision_mode_v2", "fp16", FP16), ("precision_mode", "allow_mix_precision", FP16),
         ("precision_mode", "allow_mix_precision_fp16", FP16),
         ("precision_mode_v2", "mixed_float16", FP16),
         ("precision_mode", "allow_fp32_to_bf16", BF16),
         ("precision_mode", "allow_mix_precision_bf16", BF16),
         ("precision_mode_v2", "mixed_bfloat16", BF16)]


@pytest.fixture(autouse=True)
def restore():
    yield
    npu_device.set_npu_config(precision_mode=None, precision_mode_v2=None)
    precision.set_overflow_mode("saturation")


@pytest.mark.parametrize("key,mode,want", MODES, ids=[f"{k}={m}" for k, m, _ in MODES])
def test_mode_decides_the_matmul_dtype(key, mode, want):
    npu_device.set_npu_config(**{"precision_mode": None, "precision_mode_v2": None, key: mode})

    @tf.function
    def plain(x, w):
        return tf.matmul(x, w)

    @tf.function
    def kept(x, w):
        with precision.keep_dtype_scope():
            return tf.matmul(x, w)

    got = plain(X, W)
    assert "NPU" in got.device and got.dtype == tf.float32
    np.testing.assert_array_equal(got.numpy(), np.full((4, 4), want, np.float32))
    np.testing.assert_array_equal(kept(X, W).numpy(), np.full((4, 4), EXACT, np.float32))


def test_inf_nan_mode_overflows_to_inf():
    precision.set_overflow_mode("inf_nan")
    npu_device.set_npu_config(precision_mode="force_fp16")
    got = tf.function(lambda x, w: tf.matmul(x, w))(X, W).numpy()
    assert np.all(np.isposinf(got))
