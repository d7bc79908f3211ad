"""tf.distribute on NPUs (docs/distributed.md).

MirroredStrategy takes NPU devices as they are (`MirroredStrategy(["/NPU:0", "/NPU:1"])`).
MultiWorkerMirroredStrategy picks its local devices itself and knows only GPUs and TPUs: with
neither, every worker would train on its CPU. install() makes it take the worker's visible NPUs
instead (all of them, one replica each), so `tf.distribute.MultiWorkerMirroredStrategy()` runs
on the NPUs unchanged; hiding the NPUs (`tf.config.set_visible_devices([], "NPU")`) keeps the
CPU. The collectives themselves are TensorFlow's (CollectiveReduceV2 / GatherV2 / Bcast over its
gRPC runtime); their merge ops run as NPU kernels.
"""
from tensorflow.python.distribute import collective_all_reduce_strategy as _collective
from tensorflow.python.eager import context as _context

_tf_local_devices = _collective.CollectiveAllReduceExtended._initialize_local_devices


def _visible_npus():
    # Physical and visible devices only: the strategy configures collectives in the eager
    # context after choosing devices, so this must not initialize the context.
    ctx = _context.context()
    return [d for d in ctx.get_visible_devices("NPU") if d in ctx.list_physical_devices("NPU")]


def _local_devices(self, cluster_resolver, worker_device):
    devices, kind = _tf_local_devices(self, cluster_resolver, worker_device)
    npus = _visible_npus() if kind == "CPU" else []
    if not npus:
        return devices, kind
    return tuple(f"{worker_device}/device:NPU:{i}" for i in range(len(npus))), "NPU"


def install():
    """Lets MultiWorkerMirroredStrategy choose the worker's NPUs (idempotent)."""
    _collective.CollectiveAllReduceExtended._initialize_local_devices = _local_devices
