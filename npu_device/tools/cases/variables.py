"""The plugin's variable kernels (tf_plugin_cc/variable_ops.cc, resource_ops.cc, random_ops.cc):
dense writes, gathers and scatters on resource variables that live on the NPU, and a
tf.random.Generator's read-and-skip of its state."""
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
]
