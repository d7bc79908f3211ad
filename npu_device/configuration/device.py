"""npu_device.open(): select the NPU a program runs on.

as_default() enters a TensorFlow device scope for the NPU on the calling thread and never leaves
it, the way a `with tf.device(...)` block around the whole program would: eager ops, variables
and every tf.function traced afterwards on that thread (Keras fit/evaluate/predict included) are
placed on it. TensorFlow keeps device scopes per thread and offers no process-wide default, so
threads started by the program begin on TensorFlow's own placement (which prefers NPU:0); use
`with npu_device.open(i).scope():` there.
"""
import tensorflow as tf
from tensorflow.python.eager import context

from npu_device.configuration import options as opt
from npu_device.configuration import state

_default_scopes = []  # entered for good; kept so nothing else can exit them


class NpuDevice:
    """Handle of one NPU device, returned by npu_device.open()."""

    def __init__(self, device_id, name):
        self.device_id = device_id
        self.name = name  # full TF device name, /job:localhost/replica:0/task:0/device:NPU:<id>

    def scope(self):
        """Context manager placing what runs inside on this device (tf.device)."""
        return tf.device(self.name)

    def as_default(self):
        """Makes this device the default for the rest of the program on the calling thread."""
        if not tf.executing_eagerly():
            raise RuntimeError("npu_device.open().as_default() must be called outside "
                               "tf.function and graph building, once at program start")
        current = context.context().device_name
        ours = _default_scopes[-1][1] if _default_scopes else None
        if current and current != ours:
            raise RuntimeError(f"npu_device.open().as_default() was called inside a device scope "
                               f"({current}); call it outside any `with tf.device(...)` block, "
                               f"or use `with npu_device.open(...).scope():` for a block")
        scope = tf.device(self.name)
        scope.__enter__()
        _default_scopes.append((scope, context.context().device_name))
        return self

    def __repr__(self):
        return f"NpuDevice({self.name!r})"


def open(device_id=None):  # noqa: A001 (the Ascend adapter's name)
    """The NPU `device_id` (default: option device_id, i.e. NPU_DEVICE_ID, or 0).

    Creates TensorFlow's devices if they do not exist yet, so options that size devices
    (device_count, hbm_size) are fixed from here on.
    """
    if device_id is None:
        device_id = state.current().device_id
    else:
        device_id = opt.parse(opt.BY_NAME["device_id"], device_id)
    ids = sorted(tf.DeviceSpec.from_string(d.name).device_index
                 for d in tf.config.list_logical_devices("NPU"))
    if not ids:
        raise RuntimeError("no NPU device is registered with TensorFlow: the npu_device plugin "
                           "did not load (see the log above) or TensorFlow hides it "
                           "(tf.config.set_visible_devices)")
    if device_id not in ids:
        raise ValueError(f"NPU device_id {device_id} is out of range: this process has "
                         f"{len(ids)} NPU device(s), valid ids are {ids[0]}..{ids[-1]} (more "
                         f"devices: device_count option / NPU_DEVICE_COUNT)")
    return NpuDevice(device_id, f"/job:localhost/replica:0/task:0/device:NPU:{device_id}")
