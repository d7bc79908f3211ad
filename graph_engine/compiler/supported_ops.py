"""Generates graph_engine/ops/supported_ops.json from the op registry: the list of ops the TF
plugin registers NPU kernels for, so TF's placer puts them on the NPU.

    python -m graph_engine.compiler.supported_ops            # rewrite the file
    python -m graph_engine.compiler.supported_ops --check    # exit 1 if it is out of date

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

PATH = os.path.join(os.path.dirname(ops.__file__), "supported_ops.json")
COMMAND = "python -m graph_engine.compiler.supported_ops"


def _enum_name(t):
    from tensorflow.core.framework import types_pb2
    return types_pb2.DataType.Name(t)


@functools.lru_cache(maxsize=None)       # TF's kernel registry is slow to query
def _tf_default_kernels(op_name):
    from tensorflow.python.framework import kernels
    combos = []
    for k in kernels.get_registered_kernels_for_op(op_name).kernel:
        if k.device_type != "DEFAULT":
            continue
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


def main(argv):
    text = render()
    if "--check" in argv:
        current = open(PATH).read() if os.path.exists(PATH) else ""
        if current != text:
            print(f"{PATH} is out of date; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    with open(PATH, "w") as f:
        f.write(text)
    print(f"wrote {PATH}: {len(ops.registered())} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
