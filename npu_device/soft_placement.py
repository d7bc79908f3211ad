"""Soft device placement for eager ops, whatever first creates TensorFlow's eager context.

TensorFlow creates its eager context lazily, and unless the program chose soft placement the
context takes `allow_soft_placement = executing_eagerly()` at that moment (`Context.config` in
tensorflow/python/eager/context.py). When the first thing that needs the context runs inside a
tf.function's trace (a gradient, `get_concrete_function`), eager ops lose soft placement for the
rest of the process while `tf.config.get_soft_device_placement()` still says True: an eager op
without an NPU kernel under `tf.device("/NPU:0")` (the RangeDataset that starts Keras `fit`'s
input pipeline) then fails with "Could not satisfy device specification" instead of running on
the CPU. NPU programs put whole programs under the NPU's device scope and rely on soft placement
for such ops, so the default TF documents for eager execution is set explicitly at import; a
choice the program made (`tf.config.set_soft_device_placement`) is kept. Setting it creates no
context, so the plugin can still load.
"""


def install():
    """Returns whether it set soft placement (False: the program had chosen already)."""
    from tensorflow.python.eager import context
    ctx = context.context()
    if ctx._soft_device_placement is not None:  # pylint: disable=protected-access
        return False
    ctx.soft_device_placement = True
    return True
