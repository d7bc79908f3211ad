"""Storage formats of device tensors (docs/compiled_model_format.md); the values are the ones
the compiled model records and the C++ runtime reads (kernels/format.h)."""
import enum


class Format(enum.IntEnum):
    ND = 0
    NCHW = 1
    NHWC = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    FRACTAL_NZ = 5
    FILTER_KN = 6
