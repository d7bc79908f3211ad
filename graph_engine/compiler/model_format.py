"""Writer and reader of the compiled model format (docs/compiled_model_format.md).

The C++ runtime has its own reader (graph_engine/runtime/executor/model_reader.cc); this one
exists so the compiler's output can be inspected and tested from Python.
"""
import dataclasses
import enum
import struct
import zlib

import numpy as np

from graph_engine.ops.formats import Format  # noqa: F401  (a tensor's storage format)

MAGIC = b"NPUOM\0\0\0"
VERSION = 3             # 2: value kind CACHED; 3: outputs over inputs
CONST_ALIGNMENT = 64


class Kind(enum.IntEnum):
    INPUT = 0
    CONST = 1
    ARENA = 2
    OUTPUT = 3
    CACHED = 4             # an input's conversion kept between runs (docs/compiled_model_format.md)


class AttrType(enum.IntEnum):
    INT = 0
    FLOAT = 1
    BOOL = 2
    STRING = 3
    INT_LIST = 4
    FLOAT_LIST = 5


@dataclasses.dataclass
class Value:
    dtype: int                 # TF DataType enum
    dims: tuple
    nbytes: int
    kind: Kind
    where: int                 # input index, const offset, arena offset, output index
                               # or offset in the cached region
    format: Format = Format.ND


@dataclasses.dataclass
class Kernel:
    kernel: str
    node: str
    inputs: list
    outputs: list
    attrs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Model:
    name: str
    values: list
    kernels: list
    inputs: list               # value ids
    outputs: list              # value ids
    arena_bytes: int = 0
    const_blob: bytes = b""
    metadata: str = "{}"
    # (output index, input index): the caller may pass the input's buffer as the output's (the
    # kernel writing the output is the input's last reader and reads it element by element)
    in_place: list = dataclasses.field(default_factory=list)

    def cached_bytes(self):
        """Size of the region of CACHED values (the runtime derives it the same way)."""
        return max((v.where + v.nbytes for v in self.values if v.kind == Kind.CACHED), default=0)

    def const_array(self, value_id):
        """The constant `value_id` as a numpy array (ND formats only)."""
        from graph_engine.ops.dtypes import numpy_dtype
        v = self.values[value_id]
        assert v.kind == Kind.CONST
        raw = self.const_blob[v.where:v.where + v.nbytes]
        return np.frombuffer(raw, dtype=numpy_dtype(v.dtype)).reshape(v.dims)


def _attr_type(value):
    if isinstance(value, (bool, np.bool_)):
        return AttrType.BOOL
    if isinstance(value, (int, np.integer)):
        return AttrType.INT
    if isinstance(value, (float, np.floating)):
        return AttrType.FLOAT
    if isinstance(value, (str, bytes)):
        return AttrType.STRING
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in items):
            return AttrType.INT_LIST
        if all(isinstance(x, (int, float, np.integer, np.floating)) for x in items):
            return AttrType.FLOAT_LIST
    raise TypeError(f"attribute value {value!r} has no compiled-model attribute type")


class _Writer:
    def __init__(self):
        self.parts = []

    def u8(self, v): self.parts.append(struct.pack("<B", v))
    def u32(self, v): self.parts.append(struct.pack("<I", v))
    def u64(self, v): self.parts.append(struct.pack("<Q", v))
    def i64(self, v): self.parts.append(struct.pack("<q", v))
    def f64(self, v): self.parts.append(struct.pack("<d", v))

    def str(self, s):
        b = s.encode() if isinstance(s, str) else bytes(s)
        self.u32(len(b))
        self.parts.append(b)

    def attr(self, name, value):
        t = _attr_type(value)
        self.str(name)
        self.u8(t)
        if t == AttrType.INT: self.i64(int(value))
        elif t == AttrType.FLOAT: self.f64(float(value))
        elif t == AttrType.BOOL: self.u8(1 if value else 0)
        elif t == AttrType.STRING: self.str(value)
        else:
            items = list(value)
            self.u32(len(items))
            for x in items:
                (self.i64 if t == AttrType.INT_LIST else self.f64)(x)

    def bytes(self):
        return b"".join(self.parts)


def serialize(model: Model) -> bytes:
    w = _Writer()
    w.str(model.name)
    w.str(model.metadata)
    w.u64(model.arena_bytes)
    w.u32(len(model.inputs))
    for vid in model.inputs:
        w.u32(vid)
    w.u32(len(model.values))
    for v in model.values:
        w.u32(v.dtype)
        w.u8(int(v.format))
        w.u32(len(v.dims))
        for d in v.dims:
            w.i64(int(d))
        w.u64(v.nbytes)
        w.u8(int(v.kind))
        w.u64(v.where)
    w.u32(len(model.kernels))
    for k in model.kernels:
        w.str(k.kernel)
        w.str(k.node)
        w.u32(len(k.inputs))
        for vid in k.inputs:
            w.u32(vid)
        w.u32(len(k.outputs))
        for vid in k.outputs:
            w.u32(vid)
        w.u32(len(k.attrs))
        for name in sorted(k.attrs):
            w.attr(name, k.attrs[name])
    w.u32(len(model.outputs))
    for vid in model.outputs:
        w.u32(vid)
    w.u32(2 * len(model.in_place))
    for output, input_ in model.in_place:
        w.u32(output)
        w.u32(input_)
    w.u64(len(model.const_blob))
    w.parts.append(model.const_blob)
    payload = w.bytes()
    header = MAGIC + struct.pack("<IIQ", VERSION, zlib.crc32(payload) & 0xFFFFFFFF, len(payload))
    return header + payload


class _Reader:
    def __init__(self, data, offset):
        self.data, self.pos = data, offset

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def u8(self): return self.take("<B")
    def u32(self): return self.take("<I")
    def u64(self): return self.take("<Q")
    def i64(self): return self.take("<q")
    def f64(self): return self.take("<d")

    def str(self):
        n = self.u32()
        s = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return s.decode()

    def attr(self):
        name, t = self.str(), AttrType(self.u8())
        if t == AttrType.INT: return name, self.i64()
        if t == AttrType.FLOAT: return name, self.f64()
        if t == AttrType.BOOL: return name, bool(self.u8())
        if t == AttrType.STRING: return name, self.str()
        read = self.i64 if t == AttrType.INT_LIST else self.f64
        return name, [read() for _ in range(self.u32())]


def deserialize(data: bytes) -> Model:
    if data[:8] != MAGIC:
        raise ValueError("not a compiled NPU model (bad magic)")
    version, crc, length = struct.unpack_from("<IIQ", data, 8)
    if version != VERSION:
        raise ValueError(f"compiled model format version {version}; this reader supports {VERSION}")
    payload = data[24:24 + length]
    if len(payload) != length or zlib.crc32(payload) & 0xFFFFFFFF != crc:
        raise ValueError("compiled model is truncated or corrupt (checksum mismatch)")
    r = _Reader(payload, 0)
    name, metadata, arena = r.str(), r.str(), r.u64()
    inputs = [r.u32() for _ in range(r.u32())]
    values = []
    for _ in range(r.u32()):
        dtype, fmt = r.u32(), Format(r.u8())
        dims = tuple(r.i64() for _ in range(r.u32()))
        values.append(Value(dtype=dtype, format=fmt, dims=dims, nbytes=r.u64(),
                            kind=Kind(r.u8()), where=r.u64()))
    kernels = []
    for _ in range(r.u32()):
        kname, node = r.str(), r.str()
        ins = [r.u32() for _ in range(r.u32())]
        outs = [r.u32() for _ in range(r.u32())]
        attrs = dict(r.attr() for _ in range(r.u32()))
        kernels.append(Kernel(kname, node, ins, outs, attrs))
    outputs = [r.u32() for _ in range(r.u32())]
    flat = [r.u32() for _ in range(r.u32())]
    blob_len = r.u64()
    blob = bytes(payload[r.pos:r.pos + blob_len])
    return Model(name=name, values=values, kernels=kernels, inputs=inputs, outputs=outputs,
                 arena_bytes=arena, const_blob=blob, metadata=metadata,
                 in_place=list(zip(flat[::2], flat[1::2])))
