"""A node of the GE graph IR and the values it produces.

A Node mirrors a tensorflow.NodeDef: op type, device, attrs (AttrValue protos, kept for a
lossless export), data inputs (Values of other nodes) and control inputs (Nodes). Each output is
a Value with a dtype and, once shape inference ran, a static shape and possibly a known constant.
"""
from graph_engine.compiler import attrs as attr_util


class Value:
    """Output `index` of `node`.

    `origin` names the TensorFlow tensor ("node:index" of the graph the compiler was given, or
    for a cluster's _Arg the tensor outside that feeds it) whose value this one holds, possibly
    in another storage format or precision. Import sets it; a pass that makes a new value take
    an old one's uses (replace_uses) hands it on, and values of GE-inserted conversions
    (TransData, precision Casts) inherit their input's at serialization. Tensor dumps and
    npu_device.tools.compare_dump use it to find the TF tensor a dumped value should equal.
    """
    __slots__ = ("node", "index", "dtype", "shape", "const", "format", "origin")

    def __init__(self, node, index, dtype=None):
        self.node, self.index, self.dtype = node, index, dtype
        self.shape = None        # tuple of ints once inferred
        self.const = None        # numpy array when the value is known at compile time
        self.format = None       # storage format (model_format.Format) once layout ran; None: ND
        self.origin = None       # TF tensor name this value equals, when known

    @property
    def ref(self):
        """The TF input string that names this value."""
        return self.node.name if self.index == 0 else f"{self.node.name}:{self.index}"

    def __repr__(self):
        return f"Value({self.ref}, dtype={self.dtype}, shape={self.shape})"


def hand_on_origin(old, new):
    """`new` takes over `old`'s uses, so it holds the same tensor: it keeps its own origin if it
    has one, else takes `old`'s."""
    if new is not None and new.origin is None:
        new.origin = old.origin


class Node:
    source = None          # (NodeDef, its attrs dict) when imported: export copies it whole

    def __init__(self, name, op, *, device="", attrs=None, inputs=(), control_inputs=(),
                 output_dtypes=(), extras=None):
        self.name, self.op, self.device = name, op, device
        self.attrs = dict(attrs) if attrs else {}  # name -> AttrValue proto
        self.inputs = list(inputs)                # Values
        self.control_inputs = list(control_inputs)  # Nodes
        self.outputs = [Value(self, i, t) for i, t in enumerate(output_dtypes)]
        self.extras = extras                      # NodeDef with experimental_* fields, or None

    def attr(self, name, default=None):
        av = self.attrs.get(name)
        return default if av is None else attr_util.to_python(av)

    def set_attr(self, name, value=None, **kind):
        self.attrs[name] = attr_util.make(value, **kind)

    def python_attrs(self, names=None):
        """The attrs as Python values; only those of `names` (the ones present) if given."""
        if names is None:
            return {k: attr_util.to_python(v) for k, v in self.attrs.items()}
        return {k: attr_util.to_python(self.attrs[k]) for k in names if k in self.attrs}

    def __repr__(self):
        return f"Node({self.name!r}, {self.op}, in={[v.ref for v in self.inputs]})"
