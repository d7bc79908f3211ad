"""The machine's measured peak FP32 FLOP/s on the NPU's threads, the roof for the GEMM kernel.

    PYTHONPATH=. python -m benchmarks.roofline        # prints the peak per instruction set

The runtime's npuPeakFlops (graph_engine/runtime/kernels/peak_flops.cc) runs a register-only
loop of fused multiply-adds on every thread of the NPU's pool at once; the best of `repeat`
timings is the peak (a shared machine only ever makes a timing slower). Every instruction set
the CPU has is measured and the highest rate is the roof: the GEMM runs the widest, which is at
least as fast as a narrower one (as fast on AMD Zen 4, twice on most Intel CPUs with AVX-512),
so a lower reading for it is load on the machine, not the roof (seen on the 2-vCPU VM: AVX-512
157 against AVX2 236 GFLOP/s in one run, which put the GEMM at 134% of "peak").
"""
import ctypes
import sys

ISAS = ("avx512", "avx2")


def _fn():
    from npu_device import precision
    fn = precision._runtime().npuPeakFlops     # libnpu_runtime, as npu_device.runtime uses it
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_double),
                   ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_double
    return fn


def peak_flops(isa, iterations=2_000_000, repeat=20):
    """Timings of the FMA loop for `isa` ("avx512" or "avx2") on all NPU threads at once, the
    best of `repeat`: {"flops": sum over the loop's ranges (one per NPU thread) of each range's
    best rate over the CPU time it ran, "wall_flops": best rate of all ranges by wall clock,
    "threads": how many ranges}, or None when the CPU lacks the instruction set.

    The sum of per-range rates is the roof: on a shared machine the wall clock of a timing
    also counts the slices the OS gave another process, which the thread's CPU time does not,
    so it stays the cores' own rate under load (the wall-clock figure is kept for comparison;
    on a quiet machine the two agree). Keyed by range, not by thread: where a sleeping worker
    left its range to the caller in every timing (seen once on a busy 2-vCPU VM: the peak read
    as one core's, 119 of 236 GFLOP/s), the caller's CPU time for that range is still one
    core's rate. 2e6 trips are 0.8 GFLOP per thread with AVX-512, a few milliseconds."""
    fn, cap = _fn(), 256
    rates, count = (ctypes.c_double * cap)(), ctypes.c_int(0)
    best, wall = [0.0] * cap, 0.0       # per range
    fn(isa.encode(), iterations // 10, rates, cap, ctypes.byref(count))   # wake the pool
    for _ in range(repeat):
        wall = max(wall, fn(isa.encode(), iterations, rates, cap, ctypes.byref(count)))
        for i in range(count.value):
            best[i] = max(best[i], rates[i])
    if not wall:
        return None
    return {"flops": sum(best), "wall_flops": wall, "threads": count.value}


def measure():
    """{"peak_gflops": the roof (the highest rate over the ISAs), "isa": the ISA that read it,
    "per_isa": {isa: GFLOP/s or None}, "wall_gflops": {isa: all threads by wall clock},
    "threads": NPU threads measured}."""
    per_isa, wall, threads = {}, {}, 0
    for isa in ISAS:
        r = peak_flops(isa)
        per_isa[isa] = r and r["flops"] / 1e9
        wall[isa] = r and r["wall_flops"] / 1e9
        threads = max(threads, r["threads"] if r else 0)
    isa = max((i for i in ISAS if per_isa[i]), key=lambda i: per_isa[i])
    return {"peak_gflops": per_isa[isa], "isa": isa, "per_isa": per_isa, "wall_gflops": wall,
            "threads": threads}


def line(peak, gemm_rows=None):
    """One markdown line: the peak, and the GEMM's best and worst share of it when given
    (rows of benchmarks.gemm_bench with npu_gflops / cpu_gflops)."""
    per = ", ".join(f"{i.upper()} {g:.0f}" for i, g in peak["per_isa"].items() if g)
    text = (f"Roofline: measured peak FP32 {peak['peak_gflops']:.0f} GFLOP/s "
            f"({per}; FMA loop on all {peak['threads']} NPU threads, per-thread CPU time; by "
            f"wall clock, as the GEMM is timed, the best was "
            f"{peak['wall_gflops'][peak['isa']]:.0f}: what other processes left)")
    if gemm_rows:
        npu = [r["npu_gflops"] / peak["peak_gflops"] for r in gemm_rows]
        tf = [r["cpu_gflops"] / peak["peak_gflops"] for r in gemm_rows]
        best = max(gemm_rows, key=lambda r: r["npu_gflops"])
        text += (f"; NPU GEMM {100 * min(npu):.0f}-{100 * max(npu):.0f}% of it over "
                 f"{len(gemm_rows)} shapes (best {best['m']}x{best['n']}x{best['k']}: "
                 f"{best['npu_gflops']:.0f} GFLOP/s), TF MatMul {100 * min(tf):.0f}-"
                 f"{100 * max(tf):.0f}%")
    return text


def main():
    import npu_device  # noqa: F401
    peak = measure()
    print(line(peak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
