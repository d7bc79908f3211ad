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
Values are computed in float32 (inputs broadcast, NumPy rules, to the output shape, which all
outputs share); inputs are float32/float16/bfloat16/bool or int32/int64. Integers are exact in
float32 only through a Cast to float32, so any other instruction on integers is integer math
(ops with the trait integer_math, all operands integer registers, wrap-around as TF's
kernels) and only on single-element values: an optimizer's step counter, computed once per
run. The reference below interprets the same program with the TF ops' own numpy references, so it is the specification
of the C++ kernel (kernels/fused_elementwise.cc).
"""
import numpy as np

from graph_engine.ops import dtypes as dt
from graph_engine.ops.base import Op, broadcast, get, has, having, register

VALUE_DTYPES = (dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16, dt.DT_BOOL)
# Integer values: a Cast to float32 of them is exact (float32(x), what the Cast kernel stores);
# ops with the trait integer_math are integer math on them (single elements only).
INT_TO_FLOAT = (dt.DT_INT32, dt.DT_INT64)
COMPARISONS = ("Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual")


def instruction(op):
    """The registered op an instruction `op` names, or ValueError listing the fusible ones (the
    ops with the trait `fusible`; each has a functor in runtime/kernels/elementwise_functors.h
    with the same float formula as its own kernel)."""
    if not has(op, "fusible"):
        raise ValueError(f"NpuElementwise: unknown instruction {op!r}; allowed: "
                         f"{', '.join(having('fusible'))}")
    return get(op)


def parse(program):
    """[(op, [("r" | "k", index), ...])] of a program string; ValueError naming what is wrong."""
    out = []
    for text in program.split(";"):
        op, *operands = text.split()
        arity = instruction(op).arity
        if arity not in (-1, len(operands)) or not operands:
            raise ValueError(f"NpuElementwise: {op} takes {arity} operands, got {text!r}")
        try:
            out.append((op, [(o[0], int(o[1:])) for o in operands if o[0] in "rk"]))
        except ValueError:
            raise ValueError(f"NpuElementwise: bad operand in {text!r} (rN or kN)") from None
        if len(out[-1][1]) != len(operands):
            raise ValueError(f"NpuElementwise: bad operand in {text!r} (rN or kN)")
    return out


def _int_op(op, args, dtype):
    """Integer math on int64 registers, wrapping as TF's kernels do; comparisons give 0/1."""
    if not has(op, "integer_math") or dtype not in INT_TO_FLOAT + (dt.DT_BOOL,) \
            or (op in COMPARISONS) != (dtype == dt.DT_BOOL):
        raise ValueError(f"NpuElementwise: {op} to {dt.name(dtype)} on integers is not supported; "
                         f"integer instructions: {', '.join(having('integer_math'))}")
    if any(np.size(a) != 1 for a in args):
        raise ValueError(f"NpuElementwise: integer {op} needs single-element operands")
    a = [np.asarray(x, np.int64) for x in args]
    with np.errstate(over="ignore"):
        y = {"Neg": lambda: -a[0], "Add": lambda: a[0] + a[1], "AddV2": lambda: a[0] + a[1],
             "Sub": lambda: a[0] - a[1], "Mul": lambda: a[0] * a[1], "Cast": lambda: a[0],
             "Maximum": lambda: np.maximum(a[0], a[1]), "Minimum": lambda: np.minimum(a[0], a[1]),
             "Equal": lambda: a[0] == a[1], "NotEqual": lambda: a[0] != a[1],
             "Greater": lambda: a[0] > a[1], "GreaterEqual": lambda: a[0] >= a[1],
             "Less": lambda: a[0] < a[1], "LessEqual": lambda: a[0] <= a[1]}[op]()
    if dtype == dt.DT_BOOL:
        return np.asarray(y, np.float32)
    return np.asarray(y).astype(np.int32 if dtype == dt.DT_INT32 else np.int64).astype(np.int64)


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
        regs = [np.asarray(x, np.int64 if np.asarray(x).dtype.kind in "iu" else np.float32) for x in xs]
        consts = list(attrs.get("constants", ()))
        dtypes = attrs["dtypes"]
        for (op, operands), dtype in zip(parse(attrs["program"]), dtypes):
            args = [regs[i] if kind == "r" else np.float32(consts[i]) for kind, i in operands]
            integer = all(a.dtype == np.int64 for a in args)
            if integer and not (op == "Cast" and dtype == dt.DT_FLOAT):
                regs.append(_int_op(op, args, dtype))
                continue
            if any(a.dtype == np.int64 for a in args) and not (op == "Cast" and dtype == dt.DT_FLOAT):
                raise ValueError(f"NpuElementwise: {op} mixes integer and other operands; integers "
                                 "may only be Cast to float32 or read by integer instructions")
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
