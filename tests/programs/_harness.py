"""Runs one program of tests/programs/ on the CPU and on the NPU and prints one JSON result line.

    python tests/programs/_harness.py vae_digits            # JSON result (what the driver reads)
    python tests/programs/_harness.py vae_digits --compare  # also compares, like the driver
    python tests/programs/_harness.py vae_digits --cpu-only # the program alone on TF-CPU

A program is a module `tests/programs/<name>.py` that defines

    run(device) -> dict[str, np.ndarray | float | list]  # all built under tf.device(device)
    TOLERANCE = dict(rtol=..., atol=...)            # NPU vs CPU, for every key
    TOLERANCES = {key: dict(rtol=..., atol=...)}    # optional per-key overrides
    MAX_COMPILES = 60                # bound on what the NPU run adds to compile_stats()["compiles"]
    MAX_SIGNATURES_PER_CLUSTER = 2   # optional: bound on the distinct input signatures one
                                     # cluster compiles (checked where compile_stats reports it)
    MAX_FALLBACKS = 0                # optional, default 0: cluster compiles that ran on CPU
    NPU_PRECISION_MODE = "must_keep_origin_dtype"   # optional (mixed precision: None, default)
    TIMEOUT = 150                    # optional, seconds for the subprocess (the driver's)

The NPU run follows the CPU run in the same process (a fresh interpreter per program), with
npu_device imported before TensorFlow. Errors are caught per run and reported in the JSON with
their type and first message line, so a failing NPU run still tells what the CPU computed.
"""
import importlib.util
import json
import os
import re
import sys
import time
import traceback

if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import npu_device  # noqa: E402,I001  (loads the NPU plugin before TensorFlow creates devices)

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CPU, NPU = "/device:CPU:0", "/device:NPU:0"
RESULT_MARKER = "@@PROGRAM_RESULT@@ "
DEFAULT_PRECISION_MODE = "must_keep_origin_dtype"
NOISE = ("Graph execution error", "Detected at node", "<stack traces", "[[", "Traceback",
         "0 successful operations", "0 derived errors")
STAT_KEYS = ("compiles", "cache_hits", "evictions", "compile_seconds", "fallbacks")


def program_names():
    return sorted(f[:-3] for f in os.listdir(HERE)
                  if f.endswith(".py") and not f.startswith("_"))


def load(name):
    spec = importlib.util.spec_from_file_location(f"npu_programs.{name}",
                                                  os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "numpy"):          # tf.Tensor / Variable
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype.kind in "fc":
        arr = arr.astype(np.float64)
        # JSON has no NaN/inf: strings keep them visible to the comparison
        return {"shape": list(arr.shape),
                "data": [float(v) if np.isfinite(v) else repr(float(v)) for v in arr.ravel()]}
    if arr.dtype.kind in "iub":
        return {"shape": list(arr.shape), "data": [int(v) for v in arr.ravel()]}
    return {"shape": list(arr.shape), "data": [str(v) for v in arr.ravel()]}


def decode(value):
    """Inverse of _jsonable for one result value."""
    data = [float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v
            for v in value["data"]]
    return np.array(data).reshape(value["shape"])


def _error(exc):
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    # TF's "Graph execution error:" and "Detected at node" lines say nothing; the status line
    # under them ("(0) INTERNAL: ...", or the bare message) names the node and the reason.
    lines = [ln for ln in lines
             if not ln.startswith(NOISE) and not re.match(r"^\d+ root error", ln)] or lines
    status = [ln for ln in lines if re.match(r"^(\(\d+\)\s*)?[A-Z][A-Z_]+:\s", ln)]
    first = status[0] if status else (lines[0] if lines else "")
    return {"type": type(exc).__name__, "message": first[:500],
            "traceback": traceback.format_exc()[-6000:]}


def _compile_stats():
    if not hasattr(npu_device, "compile_stats"):
        return None
    return dict(npu_device.compile_stats())


def run_program(name, cpu_only=False):
    module = load(name)
    result = {"program": name, "cpu": None, "npu": None, "cpu_error": None, "npu_error": None,
              "compile_stats": None, "compile_stats_available": hasattr(npu_device,
                                                                        "compile_stats"),
              "npu_models_run": None, "seconds": {}}

    t = time.perf_counter()
    try:
        result["cpu"] = _jsonable(module.run(CPU))
    except Exception as exc:  # noqa: BLE001  (reported, the driver fails the test)
        result["cpu_error"] = _error(exc)
    result["seconds"]["cpu"] = round(time.perf_counter() - t, 2)
    if cpu_only or result["cpu_error"]:
        return result

    npu_device.set_npu_config(
        precision_mode=getattr(module, "NPU_PRECISION_MODE", DEFAULT_PRECISION_MODE))
    stats_before = _compile_stats()
    runs_before = npu_device.counters()["models_run"]
    t = time.perf_counter()
    try:
        result["npu"] = _jsonable(module.run(NPU))
    except Exception as exc:  # noqa: BLE001
        result["npu_error"] = _error(exc)
    result["seconds"]["npu"] = round(time.perf_counter() - t, 2)
    result["npu_models_run"] = npu_device.counters()["models_run"] - runs_before
    try:
        stats_after = _compile_stats()
    except Exception as exc:  # noqa: BLE001  (reported, the driver fails the test)
        result["compile_stats_error"] = _error(exc)
        stats_after = None
    if stats_after is not None:
        # what the NPU run added (the statistics are process-wide counters)
        delta = {}
        for key, value in stats_after.items():
            before = (stats_before or {}).get(key, 0)
            if isinstance(value, (int, float)) and isinstance(before, (int, float)):
                delta[key] = value - before
        result["compile_stats"] = {"delta": delta,
                                   "after": {k: v for k, v in stats_after.items()
                                             if isinstance(v, (int, float, str, bool))}}
    return result


def compare(name, result):
    """Raises AssertionError naming the first key where NPU and CPU disagree (the driver's
    checks, usable from the command line too). Returns notes on skipped checks."""
    module = load(name)
    notes = []
    if result["cpu_error"]:
        err = result["cpu_error"]
        raise AssertionError(f"program is broken on TF-CPU: {err['type']}: {err['message']}\n"
                             f"{err['traceback']}")
    if result["npu_error"]:
        err = result["npu_error"]
        raise AssertionError(f"NPU run failed: {err['type']}: {err['message']}\n"
                             f"{err['traceback']}")
    cpu, npu = result["cpu"], result["npu"]
    assert set(cpu) == set(npu), f"result keys differ: cpu {sorted(cpu)} npu {sorted(npu)}"
    tolerance = dict(module.TOLERANCE)
    per_key = getattr(module, "TOLERANCES", {})
    mismatches = []
    for key in sorted(cpu):
        c, n = decode(cpu[key]), decode(npu[key])
        tol = per_key.get(key, tolerance)
        if c.shape != n.shape:
            mismatches.append(f"{key}: shape cpu {c.shape} npu {n.shape}")
            continue
        if c.dtype.kind not in "fiub":          # strings: exact
            if not np.array_equal(c, n):
                mismatches.append(f"{key}: cpu {c.ravel()[:8]} npu {n.ravel()[:8]}")
            continue
        try:
            np.testing.assert_allclose(n, c, err_msg=f"key {key!r} (NPU vs CPU, {tol})", **tol)
        except AssertionError as exc:
            mismatches.append(str(exc).strip())
    if mismatches:
        raise AssertionError(f"{len(mismatches)} of {len(cpu)} results differ from TF-CPU:\n"
                             + "\n\n".join(mismatches))

    # The program must really have run on the NPU (not silently everything on CPU).
    assert result["npu_models_run"] and result["npu_models_run"] > 0, \
        f"the NPU ran no compiled model (models_run delta {result['npu_models_run']})"

    if result.get("compile_stats_error"):
        err = result["compile_stats_error"]
        raise AssertionError(f"npu_device.compile_stats() raised {err['type']}: "
                             f"{err['message']}\n{err['traceback']}")
    if not result["compile_stats_available"]:
        notes.append("npu_device.compile_stats() does not exist yet: compile/fallback bounds "
                     "not checked")
        return notes
    delta = result["compile_stats"]["delta"]
    missing = [k for k in STAT_KEYS if k not in result["compile_stats"]["after"]]
    assert not missing, f"compile_stats() lacks keys {missing}: {result['compile_stats']}"
    max_fallbacks = getattr(module, "MAX_FALLBACKS", 0)
    assert delta["fallbacks"] <= max_fallbacks, \
        (f"{delta['fallbacks']} cluster compile(s) failed and ran on CPU instead "
         f"(allowed {max_fallbacks}): {delta}")
    assert delta["compiles"] <= module.MAX_COMPILES, \
        f"{delta['compiles']} compiles, more than the bound {module.MAX_COMPILES}: {delta}"
    max_signatures = getattr(module, "MAX_SIGNATURES_PER_CLUSTER", None)
    seen = result["compile_stats"]["after"].get("max_signatures_per_cluster")
    if max_signatures is not None and seen is None:
        notes.append("compile_stats() has no max_signatures_per_cluster: per-cluster "
                     "signature bound not checked")
    elif max_signatures is not None:
        assert seen <= max_signatures, \
            (f"a cluster compiled {seen} input signatures, more than the {max_signatures} "
             f"distinct shapes this program feeds (recompiling per step or per value?): "
             f"{result['compile_stats']['after']}")
    return notes


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("programs:", " ".join(program_names()))
        return 0
    name, flags = argv[0], set(argv[1:])
    result = run_program(name, cpu_only="--cpu-only" in flags)
    if "--compare" in flags:
        for note in compare(name, result):
            print("note:", note)
        print(f"{name}: NPU matches CPU", result["seconds"], result["compile_stats"])
        return 0
    print(RESULT_MARKER + json.dumps(result), flush=True)
    if result["cpu_error"]:
        print(result["cpu_error"]["traceback"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
