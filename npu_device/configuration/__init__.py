"""npu_device's options and device selection (the Ascend adapter's API, see docs/options.md).

Importing this package reads the NPU_* environment variables, the options' and the process
settings' (configuration/environment.py; an invalid one raises here), and hands
device_count/hbm_size to the native runtime if it has not started yet.
"""
from npu_device.configuration import environment
from npu_device.configuration.device import NpuDevice, open  # noqa: A004
from npu_device.configuration.options import OPTIONS, UnknownOptionError
from npu_device.configuration.state import (
    CONFIG, Snapshot, current, get_npu_config, global_options, on_change, set_npu_config)

environment.check()
CONFIG.apply_environment()

__all__ = ["NpuDevice", "OPTIONS", "Snapshot", "UnknownOptionError", "current",
           "get_npu_config", "global_options", "on_change", "open", "set_npu_config"]
