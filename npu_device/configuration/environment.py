"""Process settings that are not options: environment variables read once by the native runtime
or at import, which fix how the process computes. They are checked at import as the options'
NPU_* variables are, so that a typo fails with the allowed values instead of quietly meaning
something else (the runtime's own reading took NPU_NUM_THREADS=four as one thread)."""
import os

from npu_device.configuration import options as opt

# name -> (parser, allowed values, meaning); an empty value means unset.
VARIABLES = {
    "NPU_NUM_THREADS": (opt.integer(1, 256), "an integer from 1 to 256",
                        "threads the simulated NPU's kernels compute on, the caller's included "
                        "(default: one per CPU core)"),
    "NPU_KERNEL_ISA": (opt.choice("auto", "avx2"), "auto, avx2",
                       "the kernels' instruction set: auto (AVX-512 where the CPU has it) or "
                       "avx2, the build's baseline (npu_device.runtime.kernel_isa() says which "
                       "runs)"),
    "NPU_LOG_EAGER_FALLBACK": (opt.boolean, "1, true, yes, on; 0, false, no, off",
                               "log eager ops that ran on the CPU instead of the NPU (default "
                               "on)"),
}


def value(name, environ=None):
    """The parsed value of variable `name`, or None when it is unset or empty."""
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw.strip():
        return None
    parse, allowed, _ = VARIABLES[name]
    try:
        return parse(raw)
    except ValueError as e:
        raise ValueError(f"invalid value for environment variable {name}: {e}. "
                         f"Allowed: {allowed}") from None


def check(environ=None):
    """Raises ValueError naming the first variable set to a value it does not allow."""
    for name in VARIABLES:
        value(name, environ)
