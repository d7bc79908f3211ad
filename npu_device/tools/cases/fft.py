"""Cases of the FFT (tf.signal) and complex-number ops (graph_engine/ops/fft.py): even, odd and
prime transform lengths. Only the 3-D real transforms (TF defines no gradient for them) crop
their input to fft_length here: TF's gradients of RFFT/IRFFT(2D) fail on cropped shapes, so the
sweep would have no reference for those runs."""
import numpy as np

from npu_device.tools.op_cases import _f32

_R = np.random.default_rng(16)


def _c64(*shape):
    return (_R.uniform(-2, 2, shape) + 1j * _R.uniform(-2, 2, shape)).astype(np.complex64)


def _len(*n):
    return np.asarray(n, np.int32)


# the branch cut and the zeros of Angle, next to ordinary values
_EDGES = np.asarray([[1 + 1j, -1 + 0j, -1 - 0j, 0j], [-0.0 + 0j, 3 - 4j, -2.5 + 1e-3j, 1e-30 + 1j]],
                    np.complex64)

CASES = [
    ("FFT", {"input": _c64(3, 8)}, {}),
    ("FFT", {"input": _c64(2, 7)}, {}),
    ("IFFT", {"input": _c64(3, 8)}, {}),
    ("IFFT", {"input": _c64(12)}, {}),
    ("FFT2D", {"input": _c64(2, 4, 6)}, {}),
    ("IFFT2D", {"input": _c64(2, 5, 6)}, {}),
    ("FFT3D", {"input": _c64(2, 3, 4, 5)}, {}),
    ("IFFT3D", {"input": _c64(3, 4, 5)}, {}),
    ("RFFT", {"input": _f32(3, 8), "fft_length": _len(8)}, {}),
    ("RFFT", {"input": _f32(7), "fft_length": _len(7)}, {}),
    ("IRFFT", {"input": _c64(3, 5), "fft_length": _len(8)}, {}),
    ("IRFFT", {"input": _c64(3, 5), "fft_length": _len(9)}, {}),
    ("RFFT2D", {"input": _f32(2, 4, 6), "fft_length": _len(4, 6)}, {}),
    ("RFFT2D", {"input": _f32(3, 5, 7), "fft_length": _len(5, 7)}, {}),
    ("IRFFT2D", {"input": _c64(2, 4, 4), "fft_length": _len(4, 6)}, {}),
    ("IRFFT2D", {"input": _c64(3, 5, 4), "fft_length": _len(5, 7)}, {}),
    ("RFFT3D", {"input": _f32(2, 3, 4, 6), "fft_length": _len(3, 4, 6)}, {}),
    ("RFFT3D", {"input": _f32(4, 5, 9), "fft_length": _len(3, 4, 7)}, {}),           # cropped
    ("IRFFT3D", {"input": _c64(3, 4, 4), "fft_length": _len(3, 4, 6)}, {}),
    ("IRFFT3D", {"input": _c64(2, 3, 6, 4), "fft_length": _len(2, 5, 5)}, {}),     # cropped
    ("Complex", {"real": _f32(3, 4), "imag": _f32(3, 4)}, {}),
    ("Complex", {"real": _f32(3, 4), "imag": _f32(4)}, {}),           # broadcast
    ("Real", {"input": _c64(3, 4)}, {}),
    ("Imag", {"input": _c64(3, 4)}, {}),
    ("ComplexAbs", {"x": _c64(3, 4)}, {}),
    ("ComplexAbs", {"x": _EDGES}, {}),
    ("Angle", {"input": _c64(3, 4)}, {}),
    ("Angle", {"input": _EDGES}, {}),
    ("Conj", {"input": _c64(3, 4)}, {}),
    # casts to and from complex64 (real values as real parts; back: the real part)
    ("Cast", {"x": _f32(3, 4)}, {"DstT": np.complex64}),
    ("Cast", {"x": np.asarray([[1, -7, 0]], np.int32)}, {"DstT": np.complex64}),
    ("Cast", {"x": _c64(3, 4)}, {"DstT": np.float32}),
    ("Cast", {"x": _EDGES}, {"DstT": np.bool_}),
]
