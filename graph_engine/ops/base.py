"""The op registry: one small class per TF op the NPU implements.

An op class declares what the partitioner, the compiler and the C++ plugin need to know:

    type_attrs    allowed DataTypes per type attr ("T": FLOAT, ...)
    const_inputs  input args that must be compile-time constants (shape, axis, perm ...); the
                  compiler folds them into int-list kernel attrs named after the arg, and TF
                  keeps them in host memory
    shapes()      output shapes from the data-input shapes and the kernel attrs
    compute()     the numpy reference: constant folding and the reference executor run it, and
                  the C++ kernels are checked against it
    traits        what the passes may do with it (fusible, layout_agnostic, forwards_input ...,
                  below); passes ask the registry (`having`, `has`), never keep lists of ops, and
                  the C++ kernels read the same traits from op_traits.inc, generated from here

Adding an op: CONTRIBUTING.md, "How to add an op".

Both shapes() and compute() see exactly what a runtime kernel sees: the data inputs (const
inputs removed) and the kernel attrs (TF attrs as plain Python values plus the const inputs as
flat lists; see docs/compiled_model_format.md).
"""
import numpy as np

from graph_engine.ops import dtypes as dt

FLOAT = (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16)
INT = (dt.DT_INT32, dt.DT_INT64)
NUMBER = FLOAT + INT
ALL = NUMBER + (dt.DT_BOOL,)
BOOL = (dt.DT_BOOL,)
COMPLEX = (dt.DT_COMPLEX64,)         # only where FFT gradients need it (graph_engine/ops/fft.py)
INDEX = INT                          # Tidx, Tshape, out_type ...: index types

_REGISTRY = {}
_HAVING = {}                 # trait -> having(trait)


class Op:
    name = None              # TF op type; the class name unless set
    type_attrs = {}          # type attr -> allowed DataTypes (a list(type) attr: each element)
    const_inputs = ()        # input arg names folded into kernel attrs at compile time
    trivial = False          # computes nothing (Identity, NoOp ...): not worth a cluster alone
    foldable = True          # constant folding may evaluate it
    widen = True             # compute float16/bfloat16 inputs in float32 (False: raw storage)
    runtime_kernel = True    # False: compiled models never contain it (always folded/removed)
    internal = False         # a GE kernel made by compiler passes (fusion, layout), not a TF op:
                             # never partitioned, never registered with TensorFlow
    checks_values = False    # its kernel rejects bad input values (an index out of range) even
                             # when its result is empty: that result is computed, never assumed
    inplace = False          # its kernel may write its output over an input of the same shape and
                             # dtype (each element read before it is written): memory planning
                             # lets the output take that input's slot when the input dies there

    # Elementwise math (runtime/kernels/elementwise_functors.h holds one functor per formula)
    elementwise_kernel = False  # its kernel is its functor applied elementwise with broadcasting,
                             # registered from op_traits.inc (no C++ to write but the functor)
    functor = None           # its functor there; defaults to the op's name when any of
                             # elementwise_kernel, fusible, epilogue is set
    arity = None             # number of inputs of an elementwise op; -1: any number (AddN)
    bool_output = False      # an elementwise kernel's result is bool (comparisons, IsNan ...)
    int_check = None         # what an elementwise kernel rejects in integer right operands, as
                             # TF does: "nonzero_rhs", "nonzero_rhs_truncate" (InternalError),
                             # "nonnegative_rhs" (integer powers)
    fusible = False          # an NpuElementwise chain may hold it (passes/fuse_elementwise.py)
    integer_math = False     # fusible also as exact int64 math on single elements (a step counter)
    layout_agnostic = False  # its kernel runs on NC1HWC0 storage as if it were ND (elementwise_5hd.cc)
    epilogue = False         # a fused contraction's epilogue may apply it, as activation = its name
    gradient_of = None       # the activation this op is the gradient of (ReluGrad: "Relu"), so
                             # NpuFusedActivationGradBiasAddGrad may compute it (with its functor)
    gradient_inputs = (0, 1)  # positions of (the incoming gradient, the forward value)
    # What the graph passes may rewrite
    forwards_input = False   # output i is input i (Identity ...): eliminate_identities removes it
    reshapes = False         # output 0 is input 0's elements in another shape (Reshape ...)
    commutative_add = False  # x + y (Add, AddV2): fusion patterns and algebra match it as a sum
    mixlist = None           # mixed precision: "white" (reduce), "black" (keep fp32), "gray"
                             # (follow the inputs); None: not on a list (compiler/mixlist.py)

    @property
    def aliases_input(self):
        """Its output can share its input's memory: no copy once lowered (passes/lower.py)."""
        return self.forwards_input or self.reshapes

    def shapes(self, shapes, attrs):
        """Output shapes (tuples) from the data-input shapes and the kernel attrs."""
        raise NotImplementedError(f"{self.name}: no shape function")

    def compute(self, xs, attrs):
        """numpy reference: data inputs -> an array or a list of arrays."""
        raise NotImplementedError(f"{self.name}: no reference implementation")

    def value_from_shapes(self, shapes, attrs, out_dtypes):
        """Output values that follow from input shapes alone (Shape, Size ...), else None."""
        return None

    def unsupported_dtype(self, attrs):
        """None if the node's type attrs are allowed, else the reason why not."""
        for attr, allowed in self.type_attrs.items():
            if attr not in attrs:
                continue
            got = attrs[attr]
            for t in (got if isinstance(got, (list, tuple)) else [got]):
                if t not in allowed:
                    return (f"dtype {dt.name(t)} not supported for op {self.name} (attr {attr}; "
                            f"allowed: {', '.join(dt.name(a) for a in allowed)})")
        return None


def register(cls):
    """Class decorator: adds one instance of `cls` to the registry under its TF op name."""
    cls.name = cls.__dict__.get("name") or cls.__name__
    if (cls.elementwise_kernel or cls.fusible or cls.epilogue or cls.gradient_of) \
            and cls.functor is None:
        cls.functor = cls.name
    if cls.fusible and cls.arity is None:
        raise ValueError(f"op {cls.name} is fusible but declares no arity")
    if cls.name in _REGISTRY:
        raise ValueError(f"op {cls.name} registered twice")
    _REGISTRY[cls.name] = cls()
    _HAVING.clear()
    return cls


def get(op_type):
    """The registered op, or None."""
    return _REGISTRY.get(op_type)


def has(op_type, trait):
    """Whether the registered op `op_type` has `trait` (an Op attribute above); False for an op
    the registry does not know."""
    op = _REGISTRY.get(op_type)
    return op is not None and bool(getattr(op, trait))


def having(trait):
    """The names (a sorted tuple) of the registered ops, internal ones included, with `trait`.
    Passes ask per node, so the answer is kept until the next register()."""
    if trait not in _HAVING:
        _HAVING[trait] = tuple(name for name, op in sorted(_REGISTRY.items())
                               if getattr(op, trait))
    return _HAVING[trait]


def registered():
    """The TF ops the NPU implements, by name, sorted (GE-internal kernels excluded)."""
    return dict(sorted((k, v) for k, v in _REGISTRY.items() if not v.internal))


def internal():
    """GE-internal kernels (fused ops, TransData ...) by name, sorted."""
    return dict(sorted((k, v) for k, v in _REGISTRY.items() if v.internal))


# ---- helpers shared by the op files ---------------------------------------------------------

def scalar(attrs, name):
    """A const input that TF defines as a scalar (stored as a one-element list)."""
    v = attrs[name]
    return int(v[0]) if isinstance(v, (list, tuple, np.ndarray)) else int(v)


def norm_axis(axis, rank, what="axis"):
    """`axis` in [-rank, rank) as a non-negative index; a scalar (rank 0) has no axis."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range [{-rank}, {rank}) for an input of "
                         f"rank {rank}")
    return axis % rank


def check_same_shapes(what, shapes):
    """Ops whose inputs TF requires to have one shape (no broadcasting)."""
    if any(tuple(s) != tuple(shapes[0]) for s in shapes):
        raise ValueError(f"{what}: inputs must have the same shape, got "
                         f"{', '.join(str(list(s)) for s in shapes)}")


def broadcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"shapes {' and '.join(str(list(s)) for s in shapes)} "
                         f"are not broadcastable") from None


def view_of(shape):
    """A zero-byte array of `shape` (for shape functions that reuse numpy's indexing rules)."""
    return np.broadcast_to(np.zeros((), np.int8), tuple(shape))


def evaluate(op, xs, attrs, out_dtypes):
    """Runs `op`'s reference with the NPU's numerics: float16/bfloat16 are storage types, so
    inputs are widened to float32 and results rounded to the output dtype on store."""
    narrow = (np.float16, dt.numpy_dtype(dt.DT_BFLOAT16))
    wide = [x.astype(np.float32) if op.widen and x.dtype in narrow else x for x in xs]
    with np.errstate(all="ignore"):      # inf/nan follow IEEE like the device does
        out = op.compute(wide, attrs)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(out) != len(out_dtypes):
        raise ValueError(f"{op.name} produced {len(out)} outputs, expected {len(out_dtypes)}")
    return [np.asarray(o).astype(dt.numpy_dtype(t), copy=False) for o, t in zip(out, out_dtypes)]
