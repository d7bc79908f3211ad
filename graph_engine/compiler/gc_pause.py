"""The cyclic garbage collector paused while the compiler works.

The IR allocates objects by the hundred thousand (nodes and values point at each other, so they
are cycles). While it lives, each gen-0 collection promotes survivors, and the full collections
that follow walk every object of the process, TensorFlow's and Keras' too: a third of a large
compile, and more than half of partitioning a retraced predict graph, went there. Collection
resumes when the last concurrent compile or partitioning ends, and the next one frees the IR.
"""
import contextlib
import gc
import threading

_lock = threading.Lock()
_pausers = 0                 # compiles and partitionings running now
_resume = False              # whether the GC was on when the first of them began


@contextlib.contextmanager
def paused():
    global _pausers, _resume
    with _lock:
        if _pausers == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _resume:
                gc.enable()
