"""NPU storage formats (docs/layouts.md) and the TransData kernel that converts between them.

Values keep their logical (TF) shape; the format only says how the elements are stored:

    NC1HWC0    logical NHWC [N, H, W, C] (ranks < 4 are right-aligned: [C] is [1, 1, 1, C]),
               stored [N, C1, H, W, C0], C1 = ceil(C / C0)
    FRACTAL_Z  logical HWIO filter [KH, KW, Cin, Cout], stored [C1 * KH * KW, N1, N0, C0] with
               C1 = ceil(Cin / C0), N1 = ceil(Cout / N0), N0 = 16; block (c1, kh, kw) holds
               element (kh, kw, c1 * C0 + c0, n1 * N0 + n0) at [n1, n0, c0]
    FILTER_KN  logical HWIO filter, stored as the convolution GEMM's [K, N] operand:
               [KH * KW * Cin, N1 * N0], row (c1, kh, kw, c0) over the real input channels
               only (block c1 has min(C0, Cin - c1 * C0) of them), column n the output
               channel. The simulator's float32 convolutions read it in place (FRACTAL_Z,
               Ascend's cube format, is transposed per 16x16 block for its vector units).

C0 is 16 for 2- and 4-byte floats and 32 for 1-byte types (one 32-byte cube row). Padding
lanes have unspecified contents: no kernel lets them reach a real output, so layout-agnostic
elementwise kernels may run over the whole storage. `pack` writes zeros there.

`pack` / `unpack` convert a logical array to its storage array and back; the reference
executor and constant folding of TransData use them, and the C++ TransData kernel is checked
against them.
"""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.formats import Format
from graph_engine.ops.base import ALL, Op, register

N0 = 16
PADDED = (Format.NC1HWC0, Format.FRACTAL_Z, Format.FILTER_KN)
FILTERS = (Format.FRACTAL_Z, Format.FILTER_KN)     # logically HWIO
# TransData ends: the logical layouts of ND values and the padded NPU formats.
PLAIN = (Format.ND, Format.NCHW, Format.NHWC)


def c0(dtype):
    """Channels per C0 block for a TF DataType: 32 bytes of 1-byte types, 16 otherwise."""
    return 32 if dt.itemsize(dtype) == 1 else 16


def _ceil(a, b):
    return -(-a // b)


def nhwc(shape):
    """A logical shape of rank <= 4 right-aligned to NHWC."""
    if len(shape) > 4:
        raise ValueError(f"NC1HWC0 holds values of rank <= 4, got shape {list(shape)}")
    return (1,) * (4 - len(shape)) + tuple(shape)


def storage_shape(fmt, shape, dtype):
    """The storage array's shape of a value of logical `shape` in format `fmt`."""
    fmt = Format(fmt or Format.ND)
    k = c0(dtype)
    if fmt == Format.NC1HWC0:
        n, h, w, c = nhwc(shape)
        return (n, _ceil(c, k), h, w, k)
    if fmt in FILTERS:
        if len(shape) != 4:
            raise ValueError(f"{fmt.name} holds HWIO filters, got shape {list(shape)}")
        kh, kw, ci, co = shape
        if fmt == Format.FILTER_KN:
            return (kh * kw * ci, _ceil(co, N0) * N0)
        return (_ceil(ci, k) * kh * kw, _ceil(co, N0), N0, k)
    return tuple(shape)


def _kn_blocks(ci, k):
    """FILTER_KN's input-channel blocks: (first channel, end) of each C0 block."""
    return [(lo, min(lo + k, ci)) for lo in range(0, ci, k)]


def pack(x, fmt):
    """Logical array -> storage array of format `fmt` (padding zero)."""
    fmt = Format(fmt or Format.ND)
    if fmt not in PADDED:
        return np.ascontiguousarray(x)
    k = c0(dt.from_numpy(x.dtype))
    if fmt == Format.NC1HWC0:
        n, h, w, c = nhwc(x.shape)
        c1 = _ceil(c, k)
        y = np.zeros((n, h, w, c1 * k), x.dtype)
        y[..., :c] = x.reshape(n, h, w, c)
        return np.ascontiguousarray(y.reshape(n, h, w, c1, k).transpose(0, 3, 1, 2, 4))
    kh, kw, ci, co = x.shape
    if fmt == Format.FILTER_KN:
        y = np.zeros((kh * kw * ci, _ceil(co, N0) * N0), x.dtype)
        y[:, :co] = np.concatenate([x[:, :, lo:hi].reshape(-1, co) for lo, hi in _kn_blocks(ci, k)])
        return y
    c1, n1 = _ceil(ci, k), _ceil(co, N0)
    y = np.zeros((kh, kw, c1 * k, n1 * N0), x.dtype)
    y[:, :, :ci, :co] = x
    # [kh, kw, c1, c0, n1, n0] -> [c1, kh, kw, n1, n0, c0]
    y = y.reshape(kh, kw, c1, k, n1, N0).transpose(2, 0, 1, 4, 5, 3)
    return np.ascontiguousarray(y.reshape(c1 * kh * kw, n1, N0, k))


def unpack(s, fmt, shape):
    """Storage array of format `fmt` -> the logical array of `shape`."""
    fmt = Format(fmt or Format.ND)
    if fmt not in PADDED:
        return s.reshape(shape)
    k = s.shape[-1]
    if fmt == Format.NC1HWC0:
        n, h, w, c = nhwc(shape)
        x = s.transpose(0, 2, 3, 1, 4).reshape(n, h, w, -1)[..., :c]
        return np.ascontiguousarray(x).reshape(shape)
    kh, kw, ci, co = shape
    if fmt == Format.FILTER_KN:
        x = np.empty(shape, s.dtype)
        row = 0
        for lo, hi in _kn_blocks(ci, c0(dt.from_numpy(s.dtype))):
            rows = kh * kw * (hi - lo)
            x[:, :, lo:hi] = s[row:row + rows, :co].reshape(kh, kw, hi - lo, co)
            row += rows
        return x
    c1, n1 = _ceil(ci, k), s.shape[1]
    y = s.reshape(c1, kh, kw, n1, N0, k).transpose(1, 2, 0, 5, 3, 4)
    return np.ascontiguousarray(y.reshape(kh, kw, c1 * k, n1 * N0)[:, :, :ci, :co])


@register
class TransData(Op):
    """Changes a value's storage format. Attrs src_format, dst_format (model_format.Format
    numbers). Logically the identity, except that NCHW <-> NC1HWC0 also moves the channel
    axis (NC1HWC0 values are logically NHWC), which lets it absorb layout Transposes."""
    internal = True
    type_attrs = {"T": ALL}

    @staticmethod
    def _formats(attrs):
        src, dst = Format(attrs["src_format"]), Format(attrs["dst_format"])
        pair = {src, dst}
        if len(pair) != 2 or not (pair & set(PADDED)) or not (pair & set(PLAIN)):
            raise ValueError(f"TransData converts between {'/'.join(f.name for f in PLAIN)} and "
                             f"{'/'.join(f.name for f in PADDED)}; got {src.name} -> {dst.name}")
        for f in pair & set(FILTERS):
            if Format.ND not in pair and Format.NHWC not in pair:
                raise ValueError(f"{f.name} converts from/to HWIO filters (ND) only")
        return src, dst

    def shapes(self, shapes, attrs):
        src, dst = self._formats(attrs)
        s = tuple(shapes[0])
        if Format.NCHW in (src, dst) and len(s) != 4:
            raise ValueError(f"TransData from/to NCHW needs a 4-D value, got {list(s)}")
        if src == Format.NCHW:
            return [(s[0], s[2], s[3], s[1])]
        if dst == Format.NCHW:
            return [(s[0], s[3], s[1], s[2])]
        storage_shape(dst if dst in PADDED else src, s, dt.DT_FLOAT)   # validates the rank
        return [s]

    def compute(self, xs, attrs):
        src, dst = self._formats(attrs)
        if src == Format.NCHW:
            return np.transpose(xs[0], (0, 2, 3, 1))
        if dst == Format.NCHW:
            return np.transpose(xs[0], (0, 3, 1, 2))
        return xs[0].copy()
