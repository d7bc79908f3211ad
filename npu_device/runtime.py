"""The NPU runtime as Python sees it: devices, memory statistics, execution counters.

    npu_device.info()[0]["soc_version"]      # 'Ascend910B-sim'
    npu_device.memory_stats()["in_use"]      # bytes of live NPU tensors, exactly

Memory statistics count every NPU allocation (each TensorFlow tensor on the NPU is one), rounded
up to 64 bytes. Reading them (or info()) does not start the runtime: set_npu_config can still
size the devices afterwards.
"""
import ctypes

from npu_device import _C


def info():
    """One dict per NPU device: name, backend, soc_version, hbm_bytes, core_count."""
    return [_C.device_info(i) for i in range(_C.device_count())]


def memory_stats(device_id=0):
    """Bytes in_use, peak, limit and the live (num_allocs) and total_allocs allocation counts;
    cached_bytes: freed memory the simulated device keeps for reuse (not in in_use);
    variable_bytes: the part of in_use that holds variables (resource variables on this device),
    and variable_limit: option variable_memory_max_size (0: none)."""
    return _C.memory_stats(device_id)


def reset_peak_memory(device_id=0):
    """Restarts the high-water mark `peak` at the current `in_use`."""
    _C.reset_peak_memory(device_id)


def kernel_isa():
    """The instruction set of the runtime's GEMM (matrix products, convolutions): 'avx512' where
    the CPU has it, else 'avx2' (the build's baseline). NPU_KERNEL_ISA=avx2, set before the first
    product, pins the baseline so AVX-512 machines can test the path AVX2-only machines take."""
    from npu_device import precision
    fn = precision._runtime().npuKernelIsa
    fn.restype = ctypes.c_char_p
    return fn().decode()


def counters():
    """What the executor really ran: models_loaded, models_run, kernels_executed,
    conversions_reused (weight conversions skipped because the weight had not changed),
    kernels_run_concurrently (of kernels_executed, the small independent kernels a model ran
    beside each other on the runtime's threads) and weights_kept (kernel reads of an input
    weight unchanged since the model's last run, which the kernel reads in the form it keeps:
    a MatMul's packed weight matrix)."""
    return _C.counters()


def reset_counters():
    """Sets the executor counters to zero."""
    _C.reset_counters()
