"""Lowering: the graph becomes a kernel sequence in execution (topological) order.

Each op node becomes one kernel named after its TF op with its data inputs; its const inputs
are already folded into its attrs (kernel_attrs). Const nodes become constant values where a
kernel reads them as data or they are outputs; Consts that only fed const inputs vanish.

Ops that only reinterpret their input (Reshape, Squeeze, ExpandDims, identities) on ND values
become aliases instead of kernels: the output shares its input's storage, no copy runs
(plan_memory keeps the shared storage alive as long as any of its names is used).

Compile option `deterministic` adds the executor attribute `_deterministic` (bool) to every
kernel: the runtime then partitions the kernel's work (row blocks, split sums and their
combination order) for a fixed thread count, so results do not depend on NPU_NUM_THREADS
(docs/compiled_model_format.md).
"""
import dataclasses

from graph_engine import ops
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.kernel_attrs import kernel_attrs, split_inputs
from graph_engine.ops.formats import Format

STRUCTURAL = ("_Arg", "_Retval", "Const", "NoOp")


@dataclasses.dataclass
class Kernel:
    kernel: str
    node: str
    inputs: list           # Values
    outputs: list          # Values
    attrs: dict


@dataclasses.dataclass
class Program:
    inputs: list           # Value per model input (the _Arg outputs, by index)
    outputs: list          # Value per model output (the _Retval inputs, by index)
    input_names: list
    output_names: list
    kernels: list
    constants: list        # Values of Const nodes the model stores
    aliases: dict = dataclasses.field(default_factory=dict)  # Value -> the Value it shares storage with


def run(c):
    g = c.graph
    args, retvals = g.args(), g.retvals()
    for i, n in enumerate(args + retvals):
        expect = i if i < len(args) else i - len(args)
        if n.attr("index") != expect:
            raise CompileError(f"{n.op} indices must be 0..n-1, found {n.attr('index')} at "
                               f"position {expect}", n.name, n.op)
    kernels, used, aliases = [], set(), {}
    executor_attrs = {"_deterministic": True} if c.options.get("deterministic") else {}
    for node in g.topo_order():
        if node.op in STRUCTURAL:
            continue
        op = ops.get(node.op)
        if not op.runtime_kernel:          # earlier passes fold or remove these
            raise CompileError(f"op {node.op} has no runtime kernel and was neither folded nor "
                               f"eliminated", node.name, node.op)
        data = split_inputs(node, op)[0]
        # Graph inputs are not aliased: the reference executor holds them as the caller's arrays.
        if (ops.has(node.op, "aliases_input") and all(_same_storage(x, y) for x, y in zip(data, node.outputs))
                and not any(_source(x, aliases).node.op == "_Arg" for x in data)):
            aliases.update(zip(node.outputs, data))
            used.update(data)
            continue
        kernels.append(Kernel(node.op, node.name, data, list(node.outputs),
                              {**kernel_attrs(node, op), **executor_attrs}))
        used.update(data)
    outputs = [r.inputs[0] for r in retvals]
    used.update(outputs)
    constants = [v for n in g.topo_order() if n.op == "Const" for v in n.outputs if v in used]
    c.program = Program(inputs=[a.outputs[0] for a in args], outputs=outputs,
                        input_names=[a.name for a in args], output_names=[r.name for r in retvals],
                        kernels=kernels, constants=constants, aliases=aliases)


def _source(v, aliases):
    """The value whose bytes `v` names."""
    while v in aliases:
        v = aliases[v]
    return v


def _same_storage(x, y):
    """Whether y can be x's bytes under another name: plain row-major storage of equal size."""
    nd = (None, Format.ND)
    return x.format in nd and y.format in nd and x.dtype == y.dtype and _elements(x) == _elements(y)


def _elements(v):
    n = 1
    for d in v.shape:
        n *= d
    return n
