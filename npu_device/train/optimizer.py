"""NpuLossScaleOptimizer: Keras 3 loss scaling that sees NPU overflow.

    model.compile(optimizer=NpuLossScaleOptimizer(keras.optimizers.Adam(1e-3)), ...)

Dynamic (default): the loss is multiplied by the scale (initially 2**15); a step whose
gradients overflowed is skipped and the scale halves; after `dynamic_growth_steps` (2000)
finite steps in a row the scale doubles. `dynamic=False` keeps `initial_scale` fixed (overflowing
steps are still skipped).

Overflow means: the NPU float-status flag was raised while computing the gradients (the only
sign of an fp16 overflow in saturation mode, where it stores ±65504 instead of inf), or a
gradient is inf/NaN (inf_nan mode, and float32 overflow in either mode). The flag is read and
cleared once the gradients exist, so it covers everything the NPU ran since the previous
update: this step's forward and backward passes (and, rarely relevant, NPU work between steps
such as an evaluation: an fp16 overflow there skips one step). Clearing it between the forward
and the backward pass instead would split the compiled train step in two.
"""
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

    def check_finite(self, grads):
        finite = super().check_finite(grads)
        # Cleared in both modes (a later switch to saturation must not see stale bits); only
        # saturation mode needs it: inf_nan overflow shows in the gradients.
        bits = _status_bits(*[g.values if isinstance(g, tf.IndexedSlices) else g
                              for g in grads if g is not None])
        if precision.overflow_mode() != "saturation":
            return finite
        return tf.logical_and(finite, tf.equal(bits, 0))

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
