"""Says so when an eager op ran on CPU although the program asked for the NPU.

TensorFlow soft-places an eager op on CPU when the NPU has no kernel for it (or not for its
dtypes), silently. An op callback (tensorflow.python.framework.op_callbacks; eager execution
only) looks at each eager op's outputs: when they are on CPU, the current device scope is the
NPU or the default, and TF's kernel registry confirms that no NPU kernel accepts the op's
dtypes, it logs one warning per (op, reason) on the "npu_device" logger. Ops that TensorFlow
runs on CPU only (tf.data, strings) and ops on or making host objects (variant, resource or
string inputs, or only such outputs: the Optional that Keras' iterator wraps each batch in) are
not fallbacks and stay quiet.

On by default; NPU_LOG_EAGER_FALLBACK=0 turns it off, enable()/disable() switch it at run time.
TensorFlow keeps op callbacks per thread: enable() covers the calling thread (import covers the
importing one). Cost per eager op: one Python call and a dict lookup.
"""
import logging
import threading

_log = logging.getLogger("npu_device")
_NPU_KERNEL_DEVICES = ("NPU", "DEFAULT")       # TF's DEVICE_DEFAULT kernels serve the NPU too
_lock = threading.Lock()
_decided = {}                                  # (op, dtype attrs) -> reason or None
_warned = set()                                # (op, reason) already logged


def _dtype_enum(value):
    return getattr(value, "as_datatype_enum", value)


def _type_attrs(op_def, attrs):
    """Sorted (name, DataType enum or tuple of them) pairs of the op's type attrs, from the
    callback's flat (name, value, ...) tuple."""
    kinds = {a.name: a.type for a in op_def.attr}
    out = {}
    for name, value in zip(attrs[::2], attrs[1::2]):
        if kinds.get(name) == "type":
            out[name] = _dtype_enum(value)
        elif kinds.get(name) == "list(type)":
            out[name] = tuple(_dtype_enum(v) for v in value)
    return tuple(sorted(out.items()))


def _accepts(kernel, type_attrs):
    values = dict(type_attrs)
    for c in kernel.constraint:
        allowed = set(c.allowed_values.list.type)
        got = values.get(c.name)
        if got is None:
            continue
        if not all(t in allowed for t in (got if isinstance(got, tuple) else (got,))):
            return False
    return True


def _reason(op_type, type_attrs):
    """Why no NPU kernel takes this op, or None when it is no fallback: an NPU kernel takes it
    (its CPU outputs were host-memory outputs, or TF kept small host inputs on the host), or
    TensorFlow runs the op on CPU only anyway (input pipelines, strings)."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.python.framework import kernels
    registered = kernels.get_registered_kernels_for_op(op_type).kernel
    if all(k.device_type == "CPU" for k in registered):
        return None
    npu = [k for k in registered if k.device_type in _NPU_KERNEL_DEVICES]
    if not npu:
        return f"the NPU has no kernel for {op_type}"
    if any(_accepts(k, type_attrs) for k in npu):
        return None
    name = types_pb2.DataType.Name
    got = {a: [name(x) for x in v] if isinstance(v, tuple) else name(v) for a, v in type_attrs}
    allowed = {}
    for k in npu:
        for c in k.constraint:
            allowed.setdefault(c.name, set()).update(c.allowed_values.list.type)
    takes = "; ".join(f"{a}: {', '.join(name(t) for t in sorted(ts))}"
                      for a, ts in sorted(allowed.items()))
    return f"the NPU kernels for {op_type} do not take {got} (they take {takes})"


def _asked_for_npu():
    from tensorflow.python.eager import context
    scope = context.context().device_name
    return not scope or ":NPU:" in scope       # no scope: the NPU is the default device


_CONTAINER_DTYPES = frozenset(("variant", "resource", "string"))


def _callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
    if graph is not None or not outputs:       # graph construction, or nothing to look at
        return None
    if isinstance(op_type, bytes):             # so TF's fast path passes it
        op_type = op_type.decode()
    for t in outputs:                          # the common case: it ran on the NPU
        if ":CPU:" not in t.device:
            return None
    if (not _asked_for_npu() or any(t.dtype.name in _CONTAINER_DTYPES for t in inputs)
            or all(t.dtype.name in _CONTAINER_DTYPES for t in outputs)):
        return None                            # iterators, optionals, strings: host objects
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(op_type)
    if op_def is None:                         # a function call, not an op
        return None
    key = (op_type, _type_attrs(op_def, attrs))
    with _lock:
        if key not in _decided:
            _decided[key] = _reason(*key)
        reason = _decided[key]
        if reason is None or (op_type, reason) in _warned:
            return None
        _warned.add((op_type, reason))
    _log.warning("npu_device: eager op %s ran on CPU instead of the NPU: %s", op_type, reason)
    return None


def enable():
    """Starts logging eager CPU fallbacks of the calling thread (idempotent)."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import op_callbacks
    if _callback not in context.context().op_callbacks:
        op_callbacks.add_op_callback(_callback)


def disable():
    """Stops logging eager CPU fallbacks of the calling thread."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import op_callbacks
    if _callback in context.context().op_callbacks:
        op_callbacks.remove_op_callback(_callback)


def install():
    """enable() unless NPU_LOG_EAGER_FALLBACK is off (called at npu_device import)."""
    from npu_device.configuration import environment
    if environment.value("NPU_LOG_EAGER_FALLBACK") is not False:
        enable()
