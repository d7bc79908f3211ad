"""Lowering: the graph becomes a kernel sequence in execution (topological) order.

Each op node becomes one kernel named after its TF op with its data inputs; its const inputs
are already folded into its attrs (kernel_attrs). Const nodes become constant values where a
kernel reads them as data or they are outputs; Consts that only fed const inputs vanish.
"""
import dataclasses

from graph_engine import ops
from graph_engine.compiler.errors import CompileError
from graph_engine.compiler.kernel_attrs import kernel_attrs, split_inputs

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


def run(c):
    g = c.graph
    args, retvals = g.args(), g.retvals()
    for i, n in enumerate(args + retvals):
        expect = i if i < len(args) else i - len(args)
        if n.attr("index") != expect:
            raise CompileError(f"{n.op} indices must be 0..n-1, found {n.attr('index')} at "
                               f"position {expect}", n.name, n.op)
    kernels, used = [], set()
    for node in g.topo_order():
        if node.op in STRUCTURAL:
            continue
        op = ops.get(node.op)
        if not op.runtime_kernel:          # earlier passes fold or remove these
            raise CompileError(f"op {node.op} has no runtime kernel and was neither folded nor "
                               f"eliminated", node.name, node.op)
        data = split_inputs(node, op)[0]
        kernels.append(Kernel(node.op, node.name, data, list(node.outputs),
                              kernel_attrs(node, op)))
        used.update(data)
    outputs = [r.inputs[0] for r in retvals]
    used.update(outputs)
    constants = [v for n in g.topo_order() if n.op == "Const" for v in n.outputs if v in used]
    c.program = Program(inputs=[a.outputs[0] for a in args], outputs=outputs,
                        input_names=[a.name for a in args], output_names=[r.name for r in retvals],
                        kernels=kernels, constants=constants)
