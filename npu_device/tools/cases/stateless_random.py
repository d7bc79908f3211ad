"""Cases of the integer and categorical stateless random ops (graph_engine/ops/random.py): every
integer dtype, ranges across zero and the whole int range (the unsigned range and sum), raw
bits, odd element counts (half a Philox call of 64-bit values), the seeded V1 forms, and
categorical draws with non-finite logits, one class, zero samples and rows cut into several of
TF's thread blocks. The float ops' cases are in op_cases.py."""
import numpy as np
import tensorflow as tf

_R = np.random.default_rng(16)     # its own generator: the other modules' values stay put


def _f32(*shape, lo=-2.0, hi=2.0):
    return _R.uniform(lo, hi, shape).astype(np.float32)

_KEY = np.array([0x5DEECE66D1234567], np.uint64)
_COUNTER = np.array([0xFFFFFFFFFFFFFFFF, 0x00000000FFFFFFFF], np.uint64)   # both words carry
_SEED = np.array([-4, 91], np.int32)
_I32 = np.iinfo(np.int32)


def _shape(*dims):
    return np.array(dims, np.int32)


def _logits(rows, classes):
    x = _f32(rows, classes, lo=-3.0, hi=3.0)
    x[0, -1] = -np.inf                     # never drawn (with one class: no finite logit)
    if rows > 1:
        x[1, :] = -np.inf                  # no finite logit: every draw is `classes`
    if rows > 2:
        x[2, 0] = np.nan                   # left out of the distribution
    return x


CASES = [
    # the sweep varies dtype (int32, int64) through minval/maxval
    *[("StatelessRandomUniformIntV2", {"shape": _shape(*shape), "key": _KEY, "counter": _COUNTER,
                                       "alg": np.int32(alg), "minval": np.int32(lo),
                                       "maxval": np.int32(hi)}, {})
      for shape, alg, lo, hi in (((3, 7), 1, -5, 12), ((9,), 3, 0, 1), ((2, 3), 1, 1000, 1 << 30))],
    # almost all of int64 (a range past 2**63); as int32 (the low words) it is [0, 5)
    ("StatelessRandomUniformIntV2", {"shape": _shape(5), "key": _KEY, "counter": _COUNTER,
                                     "alg": np.int32(1), "minval": np.int64(-2**63),
                                     "maxval": np.int64(2**63 - 2**32 + 5)}, {}),
    ("StatelessRandomUniformIntV2", {"shape": _shape(3), "key": _KEY, "counter": _COUNTER,
                                     "alg": np.int32(1), "minval": np.int32(_I32.min),
                                     "maxval": np.int32(_I32.max)}, {}),
    *[("StatelessRandomUniformInt", {"shape": _shape(*shape), "seed": seed, "minval": np.int32(lo),
                                     "maxval": np.int32(hi)}, {})
      for shape, seed, lo, hi in (((4, 5), _SEED, -100, 100),
                                  ((7,), np.array([2**40, -1], np.int64), 3, 4))],
    *[("StatelessRandomUniformFullIntV2", {"shape": _shape(3, 3), "key": _KEY, "counter": _COUNTER,
                                           "alg": np.int32(3)}, {"dtype": dtype})
      for dtype in (tf.int32, tf.int64, tf.uint64)],
    *[("StatelessRandomUniformFullInt", {"shape": _shape(5), "seed": _SEED}, {"dtype": dtype})
      for dtype in (tf.int32, tf.int64, tf.uint64)],
    # T is not varied by the sweep (two type attrs: T and Tseed): each float type has cases
    *[("StatelessMultinomial", {"logits": _logits(4, 6).astype(t), "num_samples": np.int32(9),
                                "seed": np.array([7, -3], np.int64)}, {})
      for t in (np.float32, np.float16, tf.bfloat16.as_numpy_dtype)],
    ("StatelessMultinomial", {"logits": _logits(3, 1), "num_samples": np.int32(5), "seed": _SEED},
     {"output_dtype": tf.int32}),
    ("StatelessMultinomial", {"logits": _f32(2, 4), "num_samples": np.int32(0), "seed": _SEED}, {}),
    # 64 rows of 1000 classes: TF's CPU cuts the rows into blocks on any machine with 2+ threads
    ("StatelessMultinomial", {"logits": _f32(64, 1000, lo=-1.0, hi=1.0).astype(np.float16),
                              "num_samples": np.int32(100), "seed": np.array([123, 456], np.int64)},
     {"output_dtype": tf.int32}),
]
