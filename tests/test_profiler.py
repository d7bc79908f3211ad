"""Profiling (docs/debugging.md): TensorFlow's profiler records an NPU plane through the
plugin's TF_InitProfiler, read back with TF's own XPlane proto; misuse of the profiler C API
cannot abort the process; options enable_profiling/profiling_dir write a Chrome trace.

Each program runs in a fresh interpreter with a timeout."""
import glob
import json
import os
import subprocess
import sys
import textwrap

TIMEOUT = 300

NETWORK = '''
import numpy as np
import npu_device
import tensorflow as tf

w = tf.Variable(np.random.default_rng(0).standard_normal((3, 3, 3, 8)).astype(np.float32))
d = tf.Variable(np.random.default_rng(1).standard_normal((512, 4)).astype(np.float32))


@tf.function
def f(x):
    y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
    return tf.nn.softmax(tf.reshape(y, [-1, 512]) @ d)


x = np.random.default_rng(2).standard_normal((2, 8, 8, 3)).astype(np.float32)
'''


def run(code, tmp_path, env=None):
    full = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    r = subprocess.run([sys.executable, "-c", NETWORK + textwrap.dedent(code)], env=full,
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def read_space(logdir):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    with open(path, "rb") as f:
        return xplane_pb2.XSpace.FromString(f.read())


def events(plane, line_prefix):
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = []
    for line in plane.lines:
        if not line.name.startswith(line_prefix):
            continue
        for e in line.events:
            md = plane.event_metadata[e.metadata_id]
            stats = {stat_names[s.metadata_id]: s.str_value or s.uint64_value for s in e.stats}
            start = line.timestamp_ns * 1000 + e.offset_ps
            out.append(dict(name=md.name, start_ps=start, end_ps=start + e.duration_ps, **stats))
    return out


def test_tf_profiler_writes_an_npu_plane_with_every_model_run_and_kernel(tmp_path):
    logdir, idle = tmp_path / "logdir", tmp_path / "idle"
    r = run(f'''
        import json
        f(x)                                   # compiles outside the session
        tf.profiler.experimental.start({str(logdir)!r})
        f(x)
        f(x)
        tf.profiler.experimental.stop()
        f(x)                                   # after stop: not recorded anywhere
        tf.profiler.experimental.start({str(idle)!r})
        with tf.device("/CPU:0"):
            tf.constant(1.0) + 1.0
        tf.profiler.experimental.stop()
        graph_ops = [op.name for op in f.get_concrete_function(x).graph.get_operations()]
        print("OPS=" + json.dumps(graph_ops))
    ''', tmp_path)
    graph_ops = json.loads(r.stdout.split("OPS=")[1])
    space = read_space(str(logdir))
    (plane,) = [p for p in space.planes if p.name == "/device:CUSTOM:NPU:0"]
    plane_stats = {plane.stat_metadata[s.metadata_id].name: s.str_value or s.uint64_value
                   for s in plane.stats}
    assert plane_stats["device_type"] == "NPU"

    models = events(plane, "Models")
    assert [m["step"] for m in models] == [1, 2]          # the two runs inside the session
    assert len({m["model_uid"] for m in models}) == 1
    kernels = events(plane, "Kernels")
    assert len(kernels) % 2 == 0 and kernels
    per_run = len(kernels) // 2
    assert [k["step"] for k in kernels] == [1] * per_run + [2] * per_run
    names = {k["name"] for k in kernels}
    assert "Softmax" in names and "TransData" in {k["kernel"] for k in kernels}
    for k in kernels:
        assert k["tf_op"] == f"{k['name']}:{k['kernel']}"
        assert k["bytes_accessed"] > 0 and k["end_ps"] > k["start_ps"]
        # A kernel is named after the TF node it came from (plus what the engine made of it).
        assert k["name"].split("/")[0] in {op.split("/")[0] for op in graph_ops} | {"_arg_0",
                                                                                   "_arg_1",
                                                                                   "_arg_2"}
        run_of = models[k["step"] - 1]
        assert run_of["start_ps"] <= k["start_ps"] and k["end_ps"] <= run_of["end_ps"]

    idle_space = read_space(str(idle))
    assert not [p for p in idle_space.planes if "NPU" in p.name]


def test_profiler_c_api_misuse_returns_errors_instead_of_aborting(tmp_path):
    r = run('''
        import ctypes, os
        from ctypes import POINTER, CFUNCTYPE, Structure, c_size_t, c_void_p, c_char_p, c_int32, c_uint8
        from npu_device import compiler_bridge
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        class TP_Profiler(Structure):
            _fields_ = [("struct_size", c_size_t), ("ext", c_void_p), ("device_type", c_char_p)]
        Fn = CFUNCTYPE(None, POINTER(TP_Profiler), c_void_p)
        Collect = CFUNCTYPE(None, POINTER(TP_Profiler), POINTER(c_uint8), POINTER(c_size_t), c_void_p)
        class TP_ProfilerFns(Structure):
            _fields_ = [("struct_size", c_size_t), ("ext", c_void_p), ("start", Fn), ("stop", Fn),
                        ("collect_data_xspace", Collect)]
        Destroy = CFUNCTYPE(None, c_void_p)
        class Params(Structure):
            _fields_ = [("struct_size", c_size_t), ("ext", c_void_p), ("major_version", c_int32),
                        ("minor_version", c_int32), ("patch_version", c_int32),
                        ("profiler", POINTER(TP_Profiler)), ("profiler_fns", POINTER(TP_ProfilerFns)),
                        ("destroy_profiler", Destroy), ("destroy_profiler_fns", Destroy)]

        tfw = ctypes.CDLL(os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2"))
        tfw.TF_NewStatus.restype = c_void_p
        tfw.TF_GetCode.argtypes = [c_void_p]
        tfw.TF_Message.argtypes = [c_void_p]
        tfw.TF_Message.restype = c_char_p
        plugin = compiler_bridge._plugin()
        plugin.TF_InitProfiler.argtypes = [c_void_p, c_void_p]

        plugin.TF_InitProfiler(None, None)                   # null arguments: nothing happens
        profiler, fns, params = TP_Profiler(), TP_ProfilerFns(), Params()
        params.profiler, params.profiler_fns = ctypes.pointer(profiler), ctypes.pointer(fns)
        status = tfw.TF_NewStatus()
        plugin.TF_InitProfiler(ctypes.byref(params), status)
        assert tfw.TF_GetCode(status) == 0
        assert params.struct_size and profiler.struct_size and fns.struct_size
        assert profiler.device_type == b"NPU"
        params.destroy_profiler(None)                         # TF calls them at once: no-ops
        params.destroy_profiler_fns(None)

        def code(call, *args):
            call(*args, status)
            return tfw.TF_GetCode(status)
        p = ctypes.pointer(profiler)
        size = c_size_t(0)
        assert code(fns.collect_data_xspace, p, None, None) == 3      # null size: INVALID_ARGUMENT
        assert code(fns.start, None) == 3                             # null profiler
        assert code(fns.stop, p) == 0                                 # stop before start: fine
        assert code(fns.start, p) == 0
        assert code(fns.start, p) == 9                                # twice: FAILED_PRECONDITION
        assert code(fns.collect_data_xspace, p, None, ctypes.byref(size)) == 9   # before stop
        f(x)
        assert code(fns.stop, p) == 0
        assert code(fns.collect_data_xspace, p, None, ctypes.byref(size)) == 0
        assert size.value > 0
        small = c_size_t(size.value - 1)
        buf = (c_uint8 * size.value)()
        assert code(fns.collect_data_xspace, p, buf, ctypes.byref(small)) == 3   # buffer too small
        assert code(fns.collect_data_xspace, p, buf, ctypes.byref(size)) == 0
        space = xplane_pb2.XSpace.FromString(bytes(buf))
        assert [pl.name for pl in space.planes] == ["/device:CUSTOM:NPU:0"]
        again = c_size_t(0)
        assert code(fns.collect_data_xspace, p, None, ctypes.byref(again)) == 0 and again.value == 0
        print("OK")
    ''', tmp_path)
    assert r.stdout.strip().endswith("OK")


def test_enable_profiling_writes_a_chrome_trace(tmp_path):
    prof, other = tmp_path / "prof", tmp_path / "other"
    r = run(f'''
        import json
        from npu_device import observability
        for _ in range(3):
            f(x)
        path = observability.profiling_file()
        observability.flush_profiling()
        with open(path) as fh:
            live = json.load(fh)                              # valid while the program runs
        print("LIVE=" + str(sum(e.get("cat") == "model" for e in live["traceEvents"])))
        npu_device.set_npu_config(profiling_dir={str(other)!r})   # the first file is completed
        f(x)
        npu_device.set_npu_config(enable_profiling=False)
        f(x)                                                  # not recorded
    ''', tmp_path, env={"NPU_ENABLE_PROFILING": "1", "NPU_PROFILING_DIR": str(prof)})
    assert r.stdout.split("LIVE=")[1].split()[0] == "3"
    (path,) = glob.glob(str(prof / "npu_profile_*.json"))
    with open(path) as fh:
        trace = json.load(fh)
    assert trace["otherData"]["producer"] == "npu_device"
    evs = trace["traceEvents"]
    names = {(e["name"], e["args"]["name"]) for e in evs if e["ph"] == "M"}
    assert ("process_name", "NPU:0") in names and ("thread_name", "stream 0") in names
    models = [e for e in evs if e.get("cat") == "model"]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    assert [m["args"]["step"] for m in models] == [0, 1, 2]
    per_run = [sum(k["args"]["step"] == step for k in kernels) for step in range(3)]
    # the first run launches every kernel; later ones skip the weight conversions the model
    # keeps (CACHED values, tests/test_weight_cache.py)
    assert per_run[0] == models[0]["args"]["kernels"] and per_run[1] == per_run[2] <= per_run[0]
    for k in kernels:
        assert k["ph"] == "X" and k["dur"] >= 0 and k["args"]["bytes"] > 0
        assert {"kernel", "node", "model", "step", "index"} <= set(k["args"])
        run_of = models[k["args"]["step"]]
        assert run_of["ts"] <= k["ts"] and k["ts"] + k["dur"] <= run_of["ts"] + run_of["dur"] + 1e-3
    assert "Softmax" in {k["name"] for k in kernels}
    (second,) = glob.glob(str(other / "npu_profile_*.json"))
    with open(second) as fh:
        later = json.load(fh)["traceEvents"]
    assert [e["args"]["step"] for e in later if e.get("cat") == "model"] == [3]

