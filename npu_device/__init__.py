"""npu_device: run unmodified TensorFlow 2 / Keras programs on an NPU.

    import npu_device
    npu_device.set_npu_config(precision_mode="allow_mix_precision")
    # Keras fit, tf.function and eager code now run on /device:NPU:0

Importing the package loads the NPU PluggableDevice plugin into TensorFlow (unless TensorFlow
already auto-loaded it from site-packages/tensorflow-plugins) and connects TensorFlow's graph
optimizer to the NPU graph engine.
"""
# Options first: invalid NPU_* environment values fail here with a clear message.
from npu_device.configuration import get_npu_config, global_options, open, set_npu_config
from npu_device import _loader

_loader.load_plugin()

from npu_device import grappler_defaults as _grappler_defaults  # noqa: E402

_grappler_defaults.install()  # Grappler's memory optimizer: only cost, no effect without GPUs
from npu_device import soft_placement as _soft_placement  # noqa: E402

_soft_placement.install()  # eager ops without NPU kernels run on the CPU, however TF starts

from npu_device import compiler_bridge as _compiler_bridge  # noqa: E402,F401  (TF optimizer → GE)
from npu_device.compiler_bridge import compile_stats  # noqa: E402
from npu_device.explain import explain  # noqa: E402
from npu_device import eager_fallback as _eager_fallback  # noqa: E402

_eager_fallback.install()

from npu_device.runtime import counters, info, memory_stats, reset_counters, reset_peak_memory  # noqa: E402
from npu_device.precision import keep_dtype_scope  # noqa: E402
from npu_device import keras_integration as _keras_integration  # noqa: E402

_keras_integration.install()  # jit_compile="auto" must not route NPU models to XLA; loop sinking
from npu_device import distribute as _distribute  # noqa: E402

_distribute.install()  # MultiWorkerMirroredStrategy replicas on the NPUs
from npu_device.keras_integration import set_npu_loop_size  # noqa: E402

__version__ = "0.1.0"
