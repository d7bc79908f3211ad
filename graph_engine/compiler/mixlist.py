"""The mixed-precision op lists (allow_mix_precision_fp16 / _bf16) and modify_mixlist.

white  reduce to float16/bfloat16 (matrix ops: the cube unit computes them in fp16 with fp32
       accumulation, so they gain speed and lose little)
black  keep float32 (range- or accuracy-sensitive: exponentials, logs, reductions, losses)
gray   follow the producers: reduce only when every float input already is narrow

Like TF's auto mixed precision (allow/deny/infer lists). docs/precision.md shows this table;
tests/test_precision_pass.py keeps it in sync (`python -m graph_engine.compiler.mixlist`
prints it).
"""
from graph_engine import ops
from graph_engine.compiler.options import read_json
from graph_engine.ops.errors import CompileError


def _listed(kind):
    return frozenset(name for name, op in ops.registered().items() if op.mixlist == kind)


# Each op's list is its trait `mixlist` (graph_engine/ops); ops on no list keep float32.
WHITE = _listed("white")
CUBE = WHITE            # the matrix ops of allow_fp32_to_* and cube_fp16in_fp32out
BLACK = _listed("black")
GRAY = _listed("gray")

LISTS = ("white-list", "black-list", "gray-list")


def _parse(modify):
    if not modify or (isinstance(modify, str) and not modify.strip()):
        return {}
    try:
        where, obj = read_json(modify)
    except ValueError as e:
        raise CompileError(f"modify_mixlist: {e}") from None
    if not isinstance(obj, dict):
        raise CompileError(f"modify_mixlist: {where} is not a JSON object")
    return obj


def mix_lists(modify=None):
    """(white, black, gray) after modify_mixlist: a dict, JSON text or a JSON file path.
    An op added to one list leaves the others."""
    lists = {"white-list": set(WHITE), "black-list": set(BLACK), "gray-list": set(GRAY)}
    for name, change in _parse(modify).items():
        if name not in lists:
            raise CompileError(f"modify_mixlist: unknown list {name!r}; allowed: "
                               f"{', '.join(LISTS)}")
        lists[name] -= set(change.get("to-remove", []))
        for op in change.get("to-add", []):
            for other in lists.values():
                other.discard(op)
            lists[name].add(op)
    return lists["white-list"], lists["black-list"], lists["gray-list"]


def markdown_table():
    """The lists as the Markdown table docs/precision.md embeds."""
    rows = ["| list | ops |", "|---|---|"]
    for name, listed in (("white", WHITE), ("black", BLACK), ("gray", GRAY)):
        rows.append(f"| {name} | {', '.join(f'`{op}`' for op in sorted(listed))} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
