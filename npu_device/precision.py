"""Precision controls of the NPU beyond the precision_mode option:

    with npu_device.precision.keep_dtype_scope():     # also npu_device.keep_dtype_scope
        y = tf.matmul(a, b)        # stays float32 whatever the precision mode

    npu_device.precision.set_overflow_mode("inf_nan") # or "saturation" (default): the option
                                                      # overflow_mode (NPU_OVERFLOW_MODE)
    npu_device.precision.float_status()               # {"overflow": bool, "nan": bool}
    npu_device.precision.clear_float_status()         # returns what it cleared

Precision debugging (runs the graph in a mode and in float32, ranks ops by added error and
suggests a modify_mixlist):

    print(npu_device.precision.compare(fn, [x, w], precision="allow_mix_precision_fp16"))

Float status: kernels raise a process-wide flag when a float16 store overflows (|x| > 65504)
or produces NaN; in saturation mode the stored value is clamped to ±65504, so a loss-scale
optimizer must read the flag (npu_device.train.optimizer does). In inf_nan mode overflow stores
±inf and gradients show it.
"""
import contextlib
import ctypes
import os

from npu_device import configuration
from npu_device.configuration.options import OVERFLOW_MODES  # the runtime's enum order
_OVERFLOW, _NAN = 1, 2
_lib = None


def _runtime():
    """The loaded libnpu_runtime (the same copy the plugin and npu_device._C use)."""
    global _lib
    if _lib is None:
        from npu_device import _C  # noqa: F401  (its import loaded the runtime)
        # By soname, not path: an installed plugin may have loaded the runtime from another
        # directory than this package's, and a path would load a second, separate copy.
        lib = ctypes.CDLL("libnpu_runtime.so", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        lib.npuGetFloatStatus.restype = lib.npuClearFloatStatus.restype = ctypes.c_uint32
        lib.npuSetOverflowMode.argtypes = [ctypes.c_int]
        _lib = lib
    return _lib


def set_overflow_mode(mode):
    """'saturation' (fp16 overflow stores ±65504) or 'inf_nan' (IEEE ±inf); kernels run
    afterwards use it. The same setting as set_npu_config(overflow_mode=mode)."""
    if mode not in OVERFLOW_MODES:
        raise ValueError(f"overflow_mode {mode!r} is not allowed; allowed: "
                         f"{', '.join(OVERFLOW_MODES)}")
    configuration.set_npu_config(overflow_mode=mode)


def overflow_mode():
    """The mode the runtime's kernels use now (the option overflow_mode)."""
    return OVERFLOW_MODES[_runtime().npuGetOverflowMode()]


def sync_overflow_mode():
    """Applies the option overflow_mode to the runtime again (options apply it themselves
    whenever it changes); returns the mode in effect."""
    apply_overflow_mode(configuration.current().overflow_mode)
    return overflow_mode()


def apply_overflow_mode(mode):
    """Hands `mode` to the runtime's kernels (done whenever the options change, below;
    programs use set_overflow_mode or set_npu_config)."""
    _runtime().npuSetOverflowMode(OVERFLOW_MODES.index(mode))


configuration.on_change(lambda snapshot, _: apply_overflow_mode(snapshot.overflow_mode))


def _decode(bits):
    return {"overflow": bool(bits & _OVERFLOW), "nan": bool(bits & _NAN)}


def float_status():
    """The flag since it was last cleared: {"overflow": bool, "nan": bool}."""
    return _decode(_runtime().npuGetFloatStatus())


def clear_float_status():
    """Clears the flag; returns what it held."""
    return _decode(_runtime().npuClearFloatStatus())


def read_and_clear_status_bits():
    """The raw flag bits (int), cleared. For graph use through tf.py_function."""
    return int(_runtime().npuClearFloatStatus())


@contextlib.contextmanager
def keep_dtype_scope():
    """Ops created inside (while building a tf.function / Keras graph) keep their dtype in
    every precision mode: the precision pass skips nodes with the attr `_keep_dtype`. Eager
    ops are not affected (they carry no graph attrs)."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2
    graph = tf.compat.v1.get_default_graph()
    with graph._attr_scope({"_keep_dtype": attr_value_pb2.AttrValue(b=True)}):
        yield


def compare(fn, args, precision="allow_mix_precision_fp16", **kwargs):
    """See graph_engine.compiler.precision_compare.compare."""
    from graph_engine.compiler.precision_compare import compare as run
    return run(fn, args, precision=precision, **kwargs)
