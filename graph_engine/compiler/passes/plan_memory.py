"""Memory planning: every kernel output that is not written straight into a caller's output
buffer gets an offset in one scratch arena.

Liveness runs over the kernel order: a value lives from the kernel that writes it to the last
kernel that reads it. Offsets: best fit (each value takes the smallest gap between
already-placed values whose lifetimes overlap its own), visiting values in two orders -- largest
first (TFLite/XLA's greedy by size) and first-written first -- and keeping the smaller arena,
as GE keeps the better of its assigners. The plan records the lower bound for this order: the
largest sum of live bytes at a step.
"""
import dataclasses

from graph_engine.compiler import dtypes as dt
from graph_engine.compiler.errors import CompileError
from graph_engine.compiler.model_format import Kind

ALIGNMENT = 64


def align(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def nbytes(v):
    n = dt.itemsize(v.dtype)
    for d in v.shape:
        n *= d
    return n


@dataclasses.dataclass
class Plan:
    kind: dict              # Value -> Kind
    where: dict             # Value -> input index / output index / arena offset (consts: serialize)
    lifetime: dict          # arena Value -> (first kernel, last kernel)
    arena_bytes: int
    lower_bound_bytes: int  # max over steps of the aligned bytes live at once
    no_reuse_bytes: int     # every arena value in its own slot


def lifetimes(program, arena_values):
    life = {}
    for step, k in enumerate(program.kernels):
        for v in k.outputs:
            if v in arena_values:
                life[v] = (step, step)
        for v in k.inputs:
            if v in life:
                life[v] = (life[v][0], step)
    return life


ORDERS = {
    "largest_first": lambda life, size: lambda v: (-size[v], life[v][0]),
    "first_written_first": lambda life, size: lambda v: (life[v][0], -size[v]),
}


def best_fit(life, size, order):
    """Offsets for the values of `life` visited in `order`, each in the smallest fitting gap."""
    placed, offsets = [], {}            # placed: (offset, end, first, last)
    for v in sorted(life, key=order):
        first, last = life[v]
        busy = sorted((o, e) for o, e, f, l in placed if f <= last and first <= l)
        best, cursor = None, 0
        for o, e in busy:
            if o - cursor >= size[v] and (best is None or o - cursor < best[1]):
                best = (cursor, o - cursor)
            cursor = max(cursor, e)
        offset = best[0] if best else cursor
        offsets[v] = offset
        placed.append((offset, offset + size[v], first, last))
    return offsets


def run(c):
    p = c.program
    kind, where = {}, {}
    for i, v in enumerate(p.inputs):
        kind[v], where[v] = Kind.INPUT, i
    for v in p.constants:
        kind.setdefault(v, Kind.CONST)
    produced = [v for k in p.kernels for v in k.outputs]
    produced_set = set(produced)
    for i, v in enumerate(p.outputs):
        if v not in kind and v in produced_set:        # a kernel writes the caller's buffer
            kind[v], where[v] = Kind.OUTPUT, i
    arena = [v for v in produced if v not in kind]
    for v in arena:
        kind[v] = Kind.ARENA
    size = {v: align(max(nbytes(v), 1)) for v in arena}
    life = lifetimes(p, set(arena))
    end = lambda offsets: max((offsets[v] + size[v] for v in arena), default=0)
    offsets = min((best_fit(life, size, make(life, size)) for make in ORDERS.values()), key=end)
    where.update(offsets)
    live_at = [0] * len(p.kernels)
    for v, (first, last) in life.items():
        for step in range(first, last + 1):
            live_at[step] += size[v]
    c.plan = Plan(kind=kind, where=where, lifetime=life,
                  arena_bytes=end(offsets),
                  lower_bound_bytes=max(live_at, default=0), no_reuse_bytes=sum(size.values()))
    limit = c.options.get("graph_memory_max_size")
    if limit and c.plan.arena_bytes > limit:
        raise CompileError(f"graph {c.name!r} needs {c.plan.arena_bytes} bytes of working memory "
                           f"(at least {c.plan.lower_bound_bytes} live at once in this order); "
                           f"graph_memory_max_size is {limit}")
