"""Compiling a cluster while TensorFlow still prepares the step that runs it.

The partitioner runs inside Grappler, during a tf.function's first call; the cluster's compile
request comes only when its NpuGraphOp first runs, after TF has finished optimizing, placing
and instantiating the graph (0.1-0.7 s for the model zoo's training graphs, on one core while
the other idles). When partitioning could already write that request (every input shape fixed
by the graph: graph_engine/compiler/partition/static_shapes.py), a worker thread compiles it
meanwhile, and the NpuGraphOp's request takes the result, waiting for it if it is not done.

A job that has not started when its request comes is dropped (the requesting thread compiles
itself, as without this); a failed job is forgotten (the request compiles again and reports
the failure the usual way); a job no request takes (the cluster ran with other shapes, or not
at all) is dropped once MAX_KEPT newer ones exist. At interpreter exit queued jobs are dropped
and a running one is waited for, so that no compile runs while the interpreter tears down.
"""
import atexit
import collections
import threading
import time

MAX_KEPT = 8

_QUEUED, _RUNNING, _DONE = range(3)


class _Job:
    def __init__(self, request, build):
        self.request, self.build = request, build
        self.state = _QUEUED
        self.result = self.error = None
        self.done = threading.Event()


_lock = threading.Lock()
_wake = threading.Condition(_lock)
_jobs = collections.OrderedDict()      # (cluster key, shapes) -> _Job, oldest first
_queue = collections.deque()           # queued _Jobs
_worker = None
_running = None                        # the _Job the worker is compiling
_closed = False


def _key(cluster_key, shapes):
    return cluster_key, tuple(tuple(s) for s in shapes)


def submit(cluster_key, shapes, request, build):
    """Queues `build(request)` (-> the compile's result) for the cluster `cluster_key` called
    with input `shapes`; a job already there for both stays."""
    global _worker
    key = _key(cluster_key, shapes)
    with _lock:
        if _closed or key in _jobs:
            return
        job = _jobs[key] = _Job(request, build)
        _queue.append(job)
        while len(_jobs) > MAX_KEPT:
            _, old = _jobs.popitem(last=False)
            if old.state == _QUEUED:
                _queue.remove(old)
        if _worker is None:
            _worker = threading.Thread(target=_work, name="npu_compile_ahead", daemon=True)
            _worker.start()
        _wake.notify()


def take(cluster_key, shapes):
    """(result, seconds waited) of the job compiled ahead for this request, or None: none was
    submitted, it had not started yet (dropped now), or it failed."""
    with _lock:
        job = _jobs.pop(_key(cluster_key, shapes), None)
        if job is None:
            return None
        if job.state == _QUEUED:
            _queue.remove(job)
            return None
    start = time.perf_counter()
    job.done.wait()
    waited = time.perf_counter() - start
    return None if job.error is not None else (job.result, waited)


def pending():
    """How many jobs are kept, not yet taken (for tests and reports)."""
    with _lock:
        return len(_jobs)


@atexit.register
def _stop(timeout=60):
    global _closed
    with _lock:
        _closed = True
        _queue.clear()
        job = _running
    if job is not None:
        job.done.wait(timeout)


def _work():
    global _running
    while True:
        with _lock:
            while not _queue:
                _wake.wait()
            job = _running = _queue.popleft()
            job.state = _RUNNING
        try:
            job.result = job.build(job.request)
        except BaseException as e:  # noqa: BLE001  (the request compiles again and reports it)
            job.error = e
        job.request = job.build = None
        with _lock:
            job.state, _running = _DONE, None
        job.done.set()
