"""GEMM micro-benchmark: the simulated NPU's MatMul kernel against TF's MatMul on the CPU (oneDNN),
in one process, on shapes from the benchmark models (square, im2col convolutions, dense layers).

    PYTHONPATH=. python -m benchmarks.gemm_bench [--reps 4] [--out benchmarks/results/gemm]

Per shape, each side runs `reps` independent products C_i = A @ B_i in one call (the NPU: one
compiled model of `reps` MatMul kernels, A and the B_i its constants; TF: one tf.function of
`reps` MatMuls with A and the B_i resident on the CPU); the fastest of several calls, the two
sides taking turns by rounds of calls, is divided by `reps`. The NPU call includes copying the
last C out; TF's includes fetching every C. The B_i are weights, so the NPU's MatMul packs each
into its kernel's panels at the first call and keeps them (kernels/gemm_packed_impl.h; where
that path is not taken, the product is Gemm's on B as stored). Each GFLOP/s is also given as a
share of the machine's measured peak FP32 rate on the NPU's threads (benchmarks/roofline.py),
the roofline.

Until 2026-11-29 A was the NPU model's input, copied in on every call (TF's was resident), and
the sides alternated call by call: earlier tables are not comparable.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# (m, n, k, trans_a, trans_b, what)
SHAPES = [
    (256, 256, 256, False, False, "square"),
    (512, 512, 512, False, False, "square"),
    (1024, 1024, 1024, False, False, "square"),
    (4096, 64, 576, False, False, "conv 3x3x64->64, 64x64 image (im2col)"),
    (1024, 256, 1152, False, False, "conv 3x3x128->256 (im2col)"),
    (64, 512, 784, False, False, "MLP dense 784->512, batch 64"),
    (784, 512, 64, True, False, "MLP weight gradient x^T dy"),
    (64, 784, 512, False, True, "MLP input gradient dy W^T"),
    (256, 256, 64, False, False, "BERT FFN, 8x32 tokens"),
]


def npu_model(m, n, k, trans_a, trans_b, reps, rng):
    """A model of `reps` MatMul kernels C_i = A @ B_i, A and the B_i its constants (resident, as
    TF's operands are)."""
    from graph_engine.compiler import model_format as mf
    blob, values, kernels = bytearray(), [], []

    def const(x):
        blob.extend(b"\0" * (-len(blob) % mf.CONST_ALIGNMENT))
        values.append(mf.Value(1, x.shape, x.nbytes, mf.Kind.CONST, len(blob)))
        blob.extend(x.tobytes())
        return len(values) - 1

    values.append(mf.Value(1, (m, n), 4 * m * n, mf.Kind.ARENA, 0))
    values.append(mf.Value(1, (m, n), 4 * m * n, mf.Kind.OUTPUT, 0))
    a_id = const(rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32))
    for i in range(reps):
        b_id = const(rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32))
        out = 1 if i == reps - 1 else 0      # earlier products go to one scratch arena value
        kernels.append(mf.Kernel("MatMul", f"matmul_{i}", [a_id, b_id], [out],
                                 {"transpose_a": trans_a, "transpose_b": trans_b}))
    return mf.Model(name="gemm", values=values, kernels=kernels, inputs=[], outputs=[1],
                    arena_bytes=4 * m * n, const_blob=bytes(blob))


def timings(calls, repeat, run=3):
    """Per call, every timing of `repeat` rounds of `run` calls each (after one warm-up call);
    the sides take turns by rounds, so both see the same load from other processes on a shared
    machine, while the first timing of each round is the one after the other library's: TF's
    threads, and the NPU's, keep spinning for a while after their work and take the cores from
    the next call (on 2 vCPUs, alternating every call timed 784x512x64 A^T B at 2x its time)."""
    times = [[] for _ in calls]
    for call in calls:
        call()                                   # warm-up
    for _ in range(repeat):
        for t, call in zip(times, calls):
            for _ in range(run):
                start = time.perf_counter()
                call()
                t.append(time.perf_counter() - start)
    return times


def best_seconds(calls, repeat):
    """Per call, the fastest of its timings()."""
    return [min(t) for t in timings(calls, repeat)]


def bench(m, n, k, trans_a, trans_b, reps, repeat):
    import tensorflow as tf
    from graph_engine.compiler import model_format as mf
    from npu_device import _C
    rng = np.random.default_rng(0)
    model = npu_model(m, n, k, trans_a, trans_b, reps, rng)
    loaded = _C.load_model(mf.serialize(model))
    a = model.const_array(model.kernels[0].inputs[0])
    bs = [model.const_array(kern.inputs[1]) for kern in model.kernels]
    with tf.device("/device:CPU:0"):
        ta, tbs = tf.constant(a), [tf.constant(b) for b in bs]
        f = tf.function(lambda x, ys: [tf.linalg.matmul(x, y, transpose_a=trans_a,
                                                        transpose_b=trans_b) for y in ys])
        npu_s, cpu_s = (t / reps for t in best_seconds(
            [lambda: loaded.run([]), lambda: [t.numpy() for t in f(ta, tbs)]], repeat))
    # the NPU result is checked against TF's, so a fast wrong kernel cannot pass unnoticed
    want = [t.numpy() for t in f(ta, tbs)][-1]
    np.testing.assert_allclose(loaded.run([])[0], want, rtol=1e-4, atol=1e-3 * np.sqrt(k))
    gflop = 2 * m * n * k / 1e9
    return {"m": m, "n": n, "k": k, "trans_a": trans_a, "trans_b": trans_b,
            "npu_ms": 1000 * npu_s, "cpu_ms": 1000 * cpu_s, "npu_gflops": gflop / npu_s,
            "cpu_gflops": gflop / cpu_s, "ratio": cpu_s / npu_s}


def _op(r):
    return ("A^T" if r["trans_a"] else "A") + ("B^T" if r["trans_b"] else "B")


def run_shapes(reps=4, repeat=7, peak=None, log=None):
    """Every SHAPES row (bench's dict plus `what`, and npu/cpu_pct_of_peak when `peak`, a
    benchmarks.roofline.measure() result, is given); `log(markdown line)` per row."""
    rows = []
    for m, n, k, ta, tb, what in SHAPES:
        r = dict(bench(m, n, k, ta, tb, reps, repeat), what=what)
        if peak:
            r["npu_pct_of_peak"] = 100 * r["npu_gflops"] / peak["peak_gflops"]
            r["cpu_pct_of_peak"] = 100 * r["cpu_gflops"] / peak["peak_gflops"]
        rows.append(r)
        if log:
            log(table_line(r))
    return rows


TABLE_HEAD = ["| m | n | k | op | what | NPU ms (GFLOP/s, % of peak) | TF CPU ms (GFLOP/s, % of "
              "peak) | CPU/NPU |", "|---|---|---|---|---|---|---|---|"]


def table_line(r):
    def cell(side):
        pct = r.get(f"{side}_pct_of_peak")
        return (f"{r[side + '_ms']:.3f} ({r[side + '_gflops']:.0f}"
                + (f", {pct:.0f}%)" if pct is not None else ")"))
    return (f"| {r['m']} | {r['n']} | {r['k']} | {_op(r)} | {r['what']} | {cell('npu')} "
            f"| {cell('cpu')} | {r['ratio']:.2f} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=4, help="products per call (default 4)")
    p.add_argument("--repeat", type=int, default=7, help="timed calls per side (default 7)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "gemm"))
    a = p.parse_args(argv)
    if a.reps < 1 or a.repeat < 1:
        p.error("--reps and --repeat must be at least 1")
    import npu_device  # noqa: F401  (loads the plugin before TensorFlow creates devices)
    from benchmarks import roofline
    peak = roofline.measure()
    print("\n".join(TABLE_HEAD), flush=True)
    rows = run_shapes(a.reps, a.repeat, peak, log=lambda line: print(line, flush=True))
    summary = roofline.line(peak, rows)
    print("\n" + summary)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"peak": peak, "rows": rows}, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(TABLE_HEAD + [table_line(r) for r in rows]) + f"\n\n{summary}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
