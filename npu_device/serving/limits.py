"""Request limits and strict decoding of request tensors (gRPC TensorProtos, REST JSON values).

Nothing is materialized before it is known to fit: a TensorProto's declared shape times its
dtype size is checked against the limits first, and its values must match the declared shape
exactly (tensor_content: exactly elements x itemsize bytes; a repeated *_val field: exactly one
value, broadcast, or one value per element). Dtypes must equal the signature's. Errors name the
input and the limit (flag) that was exceeded.
"""
import dataclasses
import math
import re

import numpy as np

from npu_device.serving.errors import InvalidArgument, ResourceExhausted


@dataclasses.dataclass(frozen=True)
class Limits:
    max_request_bytes: int = 64 << 20        # REST body, gRPC message, decoded input tensors
    max_request_elements: int = 1 << 24      # elements of all input tensors of one request
    max_json_depth: int = 64                 # nesting of [ and { in a REST body


# What a string element takes besides its bytes, counted in the decoded bytes: TF's tstring (24
# bytes) and the request array's reference to it (8). A 30-byte gRPC request with one string
# broadcast to 15M elements took 2 GB of server memory while its bytes counted 15 MB.
STRING_ELEMENT_BYTES = 32


class Budget:
    """What one request's inputs may still take: elements and decoded bytes."""

    def __init__(self, limits):
        self.limits, self.elements, self.bytes = limits, 0, 0

    def take(self, name, shape, n_elements, n_bytes):
        self.elements += n_elements
        self.bytes += n_bytes
        if self.elements > self.limits.max_request_elements:
            raise ResourceExhausted(
                f"input {name!r} has shape {list(shape)} ({n_elements} elements): the request's "
                f"inputs hold {self.elements} elements, over the limit of "
                f"{self.limits.max_request_elements} (--max_request_elements)")
        if self.bytes > self.limits.max_request_bytes:
            raise ResourceExhausted(
                f"input {name!r} has shape {list(shape)} ({n_bytes} bytes decoded): the "
                f"request's inputs take {self.bytes} bytes, over the limit of "
                f"{self.limits.max_request_bytes} (--max_request_bytes)")


def check_dtype(name, sig_name, got, want):
    """got: numpy dtype of a feed; want: the signature's (object = string)."""
    ok = got.kind in "OSU" if want == object else got == want
    if not ok:
        raise InvalidArgument(f"input {name!r} is {_dtype_text(got)}; signature {sig_name!r} "
                              f"expects {_dtype_text(want)}")


def _dtype_text(dtype):
    return "string" if dtype == object or np.dtype(dtype).kind in "OSU" else np.dtype(dtype).name


def dtype_enum(dtype):
    """TF DataType enum of a TensorSpec dtype (object = string)."""
    import tensorflow as tf
    return (tf.string if dtype == object else tf.as_dtype(dtype)).as_datatype_enum


# ------------------------------------------------------------------ gRPC: TensorProto

_PROTO_FIELDS = None


def _proto_fields():
    """DataType enum -> (numpy dtype, repeated field, values per element)."""
    global _PROTO_FIELDS
    if _PROTO_FIELDS is None:
        import ml_dtypes
        from tensorflow.core.framework import types_pb2 as t
        _PROTO_FIELDS = {
            t.DT_FLOAT: (np.float32, "float_val", 1), t.DT_DOUBLE: (np.float64, "double_val", 1),
            t.DT_HALF: (np.float16, "half_val", 1),
            t.DT_BFLOAT16: (ml_dtypes.bfloat16, "half_val", 1),
            t.DT_INT8: (np.int8, "int_val", 1), t.DT_INT16: (np.int16, "int_val", 1),
            t.DT_INT32: (np.int32, "int_val", 1), t.DT_INT64: (np.int64, "int64_val", 1),
            t.DT_UINT8: (np.uint8, "int_val", 1), t.DT_UINT16: (np.uint16, "int_val", 1),
            t.DT_UINT32: (np.uint32, "uint32_val", 1), t.DT_UINT64: (np.uint64, "uint64_val", 1),
            t.DT_BOOL: (np.bool_, "bool_val", 1),
            t.DT_COMPLEX64: (np.complex64, "scomplex_val", 2),
            t.DT_COMPLEX128: (np.complex128, "dcomplex_val", 2),
            t.DT_STRING: (object, "string_val", 1),
        }
    return _PROTO_FIELDS


def _enum_name(enum):
    from tensorflow.core.framework import types_pb2
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"DataType {enum}"


def tensor_from_proto(name, proto, spec, sig_name, budget):
    """A TensorProto as a numpy array of the signature's dtype, checked before anything is
    allocated. spec: the signature's TensorSpec for this input."""
    want = dtype_enum(spec.dtype)
    if proto.dtype != want:
        raise InvalidArgument(f"input {name!r} is {_enum_name(proto.dtype)}; signature "
                              f"{sig_name!r} expects {_enum_name(want)}")
    fields = _proto_fields()
    if want not in fields:
        raise InvalidArgument(f"input {name!r}: {_enum_name(want)} tensors are not supported")
    np_dtype, field, per_element = fields[want]
    if proto.tensor_shape.unknown_rank:
        raise InvalidArgument(f"input {name!r}: a request tensor must have a known shape")
    shape = [d.size for d in proto.tensor_shape.dim]
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"input {name!r} has shape {shape}: dimensions must be >= 0")
    if spec.shape is not None and len(shape) != len(spec.shape):
        raise InvalidArgument(f"input {name!r} has shape {shape}; signature {sig_name!r} "
                              f"expects {list(spec.shape)} (-1: any)")
    if len(shape) > 32:
        raise InvalidArgument(f"input {name!r} has rank {len(shape)}, over 32")
    n = math.prod(shape)                      # Python ints: no overflow
    content = proto.tensor_content
    values = getattr(proto, field)
    if len(values) % per_element:
        raise InvalidArgument(f"input {name!r}: {field} holds {len(values)} numbers, not "
                              f"(real, imaginary) pairs")
    count = len(values) // per_element
    if np_dtype is object:
        if content:
            raise InvalidArgument(f"input {name!r}: string tensors carry string_val, not "
                                  f"tensor_content")
        _check_count(name, shape, n, count, field)
        n_bytes = sum(len(v) for v in values) * (n if count == 1 and n > 1 else 1)
        budget.take(name, shape, n, n_bytes + n * STRING_ELEMENT_BYTES)
        a = np.empty(count, object)
        a[:] = list(values)
        return np.broadcast_to(a, shape).copy() if count == 1 else a.reshape(shape)
    itemsize = np.dtype(np_dtype).itemsize
    budget.take(name, shape, n, n * itemsize)
    if content:
        if len(content) != n * itemsize:
            raise InvalidArgument(
                f"input {name!r}: tensor_content is {len(content)} bytes; shape {shape} of "
                f"{_enum_name(want)} needs exactly {n * itemsize}")
        return np.frombuffer(content, np_dtype).reshape(shape)
    _check_count(name, shape, n, count, field)
    if field == "half_val":                   # bit patterns in int32s
        flat = np.array(values, np.int32).astype(np.uint16).view(np_dtype)
    elif per_element == 2:                    # (real, imaginary) pairs
        flat = np.array(values, np.dtype(np_dtype).type(0).real.dtype).view(np_dtype)
    else:
        try:
            flat = np.array(values, np_dtype)
        except OverflowError as e:
            raise InvalidArgument(f"input {name!r}: {field} {e}") from None
    return np.broadcast_to(flat, shape).copy() if count == 1 else flat.reshape(shape)


def _check_count(name, shape, n, count, field):
    if count == n or (count == 1 and n > 0):
        return
    raise InvalidArgument(f"input {name!r} has shape {shape} ({n} elements) but {count} "
                          f"{field} values: give one value per element, or a single value "
                          f"to fill the shape")


# ------------------------------------------------------------------ REST: JSON

# A JSON string, or an unterminated one up to the end: possessive, and never failing once a
# quote opened it, so one pass takes linear time (a pattern that must find the closing quote
# retries from every later quote of an unterminated string: quadratic, minutes for a 1 MB body
# while holding the GIL). The parser never recurses inside a string, terminated or not.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.S)
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = np.zeros(256, np.int8)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1


def check_json_depth(body, max_depth):
    """Refuses a body nested deeper than max_depth ([ and {) before it is parsed (the parser
    recurses once per level). About 1 ms per MB: only the brackets are scanned."""
    depth = _max_depth(body)
    if depth > max_depth:                     # brackets inside strings do not count
        depth = _max_depth(_STRING.sub(b'""', body))
    if depth > max_depth:
        raise InvalidArgument(f"request body nests {depth} levels of JSON arrays/objects; the "
                              f"limit is {max_depth} (--rest_api_max_json_depth)")


def _max_depth(body, chunk=1 << 20):
    brackets = np.frombuffer(body.translate(None, _NOT_BRACKET), np.uint8)
    depth = peak = 0
    for i in range(0, len(brackets), chunk):  # chunks keep the temporaries small
        levels = np.cumsum(_STEP[brackets[i:i + chunk]], dtype=np.int64) + depth
        peak, depth = max(peak, int(levels.max())), int(levels[-1])
    return peak


def array_from_json(name, value, spec, sig_name, budget, literals):
    """A JSON value (lists, numbers, strings, bytes from {"b64": ...}) as an array of the
    signature's dtype: null is refused, and values must be of the dtype's kind (numbers for
    numeric inputs, integral ones for integer inputs, true/false for bool, strings for
    string inputs). literals: the body contains true, false or null somewhere."""
    shape = _json_shape(value)
    n = math.prod(shape)
    want = spec.dtype
    # a string's own bytes are in the body, which --max_request_bytes bounds already
    budget.take(name, shape, n, n * (STRING_ELEMENT_BYTES if want == object else
                                     np.dtype(want).itemsize))
    if want == object:
        a = np.empty(shape, object)
        try:
            a[...] = value
        except (ValueError, TypeError):
            raise InvalidArgument(f"input {name!r} must be a (nested) list of equal-length "
                                  f"rows") from None
        if not all(isinstance(x, (bytes, str)) for x in a.flat):
            bad = next(x for x in a.flat if not isinstance(x, (bytes, str)))
            raise InvalidArgument(f"input {name!r} is a string input; got {_json_kind(bad)} "
                                  f"value {bad!r}")
        return a
    try:
        a = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is None or a.dtype == object or a.shape != tuple(shape):
        if literals and _contains(value, lambda x: x is None):
            raise InvalidArgument(f"input {name!r} contains null; {sig_name!r} expects "
                                  f"{_dtype_text(want)} values")
        raise InvalidArgument(f"input {name!r} must be a (nested) list of equal-length rows "
                              f"of {_dtype_text(want)} values")
    kind, want = a.dtype.kind, np.dtype(want)
    if want.kind == "b":
        ok = kind == "b" or a.size == 0
    else:
        ok = kind in "iuf" or a.size == 0
        if ok and literals and _contains(value, lambda x: isinstance(x, bool)):
            ok, kind = False, "b"
    if not ok:
        raise InvalidArgument(f"input {name!r} has {_kind_text(kind)} values; signature "
                              f"{sig_name!r} expects {_dtype_text(want)}")
    if want.kind in "iu" and kind in "fiu" and a.size:
        info = np.iinfo(want)
        if kind == "f" and not np.array_equal(a, np.trunc(a)):
            raise InvalidArgument(f"input {name!r} has non-integral values; signature "
                                  f"{sig_name!r} expects {want.name}")
        # float bounds must be exact: int64's max rounds up to 2^63 as a float, so 2^63 (a
        # float) compared equal and wrapped to -2^63; the next integer past max is exact
        over = a.max() >= float(info.max) + 1 if kind == "f" else a.max() > info.max
        if a.min() < info.min or over:
            raise InvalidArgument(f"input {name!r} has values outside the range of "
                                  f"{want.name}")
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(want, copy=False)


def _json_shape(value):
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _contains(value, pred):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif pred(v):
            return True
    return False


def _json_kind(x):
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, (int, float)):
        return "number"
    return type(x).__name__


def _kind_text(kind):
    return {"b": "boolean", "U": "string", "S": "binary (b64)", "f": "floating-point",
            "i": "integer", "u": "integer"}.get(kind, "non-numeric")
