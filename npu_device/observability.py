"""Hands the observability options to the native runtime (docs/debugging.md):

    enable_dump, dump_path, dump_step, dump_mode  -> npurtSetDump      (tensor dumps)
    enable_profiling, profiling_dir               -> npurtSetProfiling (Chrome-trace JSON)

npu_device.compiler_bridge calls push_options whenever the options change (at import and after
every set_npu_config). The runtime applies them to model runs that start afterwards. TensorFlow's own profiler
(tf.profiler.experimental.start/stop) needs no option: the plugin registers an NPU profiler.
"""
import ctypes
import os

_lib = None
_ERROR_SIZE = 1024


def _runtime():
    """The loaded libnpu_runtime (the copy the plugin and npu_device._C use), by soname."""
    global _lib
    if _lib is None:
        from npu_device import _C  # noqa: F401  (its import loaded the runtime)
        lib = ctypes.CDLL("libnpu_runtime.so", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        lib.npurtSetDump.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.c_char_p, ctypes.c_size_t]
        lib.npurtSetProfiling.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.npurtProfilingFile.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def _call(fn, *args):
    error = ctypes.create_string_buffer(_ERROR_SIZE)
    if fn(*args, error, _ERROR_SIZE) != 0:
        raise ValueError(error.value.decode(errors="replace"))


def _bytes(s):
    return None if s is None else os.fsencode(s)


def push_options(snapshot):
    """Applies the dump and profiling options of `snapshot` (an npu_device.configuration
    Snapshot)."""
    lib = _runtime()
    if snapshot.enable_dump:
        try:
            _call(lib.npurtSetDump, _bytes(snapshot.dump_path),
                  (snapshot.dump_step or "").encode(), snapshot.dump_mode.encode())
        except ValueError as e:
            raise ValueError(f"npu_device option dump_path={snapshot.dump_path!r}: {e}") from None
    else:
        _call(lib.npurtSetDump, None, None, None)
    if snapshot.enable_profiling:
        try:
            _call(lib.npurtSetProfiling, _bytes(snapshot.profiling_dir))
        except ValueError as e:
            raise ValueError(f"npu_device option profiling_dir={snapshot.profiling_dir!r}: "
                             f"{e}") from None
    else:
        _call(lib.npurtSetProfiling, None)


def profiling_file():
    """The Chrome-trace file enable_profiling writes (or last wrote) in this process, or None."""
    path = _runtime().npurtProfilingFile()
    return os.fsdecode(path) if path else None


def flush_profiling():
    """Writes the buffered trace events now (they are also flushed every second, when
    profiling is turned off and at exit)."""
    _runtime().npurtFlushProfiling()
