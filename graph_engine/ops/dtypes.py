"""TF DataType enum values and their numpy storage types (bfloat16 from ml_dtypes)."""
import ml_dtypes
import numpy as np

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8 = 1, 2, 3, 4, 5, 6
DT_INT64, DT_BOOL, DT_BFLOAT16, DT_HALF = 9, 10, 14, 19
DT_UINT64 = 23                 # the key/counter of TF's stateless random ops
DT_COMPLEX64 = 8               # FFTs and complex math (graph_engine/ops/fft.py): two float32

_NUMPY = {
    DT_FLOAT: np.float32, DT_DOUBLE: np.float64, DT_INT32: np.int32, DT_UINT8: np.uint8,
    DT_INT16: np.int16, DT_INT8: np.int8, DT_INT64: np.int64, DT_BOOL: np.bool_,
    DT_BFLOAT16: ml_dtypes.bfloat16, DT_HALF: np.float16, DT_UINT64: np.uint64,
    DT_COMPLEX64: np.complex64,
}
_NAMES = {DT_FLOAT: "float32", DT_DOUBLE: "float64", DT_INT32: "int32", DT_UINT8: "uint8",
          DT_INT16: "int16", DT_INT8: "int8", DT_INT64: "int64", DT_BOOL: "bool",
          DT_BFLOAT16: "bfloat16", DT_HALF: "float16", DT_UINT64: "uint64",
          DT_COMPLEX64: "complex64"}
FLOATING = (DT_FLOAT, DT_HALF, DT_BFLOAT16, DT_DOUBLE)


def numpy_dtype(dt: int):
    try:
        return np.dtype(_NUMPY[dt])
    except KeyError:
        raise ValueError(f"DataType {dt} is not supported by the NPU; supported: "
                         f"{sorted(_NAMES.values())}") from None


def from_numpy(dtype) -> int:
    dtype = np.dtype(dtype)
    for dt, np_type in _NUMPY.items():
        if np.dtype(np_type) == dtype:
            return dt
    raise ValueError(f"numpy dtype {dtype} has no NPU DataType")


def name(dt: int) -> str:
    return _NAMES.get(dt, f"DataType({dt})")


def itemsize(dt: int) -> int:
    return numpy_dtype(dt).itemsize
