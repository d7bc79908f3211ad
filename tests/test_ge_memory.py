"""Memory planning (passes/plan_memory.py with lower.py's aliases) on small hand-built programs,
on random programs (no two buffers live at once overlap; lower bound <= arena <= no reuse), on
compiled tf.functions (results unchanged with in-place reuse and aliasing), and the sim
allocator's block cache (runtime memory_pool) through the runtime's Python bindings."""
import itertools
import json
import random
import sys

import numpy as np
import pytest
import tensorflow as tf

from graph_engine.ops import dtypes as dt
from graph_engine.compiler import model_format as mf
from graph_engine.compiler import reference_executor
from graph_engine.compiler.node import Node
from graph_engine.compiler.pass_manager import Compilation
from graph_engine.compiler.passes import plan_memory
from graph_engine.compiler.passes.lower import Kernel, Program

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_runtime import run_c  # noqa: E402

F32 = dt.DT_FLOAT


def value(name, shape, dtype=F32):
    v = Node(name, "X", output_dtypes=[dtype]).outputs[0]
    v.shape = tuple(shape)
    return v


class Prog:
    """A program built kernel by kernel: `k("Relu", [x], [4, 4])` returns the output value."""

    def __init__(self, *input_shapes):
        self.inputs = [value(f"in{i}", s) for i, s in enumerate(input_shapes)]
        self.kernels, self.aliases, self.outputs = [], {}, []

    def k(self, op, ins, shape, dtype=F32):
        out = value(f"v{len(self.kernels)}", shape, dtype)
        self.kernels.append(Kernel(op, out.node.name, list(ins), [out], {}))
        return out

    def alias(self, src, shape):
        out = value(f"a{len(self.aliases)}", shape, src.dtype)
        self.aliases[out] = src
        return out

    def plan(self):
        p = Program(inputs=self.inputs, outputs=self.outputs,
                    input_names=[v.node.name for v in self.inputs],
                    output_names=[f"out{i}" for i in range(len(self.outputs))],
                    kernels=self.kernels, constants=[], aliases=self.aliases)
        c = Compilation(name="t", graph=None, input_shapes=[])
        c.program = p
        plan_memory.run(c)
        return c.plan


def test_lifetimes_follow_the_kernel_order():
    p = Prog([64])
    a = p.k("MatMul", p.inputs, [64])        # 0
    b = p.k("MatMul", [a], [64])             # 1
    c = p.k("MatMul", [b, a], [64])          # 2: a lives to here
    p.outputs = [p.k("MatMul", [c], [64])]   # 3 writes the caller's buffer
    plan = p.plan()
    assert plan.lifetime == {a: (0, 2), b: (1, 2), c: (2, 3)}
    assert plan.kind[p.outputs[0]] == mf.Kind.OUTPUT and plan.where[p.outputs[0]] == 0
    assert plan.lower_bound_bytes == 3 * 256 == plan.arena_bytes
    assert plan.no_reuse_bytes == 3 * 256


def test_the_smallest_strategy_wins():
    # Sizes and lifetimes where the orders disagree; the plan keeps the smallest arena.
    p = Prog([16])
    x = p.k("MatMul", p.inputs, [16])
    big = p.k("MatMul", [x], [1024])
    y = p.k("MatMul", [big], [256])
    z = p.k("MatMul", [x, y], [512])
    w = p.k("MatMul", [z], [1024])
    p.outputs = [p.k("MatMul", [w, y], [16])]
    plan = p.plan()
    size = {v: plan_memory.align(plan_memory.nbytes(v)) for v in plan.lifetime}
    ends = {name: max(o + size[v] for v, o in plan_memory.best_fit(
        plan.lifetime, size, make(plan.lifetime, size)).items())
        for name, make in plan_memory.ORDERS.items()}
    assert len(ends) >= 2
    assert plan.arena_bytes == min(ends.values()) and ends[plan.strategy] == plan.arena_bytes
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.no_reuse_bytes


def test_in_place_when_the_input_dies_there():
    p = Prog([32, 32])
    a = p.k("MatMul", p.inputs, [32, 32])
    r = p.k("Relu", [a], [32, 32])           # a dies here: r takes its bytes
    p.outputs = [p.k("MatMul", [r], [32, 32])]
    plan = p.plan()
    assert plan.inplace == 1 and plan.storage[r] is a and plan.where[r] == plan.where[a]
    assert plan.arena_bytes == 4096


def test_no_in_place_while_the_input_is_still_read():
    p = Prog([32, 32])
    a = p.k("MatMul", p.inputs, [32, 32])
    r = p.k("Relu", [a], [32, 32])
    p.outputs = [p.k("MatMul", [r, a], [32, 32])]   # a is read after the Relu
    plan = p.plan()
    assert plan.inplace == 0 and plan.where[r] != plan.where[a]


@pytest.mark.parametrize("case", ["broadcast", "dtype", "not_inplace_op", "graph_input"])
def test_no_in_place_without_equal_storage_or_permission(case):
    p = Prog([8, 8])
    a = p.k("MatMul", p.inputs, [8] if case == "broadcast" else [8, 8])
    if case == "broadcast":
        r = p.k("Add", [a, p.inputs[0]], [8, 8])        # a is smaller than the output
    elif case == "dtype":
        r = p.k("Relu", [a], [8, 8], dt.DT_HALF)         # not the same storage size
    elif case == "not_inplace_op":
        r = p.k("Softmax", [a], [8, 8])                  # a row reduction
    else:
        r = p.k("Relu", [p.inputs[0]], [8, 8])           # the caller's input is read-only
    p.outputs = [p.k("MatMul", [r], [8, 8])]
    assert p.plan().inplace == 0


def test_aliases_share_their_input_bytes_and_keep_it_alive():
    p = Prog([4, 8])
    a = p.k("MatMul", p.inputs, [4, 8])
    flat = p.alias(a, [32])                   # Reshape without a kernel
    b = p.k("MatMul", [a], [4, 8])
    c = p.k("Relu", [b], [4, 8])              # b dies: in place
    p.outputs = [p.k("MatMul", [c, flat], [4, 8])]   # reads the alias last
    plan = p.plan()
    assert plan.aliased == 1 and plan.where[flat] == plan.where[a]
    assert plan.kind[flat] == mf.Kind.ARENA
    assert plan.lifetime[a] == (0, 3)         # the alias's last read counts for a
    assert plan.where[c] == plan.where[b] != plan.where[a]


def _random_program(rng):
    p = Prog([rng.choice([8, 16, 64])])
    vals = list(p.inputs)
    for _ in range(rng.randint(3, 25)):
        ins = rng.sample(vals, min(len(vals), rng.randint(1, 2)))
        shape = ins[0].shape if rng.random() < 0.5 else [rng.choice([4, 16, 64, 100])]
        op = rng.choice(["Relu", "MatMul", "Add"]) if shape == ins[0].shape else "MatMul"
        out = p.k(op, ins, shape)
        if rng.random() < 0.2:
            out = p.alias(out, [int(np.prod(shape))])
        vals.append(out)
    p.outputs = rng.sample(vals[1:], min(2, len(vals) - 1))
    return p


def test_random_programs_never_overlap_live_buffers():
    rng = random.Random(0)
    for _ in range(200):
        plan = _random_program(rng).plan()
        assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.no_reuse_bytes
        spans = [(plan.where[v], plan.where[v] + plan_memory.align(plan_memory.nbytes(v)), f, l)
                 for v, (f, l) in plan.lifetime.items()]
        for (o1, e1, f1, l1), (o2, e2, f2, l2) in itertools.combinations(spans, 2):
            assert not (f1 <= l2 and f2 <= l1 and o1 < e2 and o2 < e1)


# --- compiled graphs: in-place reuse and aliases leave results unchanged --------------------

def _compile(fn, args):
    from test_ge_compile import compile_function
    model, inputs, routes = compile_function(fn, args)
    return model, inputs, routes, json.loads(mf.deserialize(model).metadata)


def test_training_step_plan_is_tight_and_results_unchanged():
    R = np.random.default_rng(0)
    x, w = R.standard_normal((8, 16)).astype(np.float32), R.standard_normal((16, 4)).astype(np.float32)
    m, v = R.standard_normal((16, 4)).astype(np.float32), np.abs(R.standard_normal((16, 4))).astype(np.float32)

    def step(x, w, m, v):
        with tf.GradientTape() as t:
            t.watch(w)
            y = tf.nn.relu(tf.matmul(x, w))
            loss = tf.reduce_mean(tf.square(y - 1.0))
        g = t.gradient(loss, w)
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * tf.square(g)
        return tf.reshape(w - 0.01 * m2 / (tf.sqrt(v2) + 1e-7), [64]), m2, v2, loss

    model, inputs, routes, md = _compile(step, [x, w, m, v])
    assert md["live_bytes_lower_bound"] <= md["arena_bytes"] <= md["no_reuse_bytes"]
    assert md["arena_bytes"] <= 1.05 * md["live_bytes_lower_bound"]
    assert md["memory_strategy"] in plan_memory.ORDERS
    out = reference_executor.run(model, inputs)     # lays values out at their planned offsets
    ref = step(*[tf.constant(a) for a in (x, w, m, v)])
    for i, r in routes.items():
        np.testing.assert_allclose(out[r], ref[i].numpy(), rtol=1e-5, atol=1e-6)


def test_reshape_chain_aliases_without_kernels():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)

    def f(x):
        y = tf.nn.relu(x * 2.0)
        z = tf.expand_dims(tf.reshape(y, [2, 12]), 0)
        return tf.squeeze(z, 0) + 1.0
    model, inputs, routes, md = _compile(f, [x])
    assert not {"Reshape", "ExpandDims", "Squeeze"} & set(md["kernels"])
    assert md["aliased_values"] >= 2
    out = reference_executor.run(model, inputs)
    np.testing.assert_array_equal(out[routes[0]], f(tf.constant(x)).numpy())


# --- the sim allocator's block cache --------------------------------------------------------

def test_allocator_reuses_freed_blocks_and_keeps_stats_exact():
    out = run_c("""
        a = C.malloc(0, 1000)
        C.free(0, a)
        b = C.malloc(0, 1000)                     # the cached block again
        c = C.malloc(0, 1000)                     # a new one: b is live
        print(a == b, c != b)
        print(C.memory_stats(0))
        C.free(0, b); C.free(0, c)
        print(C.memory_stats(0))
        d = C.malloc(0, 4000)                     # too big for the cached 1024-byte blocks
        print(d not in (b, c), C.memory_stats(0)["in_use"])
        try:
            C.free(0, b)                          # cached is not live
        except ValueError as e:
            print("refused")
    """)
    assert out.splitlines() == [
        "True True",
        "{'in_use': 2048, 'peak': 2048, 'limit': 17179869184, 'num_allocs': 2, 'total_allocs': 3, "
        "'cached_bytes': 0, 'variable_bytes': 0, 'variable_limit': 0}",
        "{'in_use': 0, 'peak': 2048, 'limit': 17179869184, 'num_allocs': 0, 'total_allocs': 3, "
        "'cached_bytes': 2048, 'variable_bytes': 0, 'variable_limit': 0}",
        "True 4032",
        "refused",
    ]


def test_allocator_releases_cached_blocks_before_running_out():
    out = run_c("""
        a = C.malloc(0, 600 << 10)
        C.free(0, a)                              # cached: 600K of the 1M device
        b = C.malloc(0, 1 << 20)                  # needs all of it: the cache is released
        print(C.memory_stats(0))
        C.free(0, b)
        try:
            C.malloc(0, (1 << 20) + 1)
        except MemoryError as e:
            print(e)
    """, env={"NPU_HBM_SIZE": "1M"})
    assert out.splitlines() == [
        "{'in_use': 1048576, 'peak': 1048576, 'limit': 1048576, 'num_allocs': 1, 'total_allocs': 2, "
        "'cached_bytes': 0, 'variable_bytes': 0, 'variable_limit': 0}",
        "NPU:0 out of memory: requested 1048577 bytes, 1048576 free of 1048576",
    ]


def test_allocator_reuse_waits_for_queued_stream_work():
    out = run_c("""
        import threading
        import numpy as np
        a = C.malloc(0, 4096)
        src = np.arange(1024, dtype=np.float32)
        C.memcpy_htod(a, src)
        s = C.Stream(0)
        opened = threading.Event()
        s.launch_host_func(opened.wait)
        out = np.zeros_like(src)
        s.memcpy_dtoh_async(out, a)               # queued: still reads a
        C.free(0, a)
        b = C.malloc(0, 4096)                     # must not be a: the copy has not run
        C.memset(b, 0, 4096)
        opened.set()
        s.synchronize()
        print(a != b, bool((out == src).all()))
        C.free(0, b)
        print(C.malloc(0, 4096) in (a, b))        # after the stream ran, blocks come back
    """)
    assert out.splitlines() == ["True True", "True"]
