"""Serving: offline compilation (npu-atc), CannSession for compiled models, and npu-model-server.

    from npu_device.serving import CannSession
"""
from npu_device.serving.session import CannSession, TensorInfo

__all__ = ["CannSession", "TensorInfo"]
