"""Cast and Bitcast from and to the storage-only dtypes the NPU holds (graph_engine/ops/
elementwise.py): uint8/int8/int16 (images and quantized data on their way to float: wrapping,
truncation, NaN and out-of-range values as TF on x86) and uint64 (tf.random.Generator's draw
count and state: values from 2^63 up, which read as negative through int64)."""
import numpy as np
import tensorflow as tf

_FLOATS = np.array([0.0, 1.5, -1.5, 300.7, -129.2, 7e4, 3e9, np.nan, np.inf, -np.inf], np.float32)
_NARROW = {np.uint8: [0, 1, 127, 128, 255], np.int8: [0, -1, 127, -128, 5],
           np.int16: [0, -1, 32767, -32768, 300]}

CASES = [
    *[("Cast", {"x": np.array(v, t)}, {"DstT": dst}) for t, v in _NARROW.items()
      for dst in (tf.float32, tf.float16, tf.int32, tf.int64, tf.bool)],
    *[("Cast", {"x": x}, {"DstT": dst}) for dst in (tf.uint8, tf.int8, tf.int16)
      for x in (_FLOATS, np.array([0, -1, 300, -2**31, 2**31 - 1], np.int32),
                np.array([0, -1, 70000, -2**63, 2**63 - 1], np.int64), np.array([True, False]))],
    *[("Cast", {"x": x}, {"DstT": dst}) for x, dst in (
        (np.array([0, 7, -3, 2**31 - 1], np.int32), tf.uint64),
        (np.array([0.0, 1.5, -1.5, 3e9, -3e9, 9.3e18, 1.8e19, 1e20, np.nan, -np.inf], np.float32),
         tf.uint64),
        (np.array([0, 5, 2**63 - 1, 2**63, 2**63 + 2**40, 2**64 - 1], np.uint64), tf.float32),
        (np.array([0, 5, 2**63, 2**64 - 1], np.uint64), tf.int64),
        (np.array([0, 1, 2**32 + 5, 2**64 - 1], np.uint64), tf.int32),
        (np.array([0, 200, 2**63 + 5], np.uint64), tf.uint8))],
    ("Bitcast", {"input": np.array([-1, 5, -2**63, 2**62], np.int64)}, {"type": tf.uint64}),
    ("Bitcast", {"input": np.array([2**64 - 1, 3], np.uint64)}, {"type": tf.int64}),
]
