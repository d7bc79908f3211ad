"""Servables: one loaded model version with named signatures, run on numpy feeds.

A version folder holds a SavedModel (served by TensorFlow with the NPU plugin: its graphs go
through the NPU graph engine) or one `.om` serving container (served by CannSession).
"""
import dataclasses
import glob
import os

import numpy as np

from npu_device.serving.errors import InvalidArgument, NotFound
from npu_device.serving.limits import check_dtype

DEFAULT_SIGNATURE = "serving_default"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype       # object for strings
    shape: tuple          # -1 for unknown dimensions; None for unknown rank


@dataclasses.dataclass
class Signature:
    name: str
    inputs: list
    outputs: list

    @property
    def batchable(self):
        """Every input has a leading unknown dimension: requests can be concatenated."""
        return all(s.shape and s.shape[0] == -1 for s in self.inputs)


class Servable:
    kind = ""

    def __init__(self, path, version):
        self.path, self.version = path, version
        self.signatures = {}

    def signature(self, name):
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise InvalidArgument(f"serving signature {name!r} not found; signatures: "
                                  f"{sorted(self.signatures)}")
        return self.signatures[name]

    def check_feeds(self, sig, feeds):
        """Names, dtypes, ranks and static dimensions, checked before a request can join a
        batch. Dtypes must be the signature's exactly (as TF Serving checks them)."""
        names = [s.name for s in sig.inputs]
        if set(feeds) != set(names):
            raise InvalidArgument(f"signature {sig.name!r} takes inputs {names}, got "
                                  f"{sorted(feeds)}")
        for s in sig.inputs:
            check_dtype(s.name, sig.name, np.asarray(feeds[s.name]).dtype, s.dtype)
            shape = np.shape(feeds[s.name])
            if s.shape is not None and (len(shape) != len(s.shape) or any(
                    want not in (-1, got) for want, got in zip(s.shape, shape))):
                raise InvalidArgument(f"input {s.name!r} has shape {list(shape)}; signature "
                                      f"{sig.name!r} expects {list(s.shape)} (-1: any)")

    def predict(self, signature_name, feeds):
        raise NotImplementedError


class SavedModelServable(Servable):
    kind = "saved_model"

    def __init__(self, path, version):
        super().__init__(path, version)
        import npu_device  # noqa: F401  (the plugin must be loaded before the model's graphs run)
        import tensorflow as tf
        self._tf = tf
        self._loaded = tf.saved_model.load(path)
        for name, fn in self._loaded.signatures.items():
            ins = fn.structured_input_signature[1]
            outs = fn.structured_outputs
            self.signatures[name] = Signature(
                name, [_spec(k, ins[k]) for k in sorted(ins)],
                [_spec(k, outs[k]) for k in sorted(outs)])
        self._fns = dict(self._loaded.signatures)

    def predict(self, signature_name, feeds):
        sig = self.signature(signature_name)
        self.check_feeds(sig, feeds)
        tf = self._tf
        args = {}
        for s in sig.inputs:
            try:
                args[s.name] = tf.constant(feeds[s.name], dtype=tf.as_dtype(
                    s.dtype if s.dtype != object else tf.string))
            except (TypeError, ValueError) as e:
                raise InvalidArgument(f"input {s.name!r}: {e}") from None
        try:
            out = self._fns[sig.name](**args)
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
            raise InvalidArgument(f"signature {sig.name!r}: {_first_line(e)}") from None
        return {k: v.numpy() for k, v in out.items()}


class OmServable(Servable):
    kind = "om"

    def __init__(self, path, version):
        super().__init__(path, version)
        from npu_device.serving.session import CannSession
        self.session = CannSession(path)
        to_spec = lambda i: TensorSpec(i.name, i.dtype, i.shape)  # noqa: E731
        self.signatures[DEFAULT_SIGNATURE] = Signature(
            DEFAULT_SIGNATURE, [to_spec(i) for i in self.session.inputs],
            [to_spec(o) for o in self.session.outputs])

    def predict(self, signature_name, feeds):
        self.check_feeds(self.signature(signature_name), feeds)
        try:
            return self.session.run(feeds)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(str(e)) from None


def _spec(name, spec):
    shape = None if spec.shape.rank is None else tuple(
        -1 if d is None else d for d in spec.shape.as_list())
    dtype = object if spec.dtype.name == "string" else np.dtype(spec.dtype.as_numpy_dtype)
    return TensorSpec(name, dtype, shape)


def _first_line(e):
    return str(getattr(e, "message", e)).strip().splitlines()[0]


def load(version_dir, version):
    """The servable in a version folder; NotFound says what the folder lacks."""
    if os.path.exists(os.path.join(version_dir, "saved_model.pb")):
        return SavedModelServable(version_dir, version)
    oms = sorted(glob.glob(os.path.join(version_dir, "*.om")))
    if len(oms) == 1:
        return OmServable(oms[0], version)
    raise NotFound(f"{version_dir} holds neither a SavedModel (saved_model.pb) nor exactly one "
                   f".om file (found {len(oms)})")
