"""Keras 3 on the NPU without XLA.

Keras resolves `compile(jit_compile="auto")` in `Trainer._resolve_auto_jit_compile`
(keras/src/trainers/trainer.py): on the TensorFlow backend it picks XLA as soon as any non-CPU
device exists, and XLA has no NPU backend ("No JIT device registered for NPU"). The same method
runs when `model.jit_compile` is read before compile. Every explicit value, from compile() or a
saved compile config, goes through the `Trainer.jit_compile` property setter.

install() wraps exactly those two: "auto" resolves to False when an NPU is present, and an
explicit True warns and proceeds with False, as Keras itself does for models whose layers cannot
be XLA-compiled. npu_device's graph engine compiles the train/eval/predict graphs instead.
"""
import os
import sys
import warnings

XLA_ON_NPU_MESSAGE = (
    "jit_compile=True asks for XLA, but XLA has no NPU backend (TensorFlow would fail with "
    "'No JIT device registered for NPU'). npu_device compiles the model's graphs with its own "
    "graph engine instead; proceeding with jit_compile=False. Leave jit_compile at its default "
    "('auto') to silence this warning.")


def npu_present():
    import tensorflow as tf
    return bool(tf.config.list_physical_devices("NPU"))


def _user_stacklevel():
    """stacklevel (seen from the setter) of the first frame outside Keras and TensorFlow: the
    user's compile() call, so the warning points at it."""
    import keras
    import tensorflow
    library_dirs = tuple(os.path.dirname(m.__file__) + os.sep for m in (keras, tensorflow))
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(library_dirs):
        frame, level = frame.f_back, level + 1
    return level


def install():
    """Hooks Keras's jit_compile resolution (idempotent). Returns False if Keras 3 is missing."""
    try:
        from keras.src import backend
        from keras.src.trainers.trainer import Trainer
    except ImportError:
        return False
    if getattr(Trainer, "_npu_device_jit_hook", False):
        return True
    resolve_auto = Trainer._resolve_auto_jit_compile
    prop = Trainer.jit_compile

    def on_npu():
        return backend.backend() == "tensorflow" and npu_present()

    def _resolve_auto_jit_compile(self):
        return False if on_npu() else resolve_auto(self)

    def set_jit_compile(self, value):
        if value and on_npu():
            warnings.warn(XLA_ON_NPU_MESSAGE, UserWarning, stacklevel=_user_stacklevel())
            value = False
        prop.fset(self, value)

    Trainer._resolve_auto_jit_compile = _resolve_auto_jit_compile
    Trainer.jit_compile = property(prop.fget, set_jit_compile, prop.fdel, prop.__doc__)
    Trainer._npu_device_jit_hook = True
    return True
