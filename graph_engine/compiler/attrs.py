"""tensorflow.AttrValue <-> plain Python values.

Nodes keep TF's AttrValue protos (lossless export); ops and passes read them as Python values:
int, float, bool, str, DataType enum int, shape -> list of ints (-1 unknown, None unknown rank),
tensor -> numpy array, lists of those.
"""
import math

import numpy as np
from tensorflow.core.framework import attr_value_pb2, tensor_pb2, tensor_shape_pb2

from graph_engine.ops import dtypes as dt


def shape_to_list(shape_proto):
    if shape_proto.unknown_rank:
        return None
    return [d.size for d in shape_proto.dim]


def shape_proto(dims):
    if dims is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(d)) for d in dims])


# The TensorProto value fields of the dtypes whose constants graphs are full of (scalars, shape
# vectors): tensor_to_numpy reads these itself.
_VALUE_FIELDS = {dt.DT_FLOAT: "float_val", dt.DT_INT32: "int_val", dt.DT_INT64: "int64_val",
                 dt.DT_BOOL: "bool_val"}
_numpy_dtypes = {}         # DataType -> the numpy dtype TF's MakeNdarray gives it


def tensor_to_numpy(t: tensor_pb2.TensorProto):
    """TF's MakeNdarray, with its two common cases (raw bytes; the value fields of the dtypes
    above) done here: it costs several microseconds per call, and every Const asks."""
    from tensorflow.python.framework import tensor_util   # lazy: only for constant tensors
    field = _VALUE_FIELDS.get(t.dtype)
    if field is None and not t.tensor_content:
        return tensor_util.MakeNdarray(t)
    dtype = _numpy_dtypes.get(t.dtype)
    if dtype is None:
        from tensorflow.python.framework import dtypes
        dtype = _numpy_dtypes[t.dtype] = dtypes.as_dtype(t.dtype).as_numpy_dtype
    shape = [d.size for d in t.tensor_shape.dim]
    if t.tensor_content:
        return np.frombuffer(t.tensor_content, dtype=dtype).copy().reshape(shape)
    values = np.fromiter(getattr(t, field), dtype=dtype)
    if values.size == 0:
        return np.zeros(shape, dtype)
    n = math.prod(shape)
    if values.size != n:                   # the last value repeats (as MakeNdarray pads)
        values = np.pad(values, (0, n - values.size), "edge")
    return values.reshape(shape)


def numpy_to_tensor(array, dtype=None):
    """A TensorProto of `array` stored as `dtype` (a TF DataType enum; default from numpy)."""
    from tensorflow.python.framework import tensor_util
    dtype = dtype if dtype is not None else dt.from_numpy(array.dtype)
    array = np.asarray(array, dt.numpy_dtype(dtype))
    if dtype in (dt.DT_BFLOAT16, dt.DT_HALF):
        # make_tensor_proto refuses ml_dtypes' bfloat16; raw bytes are exact for both.
        proto = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape_proto(array.shape),
                                       tensor_content=np.ascontiguousarray(array).tobytes())
        return proto
    return tensor_util.make_tensor_proto(array, dtype=dtype)


def to_python(av: attr_value_pb2.AttrValue):
    kind = av.WhichOneof("value")
    if kind == "list":
        lst = av.list
        for field, conv in (("i", int), ("f", float), ("b", bool), ("type", int),
                            ("s", bytes.decode)):
            if getattr(lst, field):
                return [conv(x) for x in getattr(lst, field)]
        if lst.shape:
            return [shape_to_list(s) for s in lst.shape]
        if lst.tensor:
            return [tensor_to_numpy(t) for t in lst.tensor]
        return []
    if kind == "s":
        try:
            return av.s.decode()
        except UnicodeDecodeError:
            return av.s                  # binary payloads (serialized protos) stay bytes
    if kind == "shape":
        return shape_to_list(av.shape)
    if kind == "tensor":
        return tensor_to_numpy(av.tensor)
    if kind in ("i", "f", "b", "type"):
        return getattr(av, kind)
    return av                            # func, placeholder: opaque


def make(value=None, *, type=None, types=None, shape=None, shapes=None, tensor=None):
    """An AttrValue from a Python value; keyword forms for the ambiguous kinds."""
    av = attr_value_pb2.AttrValue()
    if type is not None:
        av.type = type
    elif types is not None:
        av.list.type.extend(types)
        av.list.SetInParent()
    elif shape is not None:
        av.shape.CopyFrom(shape_proto(shape))
    elif shapes is not None:
        av.list.shape.extend([shape_proto(s) for s in shapes])
        av.list.SetInParent()
    elif tensor is not None:
        av.tensor.CopyFrom(tensor if isinstance(tensor, tensor_pb2.TensorProto)
                           else numpy_to_tensor(tensor))
    elif isinstance(value, bool):
        av.b = value
    elif isinstance(value, int):
        av.i = value
    elif isinstance(value, float):
        av.f = value
    elif isinstance(value, (str, bytes)):
        av.s = value.encode() if isinstance(value, str) else value
    elif isinstance(value, (list, tuple)):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            av.list.i.extend(value)
        elif all(isinstance(x, float) for x in value):
            av.list.f.extend(value)
        else:
            raise TypeError(f"no AttrValue list for {value!r}")
        av.list.SetInParent()
    else:
        raise TypeError(f"no AttrValue for {value!r}")
    return av
