"""Training helpers for the NPU."""
from npu_device.train import optimizer  # noqa: F401
from npu_device.train.optimizer import NpuLossScaleOptimizer  # noqa: F401
