"""Server-side batching: concurrent requests to one servable are concatenated along the batch
dimension, run once, and split back (tensorflow_model_server's --enable_batching).

A batch closes when it holds max_batch_size rows or batch_timeout_micros passed since its first
request; only requests with the same signature and the same non-batch shapes share a batch.
At most max_enqueued_batches * max_batch_size rows wait; more get Unavailable, except that a
request finding the queue empty is always taken (one of more than max_batch_size rows runs as a
batch of its own: refusing it would refuse it forever).
"""
import collections
import concurrent.futures
import dataclasses
import threading
import time

import numpy as np

from npu_device.serving.errors import Unavailable


@dataclasses.dataclass
class BatchingParameters:
    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 100
    num_batch_threads: int = 4


class _Task:
    def __init__(self, signature, feeds):
        self.signature, self.feeds = signature, feeds
        self.rows = len(next(iter(feeds.values())))
        self.key = (signature, tuple(sorted((k, v.shape[1:], v.dtype.str)
                                            for k, v in feeds.items())))
        self.future = concurrent.futures.Future()


class Batcher:
    def __init__(self, servable, params, on_batch=lambda rows: None):
        self.servable, self.params, self.on_batch = servable, params, on_batch
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._queued_rows, self._stopping = 0, False
        self._threads = [threading.Thread(target=self._work, daemon=True,
                                          name=f"batch-{servable.version}-{i}")
                         for i in range(params.num_batch_threads)]
        for t in self._threads:
            t.start()

    def predict(self, signature, feeds):
        """Blocks until the batch holding this request ran; returns its outputs."""
        task = _Task(signature, {k: np.asarray(v) for k, v in feeds.items()})
        limit = self.params.max_enqueued_batches * self.params.max_batch_size
        with self._cond:
            if self._stopping:
                raise Unavailable("the model is being unloaded")
            if self._queued_rows and self._queued_rows + task.rows > limit:
                raise Unavailable(f"batching queue is full ({self._queued_rows} rows waiting, "
                                  f"limit {limit})")
            self._queue.append(task)
            self._queued_rows += task.rows
            self._cond.notify_all()
        return task.future.result()

    def _take_batch(self):
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            batch = [self._queue.popleft()]
            rows = batch[0].rows
            deadline = time.monotonic() + self.params.batch_timeout_micros / 1e6
            while rows < self.params.max_batch_size:
                for t in list(self._queue):
                    if t.key == batch[0].key and rows + t.rows <= self.params.max_batch_size:
                        self._queue.remove(t)
                        batch.append(t)
                        rows += t.rows
                left = deadline - time.monotonic()
                if rows >= self.params.max_batch_size or left <= 0 or self._stopping:
                    break
                self._cond.wait(left)
            self._queued_rows -= rows
            return batch

    def _work(self):
        while (batch := self._take_batch()) is not None:
            try:
                feeds = {k: np.concatenate([t.feeds[k] for t in batch]) for k in batch[0].feeds}
                out = self.servable.predict(batch[0].signature, feeds)
                self.on_batch(sum(t.rows for t in batch))
                start = 0
                for t in batch:
                    t.future.set_result({k: v[start:start + t.rows] for k, v in out.items()})
                    start += t.rows
            except Exception as e:           # every waiting request learns why
                for t in batch:
                    if not t.future.done():
                        t.future.set_exception(e)

    def stop(self, timeout=None):
        """Runs what is queued, then ends the threads; True if they ended within `timeout`."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        return not any(t.is_alive() for t in self._threads)
