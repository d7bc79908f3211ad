"""Grappler's memory optimizer off for the tf.functions of a process without GPUs.

Its passes only rewrite for GPUs (swapping to host memory) or for devices whose memory is
nearly full, yet in TF 2.21 it first estimates the whole graph's memory use, for every device,
and only then looks at the device type: 0.1 s of DenseNet121's first inference call, 0.3-0.5 s of
a ResNet50 or MobileNetV2 first training step, and it changes nothing. Where its AddN scheduling
did act on an NPU graph it produced TemporaryVariable/Assign ops, which have no NPU kernels.

TensorFlow 2 has no public switch for it (tf.config.optimizer's options leave it out), so this
sets it in the eager context's base ConfigProto, which every tf.function call's config starts
from. A memory_optimization already set there (the user's) is kept, and TF1 Sessions, which bring
their own ConfigProto, keep TF's default.
"""
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

_RewriterConfig = rewriter_config_pb2.RewriterConfig


def install():
    """Returns whether it switched the memory optimizer off."""
    import tensorflow as tf
    from tensorflow.python.eager import context
    if tf.config.list_physical_devices("GPU"):
        return False            # the optimizer's swapping serves GPUs
    ctx = context.context()
    base = ctx._config if ctx._config is not None else config_pb2.ConfigProto()  # pylint: disable=protected-access
    rewrite = base.graph_options.rewrite_options
    if rewrite.memory_optimization != _RewriterConfig.DEFAULT_MEM_OPT:
        return False            # set by the user
    rewrite.memory_optimization = _RewriterConfig.NO_MEM_OPT
    ctx._config = base  # pylint: disable=protected-access
    ctx.function_call_options = None   # this thread's cached call options are rebuilt from it
    return True
