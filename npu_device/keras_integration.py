"""Keras 3 on the NPU without XLA.

Keras resolves `compile(jit_compile="auto")` in `Trainer._resolve_auto_jit_compile`
(keras/src/trainers/trainer.py): on the TensorFlow backend it picks XLA as soon as any non-CPU
device exists, and XLA has no NPU backend ("No JIT device registered for NPU"). The same method
runs when `model.jit_compile` is read before compile. Every explicit value, from compile() or a
saved compile config, goes through the `Trainer.jit_compile` property setter.

install() wraps exactly those two: "auto" resolves to False when an NPU is present, and an
explicit True warns and proceeds with False, as Keras itself does for models whose layers cannot
be XLA-compiled. npu_device's graph engine compiles the train/eval/predict graphs instead.

Functions that must be XLA-compiled inside a model (Keras runs a grouped Conv2D through an inner
tf.function(jit_compile=True) on the TensorFlow backend) need nothing here: the plugin runs any
such function TensorFlow places on the NPU through the graph engine (tf_plugin_cc/jit_compile.cc,
docs/options.md "Keras and XLA"). The hooks above remain so that a model's own train step is an
ordinary function (one partitioned graph, no XLA request to redirect) and the user hears why.

Loop sinking (option iterations_per_loop = N, Ascend's npu loop size): install() also wraps
`Trainer.compile` so that a model compiled while an NPU is present, without an explicit
`steps_per_execution` and not `run_eagerly`, gets `steps_per_execution = N`. Keras then runs N
steps per call of its train/test function as a `tf.while_loop` over the dataset iterator
(keras/src/backend/tensorflow/trainer.py, multi_step_on_iterator), which TF lowers and our
partitioner clusters per loop frame (docs/architecture.md, "Loop sinking"). Only the attribute
is set: the model's compile config keeps what the user wrote, so a saved model stays portable.
"""
import functools
import inspect
import logging
import os
import sys
import warnings

XLA_ON_NPU_MESSAGE = (
    "jit_compile=True asks for XLA, but XLA has no NPU backend. npu_device compiles the model's "
    "graphs with its own graph engine instead; proceeding with jit_compile=False. Leave "
    "jit_compile at its default ('auto') to silence this warning.")


def npu_present():
    import tensorflow as tf
    return bool(tf.config.list_physical_devices("NPU"))


def _user_stacklevel():
    """stacklevel (seen from the setter) of the first frame outside Keras and TensorFlow: the
    user's compile() call, so the warning points at it."""
    import keras
    import tensorflow
    library_dirs = tuple(os.path.dirname(m.__file__) + os.sep for m in (keras, tensorflow))

    def library(filename):   # Keras, TensorFlow, or this module's compile wrapper
        return filename.startswith(library_dirs) or filename == __file__
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and library(frame.f_code.co_filename):
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
    Trainer.compile = _loop_sinking_compile(Trainer.compile, on_npu)
    try:
        from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    except ImportError:         # another backend: no loop sinking to warn about
        TensorFlowTrainer = None
    for method, step_args in _STEP_ARGS.items():
        if TensorFlowTrainer is not None and hasattr(TensorFlowTrainer, method):
            setattr(TensorFlowTrainer, method,
                    _warn_on_rounded_steps(getattr(TensorFlowTrainer, method), step_args))
    from npu_device.train import optimizer as loss_scaling
    loss_scaling.install()       # Keras's LossScaleOptimizer sees saturated float16 overflow
    Trainer._npu_device_jit_hook = True
    return True


# The step counts a user may give fit, evaluate and predict.
_STEP_ARGS = {"fit": ("steps_per_epoch", "validation_steps"), "evaluate": ("steps",),
              "predict": ("steps",)}


def _warn_on_rounded_steps(method, step_args):
    """`method`, warning once per model and argument when a step count the user gave is not a
    multiple of the steps per call that iterations_per_loop set: Keras rounds it up (it runs
    whole calls), as for any steps_per_execution, so more batches run than were asked for."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        n = getattr(self, "_npu_loop_size", 0)
        inner = kwargs.get("_use_cached_eval_dataset")    # fit's own evaluate(validation_steps)
        if n > 1 and self.steps_per_execution == n and not inner:
            try:
                given = signature.bind(self, *args, **kwargs).arguments
            except TypeError:          # Keras raises its own error
                given = {}
            warned = self.__dict__.setdefault("_npu_rounded_steps_warned", set())
            for arg in step_args:
                steps = given.get(arg)
                if isinstance(steps, int) and steps % n and arg not in warned:
                    warned.add(arg)
                    warnings.warn(
                        f"npu_device: {arg}={steps} is not a multiple of the {n} steps per call "
                        f"that option iterations_per_loop gave model {self.name!r}: Keras runs "
                        f"whole calls, {-(-steps // n) * n} steps. Give a multiple of {n}, or "
                        f"compile with steps_per_execution=1.", UserWarning,
                        stacklevel=_user_stacklevel())
        return method(self, *args, **kwargs)

    return wrapper


def loop_size():
    """Option iterations_per_loop (steps per host call)."""
    from npu_device.configuration import current
    return current().iterations_per_loop


def set_npu_loop_size(loop_size):
    """Ascend's TF2 adapter name for option iterations_per_loop (`npu.set_npu_loop_size(32)`):
    Keras models compiled afterwards run `loop_size` steps per call of their train, test and
    predict functions. ValueError for anything but an integer >= 1."""
    from npu_device.configuration import set_npu_config
    set_npu_config(iterations_per_loop=loop_size)


def _loop_sinking_compile(compile_, on_npu):
    """Trainer.compile, then steps_per_execution = iterations_per_loop where the call left it
    to Keras' default (see the module docstring)."""
    signature = inspect.signature(compile_)

    @functools.wraps(compile_)
    def compile(self, *args, **kwargs):
        result = compile_(self, *args, **kwargs)
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError:   # compile_ accepted it, so this does not happen; leave Keras' value
            return result
        if "steps_per_execution" in given or getattr(self, "run_eagerly", False):
            return result
        n = loop_size()
        if n > 1 and on_npu():
            self.steps_per_execution = n
            self._npu_loop_size = n
            logging.getLogger("npu_device").info(
                "npu_device: model %r runs %d steps per call (steps_per_execution, from option "
                "iterations_per_loop)", getattr(self, "name", "?"), n)
        return result

    return compile
