"""Structure-aware fuzzing of the compiled-model loader and of .om serving containers.

Seeds are real compiled models (single ops and an NC1HWC0 convolution cluster, from the graph
engine). Hypothesis mutates them field by field through the Python reader/writer
(graph_engine.compiler.model_format): a value's dims, nbytes, kind, placement, format or dtype;
a kernel's name, operand ids or attributes; the model's input/output lists, arena size or
constant blob; or raw payload bytes. The writer recomputes the checksum, so every mutation
reaches the C++ parser and the kernels' load-time validation instead of stopping at the crc.
Containers get mutated manifests (types, shapes, dtypes, batch sizes) around mutated models.

The property: a worker process loads each mutant (npu_device._C.load_model, or CannSession for
a container) and, when it loads, runs it once on inputs of its declared shapes. It may refuse
(ValueError / ContainerError naming the problem) or fail the run (RuntimeError / ValueError),
but it must never crash, hang, or raise anything else.
"""
import os
import struct
import zlib
import tempfile

import numpy as np
from hypothesis import strategies as st

_INT_EDGES = (0, 1, -1, 2, 3, 7, 16, 64, 2**31 - 1, 2**31, 2**32, 2**62, -2**63)
_MAX_RUN_BYTES = 64 << 20      # inputs larger than this are not allocated: load only


# --- seeds --------------------------------------------------------------------------------

def _op_model(op_type, inputs, **attrs):
    from graph_engine.compiler.compile import compile_model
    from graph_engine.compiler.devtools import op_request
    nd, _ = op_request(op_type, inputs, **attrs)
    return compile_model(nd.SerializeToString())


def _cluster_model(fn, args):
    from graph_engine.compiler.compile import compile_model
    from graph_engine.compiler.devtools import cluster_request, single_cluster
    node, inputs, _ = single_cluster(fn, args)
    return compile_model(cluster_request(node, inputs).SerializeToString())


def seed_models():
    """name -> compiled model bytes: kernels with attrs, index inputs, layouts and constants."""
    import tensorflow as tf
    r = np.random.default_rng(0)
    f32 = lambda *s: r.standard_normal(s).astype(np.float32)      # noqa: E731

    def conv_block(x):
        w = tf.constant(f32(3, 3, 16, 32))
        y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + tf.constant(f32(32)))
        return tf.reduce_mean(tf.nn.max_pool2d(y, 2, 2, "VALID"), axis=[1, 2])

    def dense(x):
        return tf.nn.softmax(tf.matmul(x, tf.constant(f32(24, 10))) + 1.0)

    def batch_norm_stats(x):     # NpuMoments, NpuBatchNormGradSums (fuse_batch_norm_training)
        mean, var = tf.nn.moments(x, [0, 1, 2], keepdims=True)
        dy = tf.sin(x)
        return (mean, var, tf.reduce_sum(dy, [0, 1, 2], keepdims=True),
                tf.reduce_sum(dy * x, [0, 1, 2], keepdims=True))

    return {
        "conv_nc1hwc0": _cluster_model(conv_block, [f32(2, 8, 8, 16)]),
        "dense_softmax": _cluster_model(dense, [f32(5, 24)]),
        "batch_norm_stats": _cluster_model(batch_norm_stats, [f32(2, 5, 5, 12)]),
        "gather": _op_model("GatherV2", {"params": f32(6, 4), "indices": np.array([0, 5, 2], np.int32),
                                         "axis": np.int32(0)}),
        "concat": _op_model("ConcatV2", {"values": [f32(2, 3), f32(4, 3)], "axis": np.int32(0)}),
        "transpose": _op_model("Transpose", {"x": f32(2, 3, 4), "perm": np.array([2, 0, 1], np.int32)}),
        "strided_slice": _op_model("StridedSlice", {"input": f32(5, 6), "begin": np.array([1, 0], np.int32),
                                                    "end": np.array([4, 6], np.int32),
                                                    "strides": np.array([2, 1], np.int32)}),
        "sum": _op_model("Sum", {"input": f32(3, 5, 7), "axis": np.array([1], np.int32)}),
        "resize": _op_model("ResizeBilinear", {"images": f32(1, 4, 5, 3), "size": np.array([7, 3], np.int32)}),
    }


# --- mutations ----------------------------------------------------------------------------

def _int(draw, old=None):
    choices = list(_INT_EDGES) + ([old + 1, old - 1, old * 2] if isinstance(old, int) else [])
    return draw(st.sampled_from(choices))


def _mutate_value(draw, model):
    v = model.values[draw(st.integers(0, len(model.values) - 1))]
    field = draw(st.sampled_from(("dims", "nbytes", "kind", "where", "format", "dtype")))
    if field == "dims":
        dims = list(v.dims)
        if dims and draw(st.booleans()):
            i = draw(st.integers(0, len(dims) - 1))
            dims[i] = _int(draw, dims[i])
        else:
            dims = dims[:-1] if dims and draw(st.booleans()) else dims + [_int(draw)]
        v.dims = tuple(dims)
    elif field == "dtype":
        v.dtype = draw(st.sampled_from((1, 2, 3, 9, 10, 14, 19, 23, 0, 99, 2**32 - 1)))
    elif field in ("kind", "format"):
        setattr(v, field, draw(st.integers(0, 9)))
    else:
        setattr(v, field, max(_int(draw, getattr(v, field)), 0))          # u64 fields


def _mutate(draw, data):
    from graph_engine.compiler import model_format as mf
    if draw(st.integers(0, 7)) == 0:                  # raw bytes, checksum fixed
        payload = bytearray(data[24:])
        for _ in range(draw(st.integers(1, 8))):
            payload[draw(st.integers(0, len(payload) - 1))] = draw(st.integers(0, 255))
        return data[:12] + struct.pack("<IQ", zlib.crc32(payload) & 0xFFFFFFFF, len(payload)) + bytes(payload)
    model = mf.deserialize(data)
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(("value", "value", "kernel", "kernel", "model")))
        if what == "value" and model.values:
            _mutate_value(draw, model)
        elif what == "kernel" and model.kernels:
            k = model.kernels[draw(st.integers(0, len(model.kernels) - 1))]
            part = draw(st.sampled_from(("name", "inputs", "outputs", "attr", "attr")))
            if part == "name":
                k.kernel = draw(st.sampled_from([other.kernel for other in model.kernels]
                                                + ["MatMul", "TransData", "Conv2D", "NoSuchKernel"]))
            elif part in ("inputs", "outputs"):
                ids = list(getattr(k, part))
                n = len(model.values)
                choice = draw(st.sampled_from(("replace", "drop", "add")))
                if choice == "replace" and ids:
                    ids[draw(st.integers(0, len(ids) - 1))] = draw(st.sampled_from(
                        (0, n - 1, n, n + 5, 2**32 - 1)))
                elif choice == "drop" and ids:
                    ids.pop()
                else:
                    ids.append(draw(st.integers(0, n)))
                setattr(k, part, [i % 2**32 for i in ids])
            elif k.attrs:
                name = draw(st.sampled_from(sorted(k.attrs)))
                old = k.attrs[name]
                if isinstance(old, bool):
                    k.attrs[name] = not old
                elif isinstance(old, int):
                    k.attrs[name] = _int(draw, old)
                elif isinstance(old, float):
                    k.attrs[name] = draw(st.sampled_from((0.0, -1.0, float("nan"), float("inf"), 1e300)))
                elif isinstance(old, str):
                    k.attrs[name] = draw(st.sampled_from(("", "NCHW", "SAME", "VALID", "x" * 300)))
                elif isinstance(old, list) and old and all(isinstance(x, int) for x in old):
                    new = list(old)
                    choice = draw(st.sampled_from(("edge", "drop", "add")))
                    if choice == "edge":
                        new[draw(st.integers(0, len(new) - 1))] = _int(draw)
                    elif choice == "drop":
                        new.pop()
                    else:
                        new.append(_int(draw))
                    k.attrs[name] = new
                else:
                    del k.attrs[name]
        else:
            field = draw(st.sampled_from(("arena", "blob", "inputs", "outputs")))
            if field == "arena":
                model.arena_bytes = max(_int(draw, model.arena_bytes), 0)
            elif field == "blob":
                cut = draw(st.integers(0, len(model.const_blob)))
                model.const_blob = model.const_blob[:cut] if draw(st.booleans()) else \
                    model.const_blob + bytes(draw(st.integers(1, 128)))
            else:
                ids = list(getattr(model, field))
                if ids and draw(st.booleans()):
                    ids.pop()
                else:
                    ids.append(draw(st.integers(0, len(model.values))))
                setattr(model, field, ids)
    return mf.serialize(model)


@st.composite
def mutated_model(draw, seeds):
    name = draw(st.sampled_from(sorted(seeds)))
    return name, _mutate(draw, seeds[name])


@st.composite
def mutated_container(draw, seeds):
    """(name, container bytes): a manifest (perhaps malformed) around perhaps-mutated models."""
    from npu_device.serving import container
    name = draw(st.sampled_from(sorted(seeds)))
    data = seeds[name] if draw(st.booleans()) else _mutate(draw, seeds[name])
    manifest = {"name": name, "dynamic_batch": False,
                "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 8, 8, 16]}],
                "outputs": [{"name": "y", "dtype": "float32", "shape": [2, 32]}]}
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(("top", "inputs", "outputs")))
        tensors = manifest.get(where)
        target = manifest if where == "top" else tensors[0] if (
            isinstance(tensors, list) and tensors and isinstance(tensors[0], dict)) else manifest
        key = draw(st.sampled_from(sorted(target) + ["extra"]))
        target[key] = draw(st.sampled_from((None, True, 0, -1, 1.5, "", "float32", "int4",
                                            "bfloat16", [], [-1, 3], [2**40], [-2], {}, ["x"])))
    models = {0: data}
    if manifest.get("dynamic_batch") is True:
        models = {b: data for b in draw(st.sets(st.sampled_from((1, 2, 8, 2**31)), min_size=1))}
    return name, container.pack(manifest, models)


# --- in the worker ------------------------------------------------------------------------

def _inputs(descs):
    from graph_engine.ops.dtypes import numpy_dtype
    arrays = []
    for d in descs:
        dtype = np.dtype(numpy_dtype(d.dtype))
        shape = tuple(d.shape)
        if any(s < 0 for s in shape) or int(np.prod(shape, dtype=object)) * dtype.itemsize > _MAX_RUN_BYTES:
            return None
        arrays.append(np.ones(shape, dtype))
    return arrays


def load_and_run(payload):
    """("model" | "container", bytes) -> what happened, as a short string. Anything but the
    documented refusals and run errors is returned as "unexpected: ...", which fails the
    property (a crash or hang fails it by killing the worker)."""
    kind, data = payload
    from npu_device import _C
    from npu_device.serving import container
    from npu_device.serving.session import CannSession
    try:
        if kind == "model":
            model = _C.load_model(data, 0)
            descs = model.inputs
        else:
            with tempfile.NamedTemporaryFile(suffix=".om", delete=False) as f:
                f.write(data)
            try:
                session = CannSession(f.name)
            finally:
                os.unlink(f.name)
            model, descs = session, None
    except (ValueError, container.ContainerError) as e:
        return f"refused: {str(e)[:120]}"
    except Exception as e:                                          # noqa: BLE001
        return f"unexpected: load raised {type(e).__name__}: {e}"
    try:
        if kind == "model":
            arrays = _inputs(descs)
            if arrays is None:
                return "loaded (inputs too large to run)"
            model.run(arrays)
        else:
            feeds = {}
            for info in model.inputs:
                shape = tuple(1 if s == -1 else s for s in info.shape)
                if int(np.prod(shape, dtype=object)) * np.dtype(info.dtype).itemsize > _MAX_RUN_BYTES:
                    return "loaded (inputs too large to run)"
                feeds[info.name] = np.ones(shape, info.dtype)
            model.run(feeds)
            model.close()
        return "ran"
    except (ValueError, RuntimeError, MemoryError) as e:
        return f"run failed: {type(e).__name__}: {str(e)[:120]}"
    except Exception as e:                                          # noqa: BLE001
        return f"unexpected: run raised {type(e).__name__}: {e}"


def worker():
    from tools.fuzz.worker import Worker
    # hbm_size bounds what a mutated arena may allocate on the simulated device; glibc's heap
    # checks make a corruption abort at the mutant that caused it, not at a later one
    env = {"NPU_HBM_SIZE": "1G", "NPU_OP_COMPILER_CACHE_MODE": "disable",
           "MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165"}
    return Worker("tools.fuzz.models:load_and_run", env=env)


def check(workers, payload, timeout=60):
    """The worker's outcome for one (kind, bytes) payload; a crash or unexpected error also
    saves the input to a temporary file named in the outcome."""
    from tools.fuzz.worker import Crash
    try:
        outcome = workers.call(payload, timeout)
    except Crash as e:
        outcome = f"crash: {e}"
    if outcome.startswith(("crash", "unexpected")):        # keep the input for the bug report
        fd, path = tempfile.mkstemp(prefix=f"npu-fuzz-{payload[0]}-", suffix=".om")
        with os.fdopen(fd, "wb") as f:
            f.write(payload[1])
        outcome += f" (input saved to {path})"
    return outcome


def fuzz(w, seeds, examples, seed=None):
    """`examples` mutated models and as many containers, loaded and run in worker `w`;
    AssertionError on the first that breaks the property."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    @settings(max_examples=examples, derandomize=seed is None, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
              print_blob=False)
    @given(st.one_of(mutated_model(seeds).map(lambda m: ("model",) + m),
                     mutated_container(seeds).map(lambda c: ("container",) + c)))
    def prop(case):
        kind, name, data = case
        outcome = check(w, (kind, data))
        assert not outcome.startswith(("crash", "unexpected")), \
            f"{kind} mutated from {name!r}: {outcome}"

    (prop if seed is None else seeded(seed)(prop))()


def run(examples, seed, report=print):
    """The long run (python -m tools.fuzz models): returns the number of failures (0 or 1:
    hypothesis stops at the first)."""
    seeds = seed_models()
    with worker() as w:
        try:
            fuzz(w, seeds, examples, seed=seed)
        except Exception as e:                    # noqa: BLE001  (AssertionError, or a group)
            report(f"FAIL {e}")
            return 1
    report(f"{examples} mutated models and containers: no crash")
    return 0
