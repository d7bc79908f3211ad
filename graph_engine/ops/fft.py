"""Fourier transforms (tf.signal) and complex-number ops. Kernels: runtime/kernels/fft.cc (DUCC,
the FFT library TF's CPU kernels call, so NaN and inf land where TF's do) and
runtime/kernels/complex.cc.

complex64 is the only complex dtype the NPU holds (complex128 would need float64 math), so the
real side of these ops is float32, as on TF's CPU (no float16/bfloat16 kernels there either).
The FFTs transform the innermost 1, 2 or 3 dimensions; the real ones crop those dimensions of
their input to fft_length (a compile-time constant; TF's kernels never zero-pad: tf.signal pads
with a Pad op before them)."""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import COMPLEX, Op, broadcast, register

REAL = (dt.DT_FLOAT,)


def _inner_axes(shape, rank, what):
    """The transformed axes (the innermost `rank`) of an input of `shape`."""
    if len(shape) < rank:
        raise ValueError(f"{what}: Input must have rank of at least {rank} but got: {len(shape)}")
    return tuple(range(len(shape) - rank, len(shape)))


def _fft_length(attrs, rank, what):
    n = [int(v) for v in np.asarray(attrs["fft_length"]).reshape(-1)]
    if len(n) != rank:
        raise ValueError(f"{what}: fft_length must length {rank} desc, got {len(n)}")
    if any(v < 0 for v in n):
        raise ValueError(f"{what}: fft_length must be non-negative, got {n}")
    return n


def _check_crop(shape, n, what):
    """TF crops the transformed dimensions to `n` (the spectrum's kept half for IRFFT's last)
    but never pads them; an empty dimension passes (an empty input transforms to zeros)."""
    first = len(shape) - len(n)
    for i, (m, want) in enumerate(zip(shape[first:], n)):
        if 0 < m < want:
            raise ValueError(f"{what}: Input dimension {first + i} must have length of at least "
                             f"{want} but got: {m}")


class _ComplexFft(Op):
    """FFT/IFFT over the innermost `rank` dimensions; the shape is kept."""
    type_attrs = {"Tcomplex": COMPLEX}
    rank = 1
    inverse = False

    def shapes(self, shapes, attrs):
        _inner_axes(shapes[0], self.rank, self.name)
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        axes = _inner_axes(xs[0].shape, self.rank, self.name)
        if xs[0].size == 0:
            return xs[0]
        return (np.fft.ifftn if self.inverse else np.fft.fftn)(xs[0], axes=axes)


class _RealFft(Op):
    """RFFT (real -> the non-negative half of the spectrum) or IRFFT (the inverse) over the
    innermost `rank` dimensions, of the sizes fft_length gives."""
    type_attrs = {"Treal": REAL, "Tcomplex": COMPLEX}
    const_inputs = ("fft_length",)
    rank = 1
    inverse = False

    def shapes(self, shapes, attrs):
        _inner_axes(shapes[0], self.rank, self.name)
        n = _fft_length(attrs, self.rank, self.name)
        half = n[:-1] + [n[-1] // 2 + 1 if n[-1] else 0]     # RFFT keeps none of an empty transform
        _check_crop(shapes[0], half if self.inverse else n, self.name)
        return [tuple(shapes[0][:len(shapes[0]) - self.rank]) + tuple(n if self.inverse else half)]

    def compute(self, xs, attrs):
        axes = _inner_axes(xs[0].shape, self.rank, self.name)
        n = _fft_length(attrs, self.rank, self.name)
        out_shape = self.shapes([xs[0].shape], attrs)[0]
        if 0 in out_shape or xs[0].size == 0:     # numpy rejects empty transforms; they sum to 0
            return np.zeros(out_shape, np.float32 if self.inverse else np.complex64)
        return (np.fft.irfftn if self.inverse else np.fft.rfftn)(xs[0], s=n, axes=axes)


@register
class FFT(_ComplexFft):
    pass


@register
class IFFT(_ComplexFft):
    inverse = True


@register
class FFT2D(_ComplexFft):
    rank = 2


@register
class IFFT2D(_ComplexFft):
    rank, inverse = 2, True


@register
class FFT3D(_ComplexFft):
    rank = 3


@register
class IFFT3D(_ComplexFft):
    rank, inverse = 3, True


@register
class RFFT(_RealFft):
    pass


@register
class IRFFT(_RealFft):
    inverse = True


@register
class RFFT2D(_RealFft):
    rank = 2


@register
class IRFFT2D(_RealFft):
    rank, inverse = 2, True


@register
class RFFT3D(_RealFft):
    rank = 3


@register
class IRFFT3D(_RealFft):
    rank, inverse = 3, True


# ---- complex numbers --------------------------------------------------------------------------

@register
class Complex(Op):
    """real + i*imag, broadcasting like a binary op."""
    type_attrs = {"T": REAL, "Tout": COMPLEX}

    def shapes(self, shapes, attrs):
        return [broadcast(shapes[0], shapes[1])]

    def compute(self, xs, attrs):
        return xs[0].astype(np.complex64) + 1j * xs[1].astype(np.complex64)


class _ComplexPart(Op):
    """complex64 -> float32 elementwise."""
    type_attrs = {"T": COMPLEX, "Tout": REAL}

    def shapes(self, shapes, attrs):
        return [tuple(shapes[0])]


@register
class Real(_ComplexPart):
    def compute(self, xs, attrs):
        return np.real(xs[0])


@register
class Imag(_ComplexPart):
    def compute(self, xs, attrs):
        return np.imag(xs[0])


@register
class ComplexAbs(_ComplexPart):
    def compute(self, xs, attrs):
        return np.abs(xs[0])


@register
class Angle(_ComplexPart):
    def compute(self, xs, attrs):
        return np.angle(xs[0])


@register
class Conj(Op):
    type_attrs = {"T": COMPLEX}

    def shapes(self, shapes, attrs):
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        return np.conj(xs[0])
