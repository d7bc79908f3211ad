"""TensorList ops of bool and complex64 elements (plugin kernels, tf_plugin_cc/list_ops.cc; TF's
device-default kernels have the other element types). A ListOf input is a list made from its
value's rows on the device the op runs on; a list the op returns is compared stacked. Ops that
take a `tensor` are varied over both element types by the sweep; ops that read only a list name
their element_dtype, so they have a case per type."""
import numpy as np
import tensorflow as tf

from npu_device.tools.op_cases import ListOf, _f32

_ROWS = _f32(5, 3)
_VALUES = {"bool": _ROWS > 0, "complex64": (_ROWS + 1j * _ROWS[::-1]).astype(np.complex64)}
_SHAPE = np.array([3], np.int32)
_ANY = np.array(-1, np.int32)                 # element shape: whatever the elements have


def _reading(name, v):
    """Cases of the ops that read a list of v's rows."""
    dt = dict(element_dtype=tf.as_dtype(v.dtype))
    return [
        ("TensorListGetItem", {"input_handle": ListOf(v), "index": np.int32(2), "element_shape": _SHAPE}, dt),
        ("TensorListStack", {"input_handle": ListOf(v), "element_shape": _SHAPE}, dt),
        ("TensorListGather", {"input_handle": ListOf(v), "indices": np.array([4, 0, 4], np.int32),
                              "element_shape": _ANY}, dt),
        ("TensorListPopBack", {"input_handle": ListOf(v), "element_shape": _SHAPE}, dt),
        ("TensorListConcat", {"input_handle": ListOf(v)}, dict(dt, element_shape=[3])),
        ("TensorListConcatV2", {"input_handle": ListOf(v), "element_shape": _SHAPE,
                                "leading_dims": np.zeros([0], np.int64)}, dt),
    ]


CASES = [
    *[case for name, v in _VALUES.items() for case in _reading(name, v)],
    ("TensorListFromTensor", {"tensor": _ROWS, "element_shape": _SHAPE}, {}),
    ("TensorListSplit", {"tensor": _ROWS, "element_shape": np.array([-1, 3], np.int32),
                         "lengths": np.ones(5, np.int64)}, {}),   # stacked to compare: one shape
    ("TensorListScatter", {"tensor": _ROWS[:2], "indices": np.array([3, 1], np.int32),
                           "element_shape": _SHAPE}, {}),
    ("TensorListScatterV2", {"tensor": _ROWS[:2], "indices": np.array([3, 1], np.int32),
                             "element_shape": _SHAPE, "num_elements": np.int32(5)}, {}),
    ("TensorListScatterIntoExistingList", {"input_handle": ListOf(_ROWS), "tensor": _ROWS[:2],
                                           "indices": np.array([4, 0], np.int32)}, {}),
]
