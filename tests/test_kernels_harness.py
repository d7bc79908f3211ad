"""Shared helpers of the kernel and executor tests (test_kernels_*.py, test_executor.py).

They build compiled models by hand with graph_engine.compiler.model_format, run them through
the native executor (npu_device._C) and compare with TensorFlow on the CPU.

The bridge module is loaded straight from its file when npu_device has not been imported, so
these tests exercise the runtime without loading the TF plugin.
"""
import glob
import importlib.util
import os
import sys

import ml_dtypes
import numpy as np
import pytest

from graph_engine.ops import dtypes as gdt
from graph_engine.compiler import model_format as mf


def load_bridge():
    """npu_device._C, without running npu_device/__init__ (which loads the TF plugin)."""
    if "npu_device._C" in sys.modules:
        return sys.modules["npu_device._C"]
    spec = importlib.util.find_spec("npu_device")
    paths = [p for d in spec.submodule_search_locations for p in glob.glob(os.path.join(d, "_C*.so"))]
    if not paths:
        pytest.skip("npu_device._C is not built (cmake --build <dir> --target _C)")
    bridge_spec = importlib.util.spec_from_file_location("npu_device._C", paths[0])
    module = importlib.util.module_from_spec(bridge_spec)
    sys.modules["npu_device._C"] = module   # one copy per process: pybind11 types register once
    bridge_spec.loader.exec_module(module)
    return module


C = load_bridge()

FLOAT_TYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


def dt_enum(dtype):
    return gdt.from_numpy(np.dtype(dtype))


class GraphBuilder:
    """Builds a compiled model value by value: inputs, constants, arena values and outputs."""

    def __init__(self, name="test"):
        self.name = name
        self.values, self.kernels, self.inputs, self.outputs = [], [], [], []
        self.blob = bytearray()
        self.arena = 0

    def _value(self, dtype, shape, kind, where, nbytes=None):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if nbytes is None else nbytes
        self.values.append(mf.Value(dt_enum(dtype), tuple(int(d) for d in shape), nbytes, kind, where))
        return len(self.values) - 1

    def input(self, dtype, shape):
        vid = self._value(dtype, shape, mf.Kind.INPUT, len(self.inputs))
        self.inputs.append(vid)
        return vid

    def const(self, array):
        array = np.ascontiguousarray(array)
        self.blob += b"\0" * (-len(self.blob) % mf.CONST_ALIGNMENT)
        vid = self._value(array.dtype, array.shape, mf.Kind.CONST, len(self.blob))
        self.blob += array.tobytes()
        return vid

    def arena_value(self, dtype, shape):
        self.arena += -self.arena % 64
        vid = self._value(dtype, shape, mf.Kind.ARENA, self.arena)
        self.arena += self.values[vid].nbytes
        return vid

    def output(self, dtype, shape):
        vid = self._value(dtype, shape, mf.Kind.OUTPUT, len(self.outputs))
        self.outputs.append(vid)
        return vid

    def add_output(self, vid):
        """Makes an existing (arena, input or constant) value a graph output: the executor copies it."""
        self.outputs.append(vid)

    def kernel(self, kernel, inputs, outputs, node=None, **attrs):
        self.kernels.append(mf.Kernel(kernel, node or f"{kernel}_{len(self.kernels)}",
                                      list(inputs), list(outputs), attrs))

    def model(self):
        return mf.Model(name=self.name, values=self.values, kernels=self.kernels,
                        inputs=self.inputs, outputs=self.outputs, arena_bytes=self.arena,
                        const_blob=bytes(self.blob), metadata='{"test": true}')

    def serialize(self):
        return mf.serialize(self.model())

    def load(self):
        return C.load_model(self.serialize())


def run_kernel(kernel, inputs, outputs, attrs=None, const_inputs=(), via_arena=False):
    """Runs one kernel. inputs: numpy arrays (those at `const_inputs` positions become model
    constants); outputs: (dtype, shape) pairs; via_arena: the kernel writes arena values that
    the executor copies out. Returns the output arrays."""
    g = GraphBuilder(kernel)
    fed, ins = [], []
    for i, x in enumerate(inputs):
        x = np.asarray(x)
        if i in const_inputs:
            ins.append(g.const(x))
        else:
            ins.append(g.input(x.dtype, x.shape))
            fed.append(x)
    if via_arena:
        outs = [g.arena_value(dt, shape) for dt, shape in outputs]
        for vid in outs:
            g.add_output(vid)
    else:
        outs = [g.output(dt, shape) for dt, shape in outputs]
    g.kernel(kernel, ins, outs, **(attrs or {}))
    return g.load().run(fed)


def run1(kernel, inputs, out_dtype, out_shape, **attrs):
    """Runs a one-output kernel."""
    return run_kernel(kernel, inputs, [(out_dtype, out_shape)], attrs)[0]


def tf_cpu(op, *args, **kwargs):
    """Runs tf.raw_ops.<op> on the CPU and returns numpy results."""
    import tensorflow as tf
    with tf.device("/CPU:0"):
        result = getattr(tf.raw_ops, op)(*args, **kwargs)
    if isinstance(result, (list, tuple)):
        return [np.asarray(r) for r in result]
    return np.asarray(result)


def storage_eps(dtype):
    """Distance from 1 to the next representable value of a float storage type."""
    return float(ml_dtypes.finfo(dtype).eps)


def to_f32(x):
    return np.asarray(x).astype(np.float32)


def assert_float_close(actual, expected, dtype, grad=False):
    """float32: rtol 1e-5 (1e-4 for gradient kernels), atol 1e-6 scaled to the data.

    float16/bfloat16 storage: `expected` is the float32 result on the same (already rounded)
    inputs. The kernel computes in float32 and rounds once on store, so the error is half an
    ULP of the storage type plus float32 evaluation-order noise: one ULP (rtol = eps of the
    storage type) bounds it. atol covers results that cancel to nearly zero, relative to the
    largest magnitude in the result."""
    actual, expected = to_f32(actual), to_f32(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = float(np.max(np.abs(expected))) if expected.size else 1.0
    if np.dtype(dtype) == np.float32:
        rtol = 1e-4 if grad else 1e-5
        atol = 1e-6 * max(scale, 1.0) * (10 if grad else 1)
    else:
        rtol = storage_eps(dtype)
        atol = storage_eps(dtype) * 1e-2 * max(scale, 1e-3)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def random(shape, dtype=np.float32, low=-2.0, high=2.0, seed=0):
    """Deterministic random data of `dtype` (rounded to it for float16/bfloat16)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(np.float32).astype(dtype)


def test_builder_round_trips_through_the_python_reader():
    g = GraphBuilder("roundtrip")
    x = g.input(np.float32, (2, 3))
    c = g.const(np.arange(3, dtype=np.float32))
    t = g.arena_value(np.float32, (2, 3))
    y = g.output(np.float32, (2, 3))
    g.kernel("AddV2", [x, c], [t])
    g.kernel("Relu", [t], [y])
    m = mf.deserialize(g.serialize())
    assert [k.kernel for k in m.kernels] == ["AddV2", "Relu"]
    np.testing.assert_array_equal(m.const_array(c), np.arange(3, dtype=np.float32))
    loaded = C.load_model(g.serialize())
    assert loaded.kernel_names == ["AddV2", "Relu"]
    xv = random((2, 3))
    np.testing.assert_array_equal(loaded.run([xv])[0], np.maximum(xv + np.arange(3, dtype=np.float32), 0))
