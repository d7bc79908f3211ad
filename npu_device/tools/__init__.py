"""Developer tools that need the NPU device (python -m npu_device.tools.<name>)."""
