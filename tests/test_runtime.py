"""The simulated NPU runtime (npurt, sim backend) through its Python bindings npu_device._C:
configuration, memory accounting, copies, streams, events and error reporting."""
import os
import textwrap
import threading

import numpy as np
import pytest

import npu_device
from conftest import run_python
from npu_device import _C

MiB = 1 << 20

# Loads only the native bridge (no package __init__, no TensorFlow): configuration scenarios
# need a fresh runtime and stay fast.
LOAD_C = """
import glob, importlib.machinery, importlib.util, os
_pkg = importlib.util.find_spec("npu_device").submodule_search_locations[0]
_ext = importlib.machinery.ExtensionFileLoader(
    "npu_device._C", glob.glob(os.path.join(_pkg, "_C.*.so"))[0])
C = importlib.util.module_from_spec(importlib.util.spec_from_loader("npu_device._C", _ext))
_ext.exec_module(C)
"""


def run_c(code, env=None):
    env = {"NPU_DEVICE_COUNT": "", "NPU_HBM_SIZE": "", **(env or {})}
    result = run_python(LOAD_C + textwrap.dedent(code), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def rounded(n):
    return (n + 63) // 64 * 64


@pytest.fixture
def buffer():
    """A 4 KiB device buffer, freed afterwards."""
    ptr = _C.malloc(0, 4096)
    yield ptr
    _C.free(0, ptr)


# --- devices and configuration ------------------------------------------------------------

def test_device_info():
    info = _C.device_info(0)
    assert info["name"] == "NPU:0"
    assert info["backend"] == "sim"
    assert info["soc_version"] == "Ascend910B-sim"
    assert info["hbm_bytes"] == _C.get_config()["hbm_bytes"]
    assert info["core_count"] == os.cpu_count()
    with pytest.raises(ValueError, match=r"NPU device 99 does not exist: 1 configured"):
        _C.device_info(99)


def test_environment_configures_devices():
    out = run_c("""
        print(C.is_initialized(), C.get_config(), C.device_count(), C.device_info(2)["hbm_bytes"])
        print(C.memory_stats(2)["limit"], C.is_initialized())   # stats alone start nothing
        p = C.malloc(2, 100)
        print(C.is_initialized(), C.memory_stats(2)["in_use"], C.memory_stats(0)["in_use"])
        try:
            C.malloc(3, 1)
        except ValueError as e:
            print(e)
    """, env={"NPU_DEVICE_COUNT": "3", "NPU_HBM_SIZE": "64M"})
    assert out.splitlines() == [
        f"False {{'device_count': 3, 'hbm_bytes': {64 * MiB}}} 3 {64 * MiB}",
        f"{64 * MiB} False",
        "True 128 0",
        "NPU device 3 does not exist: 3 configured (valid ids 0..2)",
    ]


@pytest.mark.parametrize("text,expected", [("8G", 8 << 30), ("1024K", MiB), ("16m", 16 * MiB),
                                           (str(3 * MiB), 3 * MiB), ("1T", 1 << 40)])
def test_hbm_size_syntax(text, expected):
    assert run_c("print(C.get_config()['hbm_bytes'])", {"NPU_HBM_SIZE": text}).strip() == str(expected)


@pytest.mark.parametrize("env,message", [
    ({"NPU_HBM_SIZE": "lots"}, "NPU_HBM_SIZE='lots' is invalid: expected bytes as an integer, "
                               "optionally with suffix K, M, G or T (e.g. 8G), from 1M to 1T"),
    ({"NPU_HBM_SIZE": "2T"}, "NPU_HBM_SIZE='2T' is invalid"),
    ({"NPU_HBM_SIZE": "99999999999999999999G"}, "NPU_HBM_SIZE='99999999999999999999G' is invalid"),
    ({"NPU_DEVICE_COUNT": "9"}, "NPU_DEVICE_COUNT='9' is invalid: expected an integer from 1 to 8"),
    ({"NPU_DEVICE_COUNT": "two"}, "NPU_DEVICE_COUNT='two' is invalid"),
])
def test_invalid_environment_is_a_clear_error(env, message):
    out = run_c("""
        for call in (C.get_config, lambda: C.malloc(0, 64), lambda: C.memory_stats(0)):
            try:
                call()
            except ValueError as e:
                print(e)
        print(C.is_initialized())
        C.configure(2, 1 << 30)            # an explicit configuration wins over the environment
        C.malloc(1, 64)
        print(C.get_config())
    """, env=env)
    lines = out.splitlines()
    assert len(lines) == 5 and all(line.startswith(message) for line in lines[:3]), out
    assert lines[3:] == ["False", f"{{'device_count': 2, 'hbm_bytes': {1 << 30}}}"]


def test_configure_validates_and_is_refused_after_initialization():
    out = run_c("""
        for args in [(0, 1 << 30), (9, 1 << 30), (1, 100), (1, -1)]:
            try:
                C.configure(*args)
            except ValueError as e:
                print(e)
        C.configure(2, 32 << 20)
        print(C.is_initialized(), C.get_config())
        C.synchronize_device(1)                      # first use: devices now exist
        try:
            C.configure(1, 1 << 30)
        except RuntimeError as e:
            print(e)
        print(C.get_config())
    """)
    assert out.splitlines() == [
        "device_count=0 is invalid: expected 1 to 8",
        "device_count=9 is invalid: expected 1 to 8",
        "hbm_bytes=100 is invalid: expected 1048576 (1M) to 1099511627776 (1T) bytes",
        f"hbm_bytes=-1 is out of range: expected 0 to {2**64 - 1}",
        f"False {{'device_count': 2, 'hbm_bytes': {32 << 20}}}",
        f"the NPU runtime is already initialized with 2 device(s) of {32 << 20} bytes: configure "
        "it before the first NPU use",
        f"{{'device_count': 2, 'hbm_bytes': {32 << 20}}}",
    ]


# --- memory -------------------------------------------------------------------------------

def test_stats_match_allocations():
    before = _C.memory_stats(0)
    sizes = [1, 64, 65, 1000, 4096, 3 * MiB + 7]
    ptrs = [_C.malloc(0, n) for n in sizes]
    assert all(p % 64 == 0 for p in ptrs)
    during = _C.memory_stats(0)
    assert during["in_use"] - before["in_use"] == sum(rounded(n) for n in sizes)
    assert during["num_allocs"] - before["num_allocs"] == len(sizes)
    assert during["total_allocs"] - before["total_allocs"] == len(sizes)
    assert during["peak"] >= during["in_use"]
    assert during["limit"] == before["limit"] == _C.get_config()["hbm_bytes"]
    for p in ptrs:
        _C.free(0, p)
    after = _C.memory_stats(0)
    assert after["in_use"] == before["in_use"]
    assert after["num_allocs"] == before["num_allocs"]
    assert after["total_allocs"] == during["total_allocs"]
    assert after["peak"] >= during["peak"]
    _C.reset_peak_memory(0)
    assert _C.memory_stats(0)["peak"] == _C.memory_stats(0)["in_use"]


def test_public_wrappers_read_the_runtime():
    ptr = _C.malloc(0, 1000)
    try:
        assert npu_device.memory_stats() == _C.memory_stats(0)
        npu_device.reset_peak_memory()
        assert npu_device.memory_stats(0)["peak"] == _C.memory_stats(0)["in_use"]
    finally:
        _C.free(0, ptr)
    assert npu_device.info() == [_C.device_info(i) for i in range(_C.device_count())]


def test_zero_byte_allocation_is_null_and_free_of_null_is_ok():
    before = _C.memory_stats(0)
    assert _C.malloc(0, 0) == 0
    _C.free(0, 0)
    assert _C.memory_stats(0)["in_use"] == before["in_use"]


def test_out_of_memory_names_requested_and_free_bytes():
    """In a process of its own: in the test process, earlier tests' tensors may be freed (garbage
    collection) between reading the free bytes and asking for one more; the request then fit,
    and the 16 GiB it held starved every later test."""
    out = run_c("""
        a = C.malloc(0, 1 << 20)
        stats = C.memory_stats(0)
        free = stats["limit"] - stats["in_use"]
        try:
            C.malloc(0, free + 1)
        except MemoryError as e:
            print(e)
        print(C.memory_stats(0)["in_use"] == stats["in_use"])
        C.free(0, C.malloc(0, 1024))              # the pool still works
        print("ok")
    """, env={"NPU_HBM_SIZE": "4M"})
    assert out.splitlines() == [
        "NPU:0 out of memory: requested 3145729 bytes, 3145728 free of 4194304", "True", "ok"]


def test_out_of_memory_at_exact_capacity():
    out = run_c("""
        a = C.malloc(0, 1 << 20)                  # all of a 1 MiB device
        try:
            C.malloc(0, 1)
        except MemoryError as e:
            print(e)
        C.free(0, a)
        b = C.malloc(0, 1 << 20)
        print(C.memory_stats(0))
    """, env={"NPU_HBM_SIZE": "1M"})
    assert out.splitlines() == [
        "NPU:0 out of memory: requested 1 bytes, 0 free of 1048576",
        "{'in_use': 1048576, 'peak': 1048576, 'limit': 1048576, 'num_allocs': 1, 'total_allocs': 2, "
        "'cached_bytes': 0, 'variable_bytes': 0, 'variable_limit': 0}",
    ]


def test_freed_blocks_are_reused_best_fit_and_trimmed_oldest_first():
    """A freed block serves a later request of at most a quarter less (the smallest such
    block); a request that would exceed the capacity first drops cached blocks, oldest first."""
    out = run_c("""
        big, small, mid = (C.malloc(0, n) for n in (400 << 10, 100 << 10, 200 << 10))
        for p in (big, small, mid):
            C.free(0, p)
        print(C.malloc(0, 190 << 10) == mid, C.malloc(0, 90 << 10) == small)
        print(C.malloc(0, 40 << 10) not in (big, small, mid))   # too small for a cached block
        print(C.memory_stats(0)["cached_bytes"] == 400 << 10)
        C.malloc(0, 700 << 10)            # 1200 KiB device: the cached 400 KiB block must go
        print(C.memory_stats(0)["cached_bytes"])
    """, env={"NPU_HBM_SIZE": "1200K"})
    assert out.splitlines() == ["True True", "True", "True", "0"]


def test_cache_keeps_what_was_once_in_use_beyond_the_floor():
    """Freed blocks stay cached up to the most bytes ever in use at once (a training step frees
    about the model's size every step and allocates it again in the next), not only up to the
    bytes still in use; above that the oldest go."""
    out = run_c("""
        mib = 1 << 20
        blocks = [C.malloc(0, 100 * mib) for _ in range(4)]   # 400 MiB at once: the high water
        for p in blocks:
            C.free(0, p)
        print(C.memory_stats(0)["cached_bytes"] // mib, C.memory_stats(0)["in_use"])
        again = [C.malloc(0, 100 * mib) for _ in range(4)]
        print(sorted(again) == sorted(blocks))                # the next step reuses them all
        for p in again:
            C.free(0, p)
        extra = [C.malloc(0, 30 * mib) for _ in range(5)]     # too small for a cached block
        for p in extra:
            C.free(0, p)
        print(C.memory_stats(0)["cached_bytes"] // mib)       # 550 > 400: oldest 100s dropped
    """)
    assert out.splitlines() == ["400 0", "True", "350"]


def test_bad_frees_raise_and_leave_the_pool_intact(buffer):
    before = _C.memory_stats(0)
    for bad in (12345, buffer + 64):
        with pytest.raises(ValueError, match="not the start of a live allocation of this device"):
            _C.free(0, bad)
    ptr = _C.malloc(0, 64)
    _C.free(0, ptr)
    with pytest.raises(ValueError, match="not the start of a live allocation"):
        _C.free(0, ptr)  # double free
    assert _C.memory_stats(0)["in_use"] == before["in_use"]


# --- copies -------------------------------------------------------------------------------

def test_copies_are_bit_exact(buffer):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, 4096, dtype=np.uint8)
    _C.memcpy_htod(buffer, src)
    out = np.zeros_like(src)
    _C.memcpy_dtoh(out, buffer)
    np.testing.assert_array_equal(out, src)

    other = _C.malloc(0, 4096)
    try:
        _C.memcpy_dtod(other, buffer + 1000, 96)   # interior device pointers are fine
        _C.memset(other + 96, 0xAB, 32)
        part = np.zeros(128, np.uint8)
        _C.memcpy_dtoh(part, other)
        np.testing.assert_array_equal(part[:96], src[1000:1096])
        np.testing.assert_array_equal(part[96:], np.full(32, 0xAB, np.uint8))
    finally:
        _C.free(0, other)


def test_copies_outside_device_memory_raise(buffer):
    host = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="memcpy source .* is not inside a live NPU allocation"):
        _C.memcpy_dtoh(np.zeros(8192, np.uint8), buffer)           # runs past the block
    with pytest.raises(ValueError, match="memcpy destination .* is not inside a live NPU alloc"):
        _C.memcpy_htod(host.ctypes.data, host)                      # a host pointer
    with pytest.raises(ValueError, match="memset destination"):
        _C.memset(buffer + 4090, 0, 8)
    s = _C.Stream(0)
    with pytest.raises(ValueError, match="not inside a live NPU allocation"):
        s.memcpy_dtod_async(buffer, 64, 16)
    s.synchronize()


# --- streams and events -------------------------------------------------------------------

def gate(stream):
    """Blocks `stream` until the returned threading.Event is set."""
    opened = threading.Event()
    stream.launch_host_func(opened.wait)
    return opened


def test_stream_runs_work_in_submission_order(buffer):
    s = _C.Stream(0)
    opened = gate(s)
    src = np.arange(1024, dtype=np.float32)
    out = np.zeros_like(src)
    order = []
    s.memcpy_htod_async(buffer, src)
    s.launch_host_func(lambda: order.append("copied"))
    s.memset_async(buffer, 0, 2048)                       # zero the first half
    s.launch_host_func(lambda: order.append("zeroed"))
    s.memcpy_dtoh_async(out, buffer)
    assert not s.query()                                  # held by the gate: nothing ran
    assert order == [] and not out.any()
    opened.set()
    s.synchronize()
    assert s.query()
    assert order == ["copied", "zeroed"]
    np.testing.assert_array_equal(out[:512], 0)
    np.testing.assert_array_equal(out[512:], src[512:])


def test_free_is_stream_ordered():
    # As TensorFlow assumes of device memory: a block freed while queued work still reads it
    # leaves the accounting at once but stays valid until that work has run.
    before = _C.memory_stats(0)["in_use"]
    ptr = _C.malloc(0, 4096)
    src = np.arange(1024, dtype=np.float32)
    _C.memcpy_htod(ptr, src)
    s = _C.Stream(0)
    opened = gate(s)
    out = np.zeros_like(src)
    s.memcpy_dtoh_async(out, ptr)
    _C.free(0, ptr)
    assert _C.memory_stats(0)["in_use"] == before
    with pytest.raises(ValueError, match="not inside a live NPU allocation"):
        s.memset_async(ptr, 0, 16)              # new work on a freed block is refused
    opened.set()
    s.synchronize()
    np.testing.assert_array_equal(out, src)


def test_memset32(buffer):
    s = _C.Stream(0)
    s.memset32_async(buffer + 4, 0xDEADBEEF, 3)
    out = np.zeros(5, np.uint32)
    s.memcpy_dtoh_async(out, buffer)
    s.synchronize()
    assert out[1:4].tolist() == [0xDEADBEEF] * 3


def test_events_order_work_across_streams(buffer):
    producer, consumer = _C.Stream(0), _C.Stream(0)
    event = _C.Event()
    assert event.query()                                  # never recorded: complete
    opened = gate(producer)
    producer.memset_async(buffer, 7, 4096)
    event.record(producer)
    consumer.wait_event(event)
    out = np.zeros(4096, np.uint8)
    consumer.memcpy_dtoh_async(out, buffer)
    assert not event.query() and not consumer.query()    # waits for the producer's gate
    opened.set()
    consumer.synchronize()
    np.testing.assert_array_equal(out, 7)
    event.synchronize()
    assert event.query()


def test_wait_only_covers_records_made_before_it(buffer):
    a, b = _C.Stream(0), _C.Stream(0)
    event = _C.Event()
    event.record(a)
    a.synchronize()
    b.wait_event(event)           # refers to the completed record
    opened = gate(a)
    event.record(a)               # a later record does not hold back b's earlier wait
    b.synchronize()
    assert not event.query()
    opened.set()
    event.synchronize()


def test_synchronize_device_waits_for_every_stream():
    streams = [_C.Stream(0) for _ in range(3)]
    opened = threading.Event()
    done = []
    for i, s in enumerate(streams):
        s.launch_host_func(opened.wait)
        s.launch_host_func(lambda i=i: done.append(i))
    threading.Timer(0.05, opened.set).start()
    _C.synchronize_device(0)
    assert sorted(done) == [0, 1, 2]


def test_stream_error_is_sticky_and_later_work_still_runs(buffer):
    s = _C.Stream(0)

    def fail():
        raise ValueError("boom")

    s.launch_host_func(fail)
    s.memset_async(buffer, 3, 16)
    with pytest.raises(RuntimeError, match="NPU:0 stream: host function raised ValueError: boom"):
        s.synchronize()
    out = np.zeros(16, np.uint8)
    _C.memcpy_dtoh(out, buffer)
    np.testing.assert_array_equal(out, 3)
    with pytest.raises(RuntimeError, match="boom"):
        s.query()                 # sticky
    with pytest.raises(RuntimeError, match="boom"):
        _C.synchronize_device(0)


def test_copies_on_an_idle_stream_complete_at_once(buffer):
    """Copies, memsets and event records on an idle stream run on the caller (TensorFlow's event
    manager then finds the event complete when it first polls); behind queued work they queue."""
    s, event = _C.Stream(0), _C.Event()
    src = np.arange(16, dtype=np.float32)
    s.memcpy_htod_async(buffer, src)
    event.record(s)
    assert event.query()
    out = np.zeros_like(src)
    _C.memcpy_dtoh(out, buffer)
    np.testing.assert_array_equal(out, src)
    opened = gate(s)
    s.memset_async(buffer, 0, 64)
    event.record(s)
    assert not event.query()                       # behind the gate
    _C.memcpy_dtoh(out, buffer)
    np.testing.assert_array_equal(out, src)        # the memset has not run
    opened.set()
    s.synchronize()
    assert event.query()
    _C.memcpy_dtoh(out, buffer)
    assert not out.any()


def test_run_host_func_runs_on_the_caller_when_idle_and_after_queued_work():
    s = _C.Stream(0)
    ran = []
    s.run_host_func(lambda: ran.append(threading.get_ident()))
    assert ran == [threading.get_ident()]          # idle: no hand-off to the stream's thread
    opened = gate(s)
    s.launch_host_func(lambda: ran.append("queued"))
    threading.Timer(0.05, opened.set).start()
    s.run_host_func(lambda: ran.append("after"))   # waits behind the gate and the queued work
    assert ran[1:] == ["queued", "after"] and s.query()


def test_run_host_func_reports_errors_and_refuses_its_own_stream():
    s = _C.Stream(0)
    with pytest.raises(RuntimeError, match="host function raised: boom"):
        s.run_host_func(lambda: (_ for _ in ()).throw(ValueError("boom")))
    s.synchronize()                                # its exception is not the stream's error
    s.launch_host_func(lambda: s.run_host_func(lambda: None))
    with pytest.raises(RuntimeError, match="cannot be synchronized by its own host function"):
        s.synchronize()
    t = _C.Stream(0)                       # run on the caller: the same refusal, no deadlock
    with pytest.raises(RuntimeError, match="cannot be synchronized by its own host function"):
        t.run_host_func(t.synchronize)


def test_stream_on_missing_device_raises():
    with pytest.raises(ValueError, match="NPU device 5 does not exist"):
        _C.Stream(5)
