"""NpuLossScaleOptimizer: Keras 3 loss scaling that sees NPU overflow.

    model.compile(optimizer=NpuLossScaleOptimizer(keras.optimizers.Adam(1e-3)), ...)

Dynamic (default): the loss is multiplied by the scale (initially 2**15); a step whose
gradients overflowed is skipped and the scale halves; after `dynamic_growth_steps` (2000)
finite steps in a row the scale doubles. `dynamic=False` keeps `initial_scale` fixed (overflowing
steps are still skipped).

Keras's own LossScaleOptimizer (keras.mixed_precision's "mixed_float16" recipe) gets the same
overflow check once npu_device is imported (install(), called by npu_device.keras_integration);
this class adds `dynamic=False` and keeps its update in float32 under every precision mode.

Overflow means: the NPU float-status flag was raised while computing the gradients (the only
sign of an fp16 overflow in saturation mode, where it stores ±65504 instead of inf), or a
gradient is inf/NaN (inf_nan mode, and float32 overflow in either mode). The flag is read and
cleared once the gradients exist, so it covers everything the NPU ran since the previous
update: this step's forward and backward passes (and, rarely relevant, NPU work between steps
such as an evaluation: an fp16 overflow there skips one step). Clearing it between the forward
and the backward pass instead would split the compiled train step in two.
"""
import functools

import keras
import tensorflow as tf

from npu_device import precision

_NEVER = 2**31 - 1     # growth interval of a fixed scale: the int32 step counter never gets there


def _status_bits(*deps):
    """The float-status bits, read and cleared once `deps` are computed (graph or eager)."""
    with tf.control_dependencies([d for d in deps if d is not None]):
        bits = tf.py_function(precision.read_and_clear_status_bits, [], tf.int64,
                              name="npu_float_status")
    return tf.reshape(bits, [])


def _check_finite_with_float_status(check_finite):
    """Keras LossScaleOptimizer.check_finite that also sees NPU float16 overflow: the float
    status bits, read and cleared once the gradients exist (in both modes: a later switch to
    saturation must not see stale bits; only saturation needs them, inf_nan overflow shows in
    the gradients)."""
    @functools.wraps(check_finite)
    def wrapper(self, grads):
        finite = check_finite(self, grads)
        bits = _status_bits(*[g.values if isinstance(g, tf.IndexedSlices) else g
                              for g in grads if g is not None])
        if precision.overflow_mode() != "saturation":
            return finite
        return tf.logical_and(finite, tf.equal(bits, 0))
    wrapper._npu_float_status = True
    return wrapper


def install():
    """Makes Keras's own LossScaleOptimizer (the mixed_float16 recipe's) skip steps whose float16
    results saturated: in saturation mode its gradients stay finite, so it would apply them
    and never lower the scale (idempotent)."""
    cls = keras.optimizers.LossScaleOptimizer
    if not getattr(cls.check_finite, "_npu_float_status", False):
        cls.check_finite = _check_finite_with_float_status(cls.check_finite)


@keras.saving.register_keras_serializable(package="npu_device")
class NpuLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    def __init__(self, inner_optimizer, initial_scale=2.0**15, dynamic_growth_steps=2000,
                 dynamic=True, name=None, **kwargs):
        if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            raise TypeError(f"inner_optimizer must be a keras.optimizers.Optimizer, got "
                            f"{type(inner_optimizer).__name__}")
        if not initial_scale > 0:
            raise ValueError(f"initial_scale must be > 0, got {initial_scale}")
        if not (isinstance(dynamic_growth_steps, int) and dynamic_growth_steps >= 1):
            raise ValueError(f"dynamic_growth_steps must be an int >= 1, got "
                             f"{dynamic_growth_steps!r}")
        super().__init__(inner_optimizer, initial_scale=initial_scale,
                         dynamic_growth_steps=dynamic_growth_steps if dynamic else _NEVER,
                         name=name, **kwargs)
        self.dynamic = bool(dynamic)

    def _stateful_handle_finite_grads(self, grads, trainable_variables):
        # The update (unscaling, optimizer math) stays float32 in every precision mode: Adam's
        # epsilon and second moments underflow in float16 (force_fp16 would break it).
        with precision.keep_dtype_scope():
            super()._stateful_handle_finite_grads(grads, trainable_variables)

    def _stateful_handle_non_finite_grads(self):
        if self.dynamic:
            super()._stateful_handle_non_finite_grads()
        else:
            self.step_counter.assign(0)          # skip the step, keep the scale

    def get_config(self):
        config = super().get_config()
        config["dynamic"] = self.dynamic
        if not self.dynamic:
            config["dynamic_growth_steps"] = _NEVER
        return config
