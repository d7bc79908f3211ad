"""NpuElementwise: a chain of elementwise ops fused into one kernel (passes/fuse_elementwise.py)
that makes a single pass over memory. docs/memory.md, "Elementwise chain fusion".

Kernel attrs:
    program    "Op operand ...;Op operand ..." -- one instruction per TF op of the chain; an
               operand is rN (register N: inputs first, then one register per instruction) or
               kN (constants[N])
    constants  float list: scalar constants of the chain (exact in float32)
    dtypes     int list: the DataType of each instruction's result; float16/bfloat16 results
               are rounded to that type as the unfused op would store them, bool ones are 0/1
    results    int list: the register each output stores
Every value is computed in float32 (inputs broadcast, NumPy rules, to the output shape, which
all outputs share); inputs are float32/float16/bfloat16/bool, or int32/int64 read only by a
Cast to float32. The reference below interprets the same program with the TF ops' own numpy
references, so it is the specification of the C++ kernel (kernels/fused_elementwise.cc).
"""
import numpy as np

from graph_engine.compiler import dtypes as dt
from graph_engine.ops.base import Op, broadcast, get, register

# TF op -> number of operands (None: any, AddN). Every op here has a C++ counterpart with the
# same float formula as its own kernel.
ARITY = {
    **dict.fromkeys(["Neg", "Abs", "Square", "Sign", "Exp", "Log", "Log1p", "Expm1", "Sqrt",
                     "Rsqrt", "Reciprocal", "Inv", "Floor", "Ceil", "Round", "Relu", "Relu6",
                     "Sigmoid", "Tanh", "Softsign", "Elu", "Selu", "Softplus", "Cast",
                     "LogicalNot"], 1),
    **dict.fromkeys(["Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Maximum",
                     "Minimum", "SquaredDifference", "Pow", "Equal", "NotEqual", "Greater",
                     "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr",
                     "ReluGrad", "Relu6Grad", "SigmoidGrad", "TanhGrad", "EluGrad",
                     "SeluGrad", "SoftplusGrad", "ReciprocalGrad", "RsqrtGrad", "SqrtGrad",
                     "BiasAdd"], 2),
    "SelectV2": 3, "Select": 3, "AddN": None,
}
VALUE_DTYPES = (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16, dt.DT_BOOL)
# Integer inputs may only feed a Cast to float32 (an optimizer's step counter): the register
# then holds float32(x), exactly what the Cast kernel stores.
INT_TO_FLOAT = (dt.DT_INT32, dt.DT_INT64)


def parse(program):
    """[(op, [("r" | "k", index), ...])] of a program string; ValueError naming what is wrong."""
    out = []
    for text in program.split(";"):
        op, *operands = text.split()
        if op not in ARITY:
            raise ValueError(f"NpuElementwise: unknown instruction {op!r}; allowed: "
                             f"{', '.join(sorted(ARITY))}")
        if ARITY[op] not in (None, len(operands)) or not operands:
            raise ValueError(f"NpuElementwise: {op} takes {ARITY[op]} operands, got {text!r}")
        try:
            out.append((op, [(o[0], int(o[1:])) for o in operands if o[0] in "rk"]))
        except ValueError:
            raise ValueError(f"NpuElementwise: bad operand in {text!r} (rN or kN)") from None
        if len(out[-1][1]) != len(operands):
            raise ValueError(f"NpuElementwise: bad operand in {text!r} (rN or kN)")
    return out


def _round(x, dtype):
    if dtype == dt.DT_BOOL:
        return (x != 0).astype(np.float32)
    return x.astype(dt.numpy_dtype(dtype)).astype(np.float32)


@register
class NpuElementwise(Op):
    internal = True
    inplace = True           # each tile is read into registers before any output is stored
    type_attrs = {}

    def shapes(self, shapes, attrs):
        return [broadcast(*shapes)] * len(attrs["results"])

    def compute(self, xs, attrs):
        shape = broadcast(*[x.shape for x in xs])
        regs = [np.asarray(x, np.float32) for x in xs]
        consts = list(attrs.get("constants", ()))
        dtypes = attrs["dtypes"]
        for (op, operands), dtype in zip(parse(attrs["program"]), dtypes):
            args = [regs[i] if kind == "r" else np.float32(consts[i]) for kind, i in operands]
            if op == "Cast":
                y = args[0]
            elif op in ("Select", "SelectV2"):
                y = np.where(args[0] != 0, args[1], args[2])
            elif op == "BiasAdd":             # NHWC only: the bias runs along the last axis
                y = args[0] + args[1]
            else:
                y = get(op).compute([np.asarray(a, np.float32) for a in args], {})
            regs.append(_round(np.asarray(y, np.float32), dtype))
        if len(regs) != len(xs) + len(dtypes):
            raise ValueError("NpuElementwise: dtypes must name one dtype per instruction")
        return [np.broadcast_to(regs[r], shape).copy() for r in attrs["results"]]
