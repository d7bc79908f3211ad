"""The plugin's variable kernels (tf_plugin_cc/variable_ops.cc, resource_ops.cc, random_ops.cc):
dense writes, gathers, scatters, slice assignments (v[1:3, ::2].assign(...)) and count_up_to on
resource variables that live on the NPU, and a tf.random.Generator's read-and-skip of its state.
Cases without a type attr run in every dtype the plugin registers for the op."""
import numpy as np
import tensorflow as tf

from npu_device.tools.op_cases import Var, _f32, _i32

_V = _f32(5, 3)
_IDX = np.array([3, 0, 3], np.int32)          # a repeated index: applied in order
_IDX_ND = np.array([[4, 1], [0, 2], [4, 1]], np.int64)

CASES = [
    ("AssignVariableOp", {"resource": Var(_V), "value": _f32(5, 3)}, {}),
    ("AssignAddVariableOp", {"resource": Var(_V), "value": _f32(5, 3)}, {}),
    ("AssignSubVariableOp", {"resource": Var(_V), "value": _f32(5, 3)}, {}),
    ("AssignAddVariableOp", {"resource": Var(_i32(-9, 9, 4).astype(np.int64)),
                             "value": _i32(-9, 9, 4).astype(np.int64)}, {}),
    *[(op, {"resource": Var(value), "indices": idx}, {"dtype": tf.as_dtype(value.dtype)})
      for op, idx in (("ResourceGather", _IDX), ("ResourceGatherNd", _IDX_ND))
      for value in (_V, _V.astype(np.float16), _i32(-9, 9, 5, 3).astype(np.int64))],
    *[(f"ResourceScatter{kind}", {"resource": Var(_f32(5, 3, lo=0.5, hi=2.0)), "indices": _IDX,
                                  "updates": _f32(3, 3, lo=0.5, hi=2.0)}, {})
      for kind in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Update")],
    *[(f"ResourceScatterNd{kind}", {"ref": Var(_V), "indices": _IDX_ND, "updates": _f32(3)}, {})
      for kind in ("Add", "Sub", "Update", "Min", "Max")],
    # a Philox state whose counter's low word carries into its high word
    ("RngReadAndSkip", {"resource": Var(np.array([-1, 7, 9], np.int64)),
                        "alg": np.array(1, np.int32), "delta": np.array(10, np.uint64)}, {}),
    # v[1:3, ::2] = value; v[::-1, 3:0:-2]; v[1, ..., newaxis, 1:3] (shrink, ellipsis, new
    # axis); a scalar broadcast into v[1:3]; an empty slice v[2:2]
    *[("ResourceStridedSliceAssign", {"ref": Var(ref), "begin": np.array(b, np.int32),
                                      "end": np.array(e, np.int32),
                                      "strides": np.array(s, np.int32), "value": value}, masks)
      for ref, b, e, s, value, masks in (
          (_f32(4, 5), [1, 0], [3, 0], [1, 2], _f32(2, 3), {"end_mask": 2}),
          (_f32(4, 5), [0, 3], [0, 0], [-1, -2], _f32(4, 2), {"begin_mask": 1, "end_mask": 1}),
          (_f32(2, 3, 4), [1, 0, 0, 1], [2, 0, 0, 3], [1, 1, 1, 1], _f32(3, 1, 2),
           {"shrink_axis_mask": 1, "ellipsis_mask": 2, "new_axis_mask": 4}),
          (_f32(4, 5), [1], [3], [1], np.float32(1.5), {}),
          (_f32(4, 5), [2], [2], [1], _f32(0, 5), {}))],
    ("ResourceCountUpTo", {"resource": Var(np.array(3, np.int64))},
     {"limit": 10, "T": tf.int64}),
]
