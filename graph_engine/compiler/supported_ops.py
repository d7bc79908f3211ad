"""Generates two files from the op registry, so that an op's facts live on its class alone:

  graph_engine/ops/supported_ops.json  the ops the TF plugin registers NPU kernels for, so TF's
                                       placer puts them on the NPU (below)
  graph_engine/ops/op_traits.inc       the traits the C++ kernels read (an X-macro table: the
                                       NpuElementwise interpreter's instructions, the NC1HWC0
                                       agnostic set, the contraction epilogue's activations)

    python -m graph_engine.compiler.supported_ops            # rewrite both
    python -m graph_engine.compiler.supported_ops --check    # exit 1 if either is out of date

Per op:
  type_attrs           type attr -> allowed dtypes (TF enum names; "dtypes" maps them to ints).
                       For a list(type) attr every element must be allowed.
  host_memory_inputs   input args that are compile-time constants (shape, axis, perm ...): the
                       kernel reads them on the host when it compiles.
  host_memory_outputs  outputs kept in host memory (none so far).
  runtime_kernel       false: the compiler always folds or removes the op (shape queries,
                       identities, Const ...), so compiled models never name it as a kernel and
                       the C++ runtime needs no kernel for it.
  tf_default_kernels   dtype combinations for which TF itself already registers a
                       DEVICE_DEFAULT kernel; registering them again would make TF's kernel
                       lookup ambiguous, so the plugin must skip them.
"""
import functools
import json
import os
import sys

from graph_engine import ops
from graph_engine.ops import fused
from graph_engine.ops.base import COMPLEX

PATH = os.path.join(os.path.dirname(ops.__file__), "supported_ops.json")
TRAITS_PATH = os.path.join(os.path.dirname(ops.__file__), "op_traits.inc")
COMMAND = "python -m graph_engine.compiler.supported_ops"


def _enum_name(t):
    from tensorflow.core.framework import types_pb2
    return types_pb2.DataType.Name(t)


@functools.lru_cache(maxsize=None)       # TF's kernel registry is slow to query
def _tf_default_kernels(op_name):
    from tensorflow.python.framework import kernels
    combos = []
    for k in kernels.get_registered_kernels_for_op(op_name).kernel:
        if k.device_type != "DEFAULT" or k.label:   # a labelled kernel (DataFormatDimMap's
            continue                                 # "host") serves only nodes asking for it
        combo = {c.name: _enum_name(c.allowed_values.list.type[0]) for c in k.constraint
                 if len(c.allowed_values.list.type) == 1}
        if combo not in combos:
            combos.append(combo)
    return sorted(combos, key=lambda c: sorted(c.items()))


def generate():
    used = set()
    table = {}
    for name, op in ops.registered().items():
        type_attrs = {a: [_enum_name(t) for t in allowed]
                      for a, allowed in sorted(op.type_attrs.items())}
        for allowed in op.type_attrs.values():
            used.update(allowed)
        table[name] = {"type_attrs": type_attrs,
                       "host_memory_inputs": list(op.const_inputs),
                       "host_memory_outputs": [],
                       "runtime_kernel": op.runtime_kernel,
                       "tf_default_kernels": _tf_default_kernels(name)}
    return {"format_version": 1,
            "generated_by": COMMAND,
            "dtypes": {_enum_name(t): t for t in sorted(used)},
            "ops": table}


def render():
    return json.dumps(generate(), indent=1, sort_keys=True) + "\n"


_TRAITS_HEADER = f"""\
// Generated from the op registry (graph_engine/ops) by: {COMMAND}
// Do not edit: an op's traits are declared on its class; `... --check` (run by the tests) fails
// when this file is stale.
//
// NPU_ELEMENTWISE_KERNEL(tf_op, functor, arity, types, bool_output, int_check): ops whose kernel
//   is the functor applied elementwise with broadcasting (elementwise.h); types is the
//   elementwise.h type set of the op's dtypes, int_check an IntCheck member.
// NPU_FUSIBLE(tf_op, functor, arity, integer): elementwise ops an NpuElementwise chain may hold.
//   functor names the scalar functor in kernels/elementwise_functors.h; arity -1 is any number
//   (AddN); integer 1: also exact int64 math on single elements (an optimizer's step counter).
// NPU_LAYOUT_AGNOSTIC(tf_op): its kernel runs on NC1HWC0 storage as if it were ND.
// NPU_ACTIVATION_GRAD(activation, functor, grad_first): the gradient functor of an activation
//   (NpuFusedActivationGradBiasAddGrad); grad_first 1: functor(gradient, forward value), 0: the
//   other order (SigmoidGrad's (y, dy)).
// NPU_EPILOGUE_ACTIVATION(name, functor): activations a fused contraction applies in its epilogue.
// A user defines the macros it needs before including this file; the rest expand to nothing.
#ifndef NPU_ELEMENTWISE_KERNEL
#define NPU_ELEMENTWISE_KERNEL(tf_op, functor, arity, types, bool_output, int_check)
#endif
#ifndef NPU_FUSIBLE
#define NPU_FUSIBLE(tf_op, functor, arity, integer)
#endif
#ifndef NPU_LAYOUT_AGNOSTIC
#define NPU_LAYOUT_AGNOSTIC(tf_op)
#endif
#ifndef NPU_ACTIVATION_GRAD
#define NPU_ACTIVATION_GRAD(activation, functor, grad_first)
#endif
#ifndef NPU_EPILOGUE_ACTIVATION
#define NPU_EPILOGUE_ACTIVATION(name, functor)
#endif
"""


# elementwise.h's type sets, by the dtypes an op allows for its attr T
_TYPE_SETS = {ops.FLOAT: "kReal", ops.NUMBER: "kNumeric", ops.ALL: "kAllTypes", ops.INT: "kInts",
              (): "kBools", ops.FLOAT + COMPLEX: "kRealComplex",
              ops.NUMBER + COMPLEX: "kNumericComplex"}
_INT_CHECKS = {None: "kNone", "nonzero_rhs": "kNonZeroRhs",
               "nonzero_rhs_truncate": "kNonZeroRhsTruncate", "nonnegative_rhs": "kNonNegativeRhs"}


def _kernel_entry(name):
    op = ops.get(name)
    types = tuple(op.type_attrs.get("T", ()))
    if types not in _TYPE_SETS or op.int_check not in _INT_CHECKS:
        raise ValueError(f"{name}: no elementwise kernel for dtypes {types} / int_check "
                         f"{op.int_check!r}; allowed int_check: {', '.join(map(str, _INT_CHECKS))}")
    return (f'NPU_ELEMENTWISE_KERNEL("{name}", {op.functor}, {op.arity}, {_TYPE_SETS[types]}, '
            f'{str(op.bool_output).lower()}, {_INT_CHECKS[op.int_check]})')


def render_traits():
    """The text of op_traits.inc."""
    kernels = [_kernel_entry(n) for n in ops.having("elementwise_kernel")]
    fusible = [f'NPU_FUSIBLE("{n}", {ops.get(n).functor}, {ops.get(n).arity}, '
               f'{int(ops.get(n).integer_math)})' for n in ops.having("fusible")]
    agnostic = [f'NPU_LAYOUT_AGNOSTIC("{n}")' for n in ops.having("layout_agnostic")]
    grads = [f'NPU_ACTIVATION_GRAD("{a}", {op.functor}, {int(op.gradient_inputs[0] == 0)})'
             for a, op in sorted(fused.activation_grads().items())]
    epilogue = [f'NPU_EPILOGUE_ACTIVATION("{n}", {ops.get(n).functor if ops.get(n) else n})'
                for n in fused.activations()]
    undef = [f"#undef {m}" for m in ("NPU_ELEMENTWISE_KERNEL", "NPU_FUSIBLE",
                                      "NPU_LAYOUT_AGNOSTIC", "NPU_ACTIVATION_GRAD",
                                      "NPU_EPILOGUE_ACTIVATION")]
    sections = (kernels, fusible, agnostic, grads, epilogue, undef)
    return "\n\n".join([_TRAITS_HEADER.rstrip("\n"), *map("\n".join, sections)]) + "\n"


def main(argv):
    outputs = {PATH: render(), TRAITS_PATH: render_traits()}
    if "--check" in argv:
        stale = [path for path, text in outputs.items()
                 if (open(path).read() if os.path.exists(path) else "") != text]
        for path in stale:
            print(f"{path} is out of date; run: {COMMAND}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        with open(path, "w") as f:
            f.write(text)
    print(f"wrote {PATH} and {TRAITS_PATH}: {len(ops.registered())} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
