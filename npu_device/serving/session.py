"""CannSession: runs a serving container written by npu-atc on the NPU runtime.

    sess = CannSession("mlp.om")
    sess.inputs                     # [TensorInfo(name='x', dtype=float32, shape=(-1, 4), ...)]
    out = sess.run({"x": batch})    # {"output_0": array}
    fut = sess.run_async({"x": batch})
    fn = sess.as_tf_function()      # a tf.function over the same model, for TF graphs

A request of batch n runs on the smallest compiled batch >= n (inputs zero-padded, outputs
sliced back); a larger request runs in chunks of the largest compiled batch. run() is
thread-safe: the executor gives each concurrent run a stream of its own and releases the GIL.
A malformed or unreadable container (or a path that is not a regular file) raises
container.ContainerError naming the file and the field.
"""
import concurrent.futures
import dataclasses
import os

import numpy as np

from npu_device.serving import container


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: np.dtype
    shape: tuple          # -1 marks the batch dimension of a dynamic-batch model
    batch_sizes: tuple    # compiled batch sizes; () for a static-shape model


class CannSession:
    def __init__(self, model_path, device_id=0, max_workers=4):
        from npu_device import _C
        self.model_path = os.fspath(model_path)
        manifest, blobs = container.read(self.model_path)      # ContainerError: what is wrong
        self.manifest = manifest
        self.dynamic = bool(manifest["dynamic_batch"])
        self.batch_sizes = tuple(sorted(blobs)) if self.dynamic else ()
        self._models = {}
        for b, data in blobs.items():
            try:
                self._models[b] = _C.load_model(data, device_id)
            except (ValueError, RuntimeError) as e:
                raise container.ContainerError(
                    f"{self.model_path}: compiled model for batch size {b}: {e}") from None
            leading = {tuple(d.shape)[:1] for d in self._models[b].inputs}
            if self.dynamic and leading != {(b,)}:     # run() pads requests to b rows
                raise container.ContainerError(
                    f"{self.model_path}: the model labelled batch size {b} takes inputs of "
                    f"shapes {[tuple(d.shape) for d in self._models[b].inputs]}")

        def info(d):
            return TensorInfo(d["name"], _numpy_dtype(d["dtype"]), tuple(d["shape"]),
                              self.batch_sizes)
        self.inputs = [info(d) for d in manifest["inputs"]]
        self.outputs = [info(d) for d in manifest["outputs"]]
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers,
                                                           thread_name_prefix="cann-session")

    @property
    def name(self):
        return self.manifest["name"]

    def run(self, feeds):
        """{input name: array} -> {output name: array}."""
        arrays = self._check(feeds)
        if not self.dynamic:
            results = self._models[0].run(arrays)
        else:
            n, largest = arrays[0].shape[0], self.batch_sizes[-1]
            chunks = [self._run_padded([a[i:i + largest] for a in arrays])
                      for i in (range(0, n, largest) or [0])]
            results = [np.concatenate(parts) for parts in zip(*chunks)]
        return {o.name: r for o, r in zip(self.outputs, results)}

    def run_async(self, feeds) -> concurrent.futures.Future:
        return self._pool.submit(self.run, feeds)

    def _run_padded(self, arrays):
        n = arrays[0].shape[0]
        batch = next(b for b in self.batch_sizes if b >= n)
        if batch != n:
            arrays = [np.concatenate([a, np.zeros((batch - n,) + a.shape[1:], a.dtype)])
                      for a in arrays]
        return [r[:n] for r in self._models[batch].run(arrays)]

    def _check(self, feeds):
        """Inputs in model order, as C-contiguous arrays of the model's dtypes; ValueError
        names the input and what was expected."""
        if not isinstance(feeds, dict):
            raise TypeError(f"feeds must be a dict of input name -> array, got "
                            f"{type(feeds).__name__}")
        names = [i.name for i in self.inputs]
        unknown, missing = sorted(set(feeds) - set(names)), [n for n in names if n not in feeds]
        if unknown or missing:
            raise ValueError(f"model {self.name!r} takes inputs {names}; "
                             + "; ".join(filter(None, [unknown and f"unknown: {unknown}",
                                                       missing and f"missing: {missing}"])))
        arrays, batch = [], None
        for info in self.inputs:
            value = feeds[info.name]
            if isinstance(value, np.ndarray) or np.isscalar(value) and hasattr(value, "dtype"):
                a = np.asarray(value)
                if a.dtype != info.dtype:
                    raise ValueError(f"input {info.name!r} is {a.dtype}; the model expects "
                                     f"{info.dtype}")
            else:
                try:
                    a = np.asarray(value, dtype=info.dtype)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"input {info.name!r} cannot be read as {info.dtype} "
                                     f"{_shape_text(info.shape)}: {e}") from None
            ok = len(a.shape) == len(info.shape) and all(
                want in (-1, got) for want, got in zip(info.shape, a.shape))
            if not ok:
                raise ValueError(f"input {info.name!r} has shape {a.shape}; the model expects "
                                 f"{_shape_text(info.shape)}")
            if self.dynamic:
                if batch is not None and a.shape[0] != batch:
                    raise ValueError(f"inputs disagree on the batch size: {batch} and "
                                     f"{a.shape[0]} ({info.name!r})")
                batch = a.shape[0]
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def as_tf_function(self):
        """A tf.function(**inputs) -> {output: tensor} running this session through
        tf.numpy_function (the model runs on the NPU runtime, outside TF's graph)."""
        import tensorflow as tf
        specs = [tf.TensorSpec([None if d < 0 else d for d in i.shape], i.dtype, name=i.name)
                 for i in self.inputs]
        tout = [tf.as_dtype(o.dtype) for o in self.outputs]

        def call(*arrays):
            out = self.run(dict(zip([i.name for i in self.inputs], arrays)))
            return [out[o.name] for o in self.outputs]

        @tf.function(input_signature=specs)
        def fn(*tensors):
            results = tf.numpy_function(call, list(tensors), tout, stateful=False)
            for r, o in zip(results, self.outputs):
                r.set_shape([None if d < 0 else d for d in o.shape])
            return {o.name: r for o, r in zip(self.outputs, results)}
        return fn

    def close(self):
        self._pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _shape_text(shape):
    return "(" + ", ".join("batch" if d < 0 else str(d) for d in shape) + ")"


def _numpy_dtype(name):
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)
