"""Memory planning: every kernel output that is not written straight into a caller's output
buffer gets an offset in one scratch arena.

Storage is planned per buffer, a set of values sharing bytes: an alias (lower.py: Reshape,
Squeeze, ExpandDims, identities) shares its input's buffer, and the output of an op that may run
in place (Op.inplace) takes the buffer of an input of the same storage size and format whose
last use is that kernel. A buffer holding a graph input, a constant or a graph output lives
there, not in the arena.

Values in a weight format (FRACTAL_Z, FILTER_KN) computed from graph inputs alone, and what
they are computed from on the way (`cached_conversions`), are CACHED: they live in a region of
their own that outlasts the run, so the runtime converts a weight once and reuses the result
while the input is unchanged (the caller vouches for that; docs/compiled_model_format.md).

Liveness runs over the kernel order: a buffer lives from the kernel that writes it to the last
kernel that reads any of its values. Offsets: best fit (each buffer takes the smallest gap
between already-placed buffers whose lifetimes overlap its own), visiting buffers in three
orders -- largest first (TFLite/XLA's greedy by size), first written first, and longest lived
first -- and keeping the smallest arena, as GE keeps the better of its assigners (an order
that reaches the lower bound ends the search, one that reaches the best arena so far stops).
The plan records the lower bound for this order (the largest sum of live bytes at a step) and
the bytes without any reuse (every arena value in its own slot). docs/memory.md explains the
numbers.
"""
import collections
import dataclasses

import numpy as np

from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.ops.formats import Format
from graph_engine.ops.errors import OutOfMemoryError
from graph_engine.compiler.model_format import Kind
from graph_engine.compiler.passes.infer_shapes import device_memory

ALIGNMENT = 64


def align(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def nbytes(v):
    """Storage bytes of a value: padded formats (NC1HWC0, FRACTAL_Z) store more than the
    logical elements (graph_engine/ops/layout.py)."""
    from graph_engine.ops.layout import storage_shape
    n = dt.itemsize(v.dtype)
    for d in storage_shape(v.format, v.shape, v.dtype):
        n *= d
    return n


@dataclasses.dataclass
class Plan:
    kind: dict              # Value -> Kind (of its buffer)
    where: dict             # Value -> input index / output index / arena offset (consts: serialize)
    lifetime: dict          # arena buffer (its root Value) -> (first kernel, last kernel)
    arena_bytes: int
    lower_bound_bytes: int  # max over steps of the aligned bytes live at once
    no_reuse_bytes: int     # every arena value in its own slot
    storage: dict = dataclasses.field(default_factory=dict)   # Value -> its buffer's root Value
    strategy: str = ""      # the offset order that won
    inplace: int = 0        # kernel outputs written over a dying input
    aliased: int = 0        # values sharing their input's bytes without a kernel
    cached_bytes: int = 0   # the region of CACHED values (input conversions kept between runs)
    cached_conversions: int = 0   # kernels that write them
    cached_transient: int = 0     # of their values, those sharing bytes (_place_cached)
    in_place: list = dataclasses.field(default_factory=list)  # (output, input) index pairs


class Buffers:
    """Union-find of values sharing storage; the root is the value that first holds the bytes."""

    def __init__(self):
        self.parent = {}

    def root(self, v):
        while self.parent.get(v, v) is not v:
            v = self.parent[v]
        return v

    def join(self, v, into):
        self.parent[v] = self.root(into)


def last_reads(program):
    last = {}
    for step, k in enumerate(program.kernels):
        for v in k.inputs:
            last[v] = step
    return last


def lifetimes(program, arena_roots, buffers, last_read):
    """(first, last) kernel of each arena buffer: written by its root's kernel, read to the last
    read of any value in it."""
    life = {}
    for step, k in enumerate(program.kernels):
        for v in k.outputs:
            if v in arena_roots:
                life[v] = (step, step)
    for v, step in last_read.items():
        r = buffers.root(v)
        if r in life:
            life[r] = (life[r][0], max(life[r][1], step))
    return life


ORDERS = {
    "largest_first": lambda life, size: lambda v: (-size[v], life[v][0]),
    "first_written_first": lambda life, size: lambda v: (life[v][0], -size[v]),
    "longest_lived_first": lambda life, size: lambda v: (life[v][0] - life[v][1], -size[v],
                                                         life[v][0]),
}


def best_fit(life, size, order, bound=None):
    """Offsets for the buffers of `life` visited in `order`, each in the smallest gap between
    placed buffers whose lifetimes overlap its own (else above them); None as soon as the arena
    reaches `bound` (another order's, which this one then cannot beat). Vectorized over the
    placed buffers: training graphs have thousands of buffers."""
    values = sorted(life, key=order)
    n = len(values)
    first = np.array([life[v][0] for v in values], np.int64)
    last = np.array([life[v][1] for v in values], np.int64)
    sizes = np.array([size[v] for v in values], np.int64)
    start = np.zeros(n, np.int64)
    for i in range(n):
        busy = np.nonzero((first[:i] <= last[i]) & (first[i] <= last[:i]))[0]
        if busy.size:
            by_offset = busy[np.argsort(start[busy], kind="stable")]
            lo, hi = start[by_offset], start[by_offset] + sizes[by_offset]
            cursor = np.concatenate(([0], np.maximum.accumulate(hi)[:-1]))   # end of what is below
            gap = lo - cursor
            fits = np.nonzero(gap >= sizes[i])[0]
            start[i] = cursor[fits[np.argmin(gap[fits])]] if fits.size else hi.max()
        if bound is not None and start[i] + sizes[i] >= bound:
            return None
    return {v: int(o) for v, o in zip(values, start)}


# Storage formats of contraction weights: a graph input converted into one is a weight arriving
# per step (a variable's value), worth converting once.
WEIGHT_FORMATS = (Format.FRACTAL_Z, Format.FILTER_KN)


def cached_conversions(program, buffers, kind):
    """The kernels that compute a value in a weight format from graph inputs and constants
    alone, and the kernels before them on the way (Casts, inference batch-norm folded into the
    filter): their outputs can be kept between runs. GE kernels are functions of their inputs
    (the runtime has no stateful kernels), so equal inputs give equal results."""
    def reads_only(k, computed):    # graph inputs, constants and values in `computed`
        return all(kind.get(buffers.root(x)) in (Kind.INPUT, Kind.CONST)
                   or buffers.root(x) in computed for x in k.inputs)

    from_inputs = set()             # outputs of kernels that read graph inputs/constants only
    for k in program.kernels:
        if reads_only(k, from_inputs):
            from_inputs.update(k.outputs)
    wanted = {v for v in from_inputs if v.format in WEIGHT_FORMATS}
    for k in reversed(program.kernels):       # and what those are computed from
        if any(v in wanted for v in k.outputs):
            wanted.update(k.outputs)
            wanted.update(buffers.root(x) for x in k.inputs if buffers.root(x) in from_inputs)
    # A graph output (or a name sharing its bytes) is the caller's to keep, not ours.
    returned = {buffers.root(v) for v in program.outputs}
    cached, kept = [], set()
    for k in program.kernels:
        if (k.outputs and any(v in wanted for v in k.outputs)
                and not any(v in returned for v in k.outputs) and reads_only(k, kept)):
            cached.append(k)
            kept.update(k.outputs)
    return cached


def _place_cached(program, buffers, cached, kind, where):
    """Offsets in the cached region for the outputs of the `cached` kernels; returns (region
    size, transient values).

    A value the runtime keeps for later runs needs bytes of its own. One read only by cached
    kernels that depend on the same graph inputs as its producer (the filter scaled by a folded
    batch norm, read by its FRACTAL_Z conversion) is never read in a run that did not just
    compute it, as the runtime re-runs a cached kernel exactly when one of those inputs changed:
    such transient values share bytes wherever their lifetimes in the run do not overlap (a
    ResNet50's inference model kept 94 MB of scaled filters besides their 94 MB conversions).
    Transient values take the start of the region, kept ones follow."""
    readers = {}                      # buffer root -> kernels reading it
    for k in program.kernels:
        for x in k.inputs:
            readers.setdefault(buffers.root(x), []).append(k)
    _run_late(program, cached, readers)
    step_of = {id(k): i for i, k in enumerate(program.kernels)}
    cached = sorted(cached, key=lambda k: step_of[id(k)])
    producer, depends = {}, {}        # value -> its cached kernel; kernel -> graph inputs read
    for k in cached:
        deps = set()
        for x in k.inputs:
            r = buffers.root(x)
            deps |= depends[id(producer[r])] if r in producer else (
                {r} if kind.get(r) == Kind.INPUT else set())
        depends[id(k)] = frozenset(deps)
        producer.update(dict.fromkeys(k.outputs, k))
    returned = {buffers.root(v) for v in program.outputs}
    transient, kept, live = {}, {}, []   # value -> offset; live: (last step, offset, bytes)
    size = 0                             # of the transient values' part
    for k in cached:
        for v in k.outputs:
            kind[v] = Kind.CACHED
            n = align(max(nbytes(v), 1))
            users = readers.get(v, [])
            if v in returned or not users or any(
                    id(r) not in depends or depends[id(r)] != depends[id(k)] for r in users):
                kept[v] = n
                continue
            first, last = step_of[id(k)], max(step_of[id(r)] for r in users)
            live = [t for t in live if t[0] >= first]
            offset = 0
            for _, o, b in sorted(live, key=lambda t: t[1]):
                if offset + n <= o:
                    break
                offset = max(offset, o + b)
            live.append((last, offset, n))
            transient[v] = offset
            size = max(size, offset + n)
    where.update(transient)
    for v, n in kept.items():
        where[v], size = size, size + n
    return size, len(transient)


def _run_late(program, cached, readers):
    """Moves each cached kernel to just before the first other kernel that needs its outputs,
    directly or through other cached kernels (they read graph inputs, constants and cached
    values only, so any place before that kernel is right): a filter's scaling then runs next
    to its conversion, not with every other one at the start, and the transient values between
    them stop overlapping. Cached kernels keep their relative order. `readers`: buffer root ->
    the kernels reading it."""
    kernels = program.kernels
    index = {id(k): i for i, k in enumerate(kernels)}
    is_cached = {id(k) for k in cached}
    anchor = {}                       # cached kernel -> the kernel it must precede (None: end)
    for k in reversed(kernels):
        if id(k) not in is_cached:
            continue
        needs = [anchor[id(r)] if id(r) in is_cached else r
                 for v in k.outputs for r in readers.get(v, ())]
        anchor[id(k)] = min((r for r in needs if r is not None), key=lambda r: index[id(r)],
                            default=None)
    before = {}
    for k in kernels:
        if id(k) in is_cached:
            before.setdefault(id(anchor[id(k)]) if anchor[id(k)] is not None else None,
                              []).append(k)
    order = []
    for k in kernels:
        if id(k) not in is_cached:
            order += before.get(id(k), [])
            order.append(k)
    program.kernels[:] = order + before.get(None, [])


def _in_place(program, buffers, kind, last_read):
    """Lets outputs of in-place ops take the buffer of an input that dies at their kernel."""
    last_use = {}                                       # arena buffer root -> last read so far
    for v, step in last_read.items():
        r = buffers.root(v)
        last_use[r] = max(last_use.get(r, -1), step)
    count = 0
    for step, k in enumerate(program.kernels):
        op = ops.get(k.kernel)
        if op is None or not op.inplace:
            continue
        taken = set()
        for out in k.outputs:
            if out in kind:                             # written into a caller's buffer
                continue
            for x in k.inputs:
                r = buffers.root(x)
                if (kind.get(r) is None and r not in taken and last_use.get(r) == step
                        and nbytes(x) == nbytes(r) == nbytes(out) and x.format == out.format):
                    buffers.join(out, r)
                    taken.add(r)
                    last_use[r] = max(step, last_use.get(out, step))
                    count += 1
                    break
    return count


def in_place_outputs(p, requests, kind, where, last_read):
    """[(output index, input index)] of the requested pairs (Compilation.in_place_requests)
    whose output the caller may place in the input's buffer: a kernel writes the output
    directly, at or after the input's last read, and reads the input, if at all, only
    element by element (Op.inplace); the input feeds no conversion kept between runs."""
    pairs = []
    if not requests:
        return pairs
    step_of = {v: s for s, k in enumerate(p.kernels) for v in k.outputs}
    readers_of, outputs = {}, collections.Counter(p.outputs)
    for k in p.kernels:
        for v in dict.fromkeys(k.inputs):
            readers_of.setdefault(v, []).append(k)
    for o, i in sorted(requests.items()):
        out, inp = p.outputs[o], p.inputs[i]
        if (kind.get(out) != Kind.OUTPUT or where.get(out) != o or outputs[out] != 1
                or kind.get(inp) != Kind.INPUT or out.dtype != inp.dtype
                or nbytes(out) != nbytes(inp) or out.format != inp.format):
            continue
        step = step_of[out]
        readers = readers_of.get(inp, [])
        writer = p.kernels[step]
        op = ops.get(writer.kernel)
        if (last_read.get(inp, -1) > step or (inp in writer.inputs and not op.inplace)
                or any(kind.get(v) == Kind.CACHED for k in readers for v in k.outputs)):
            continue
        pairs.append((o, i))
    return pairs


def run(c):
    p = c.program
    kind, where, buffers = {}, {}, Buffers()
    for alias, source in p.aliases.items():
        buffers.join(alias, source)
    for i, v in enumerate(p.inputs):
        kind[v], where[v] = Kind.INPUT, i
    for v in p.constants:
        kind.setdefault(v, Kind.CONST)
    produced = [v for k in p.kernels for v in k.outputs]
    produced_set = set(produced)
    shared = {buffers.root(a) for a in p.aliases}
    for i, v in enumerate(p.outputs):
        # A kernel writes the caller's buffer, unless other names share the bytes (the
        # reference executor gives every output value its own array).
        if v not in kind and v in produced_set and v not in shared:
            kind[v], where[v] = Kind.OUTPUT, i
    cached = cached_conversions(p, buffers, kind)
    cached_bytes, transient = _place_cached(p, buffers, cached, kind, where)
    last_read = last_reads(p)
    for i, v in enumerate(p.outputs):                   # outputs are read after the last kernel
        last_read[v] = len(p.kernels)
    inplace = _in_place(p, buffers, kind, last_read)
    in_place = in_place_outputs(p, c.in_place_requests, kind, where, last_read)
    arena = [v for v in produced if buffers.root(v) is v and v not in kind]
    for v in arena:
        kind[v] = Kind.ARENA
    size = {v: align(max(nbytes(v), 1)) for v in arena}
    life = lifetimes(p, set(arena), buffers, {v: min(s, len(p.kernels) - 1)
                                              for v, s in last_read.items()})
    live_at = np.zeros(len(p.kernels) + 1, np.int64)     # bytes live at each kernel
    for v, (first, last) in life.items():
        live_at[first] += size[v]
        live_at[last + 1] -= size[v]
    live_at = np.cumsum(live_at)
    lower_bound = int(live_at.max(initial=0))
    end = lambda offsets: max((offsets[v] + size[v] for v in arena), default=0)
    strategy, plan, arena_bytes = None, None, None
    for name, make in ORDERS.items():           # the first of the smallest arenas wins
        offsets = best_fit(life, size, make(life, size), arena_bytes)
        if offsets is not None:
            strategy, plan, arena_bytes = name, offsets, end(offsets)
            if arena_bytes == lower_bound:      # no order can do better
                break
    where.update(plan)
    members = list(produced) + list(p.aliases)
    for v in members:                                   # every name takes its buffer's place
        r = buffers.root(v)
        if r is not v and r in kind:
            kind[v] = kind[r]
            if r in where:
                where[v] = where[r]
    no_reuse = sum(align(max(nbytes(v), 1)) for v in members if kind.get(v) == Kind.ARENA)
    c.plan = Plan(kind=kind, where=where, lifetime=life, arena_bytes=arena_bytes,
                  lower_bound_bytes=lower_bound, no_reuse_bytes=no_reuse,
                  storage={v: buffers.root(v) for v in members}, strategy=strategy,
                  inplace=inplace, aliased=len(p.aliases), cached_bytes=cached_bytes,
                  cached_conversions=len(cached), cached_transient=transient,
                  in_place=in_place)
    limit = c.options.get("graph_memory_max_size")
    if limit and c.plan.arena_bytes > limit:
        raise OutOfMemoryError(f"graph {c.name!r} needs {c.plan.arena_bytes} bytes of working memory "
                           f"(at least {c.plan.lower_bound_bytes} live at once in this order); "
                           f"graph_memory_max_size is {limit}")
    # Working memory, constants and results must fit in the device together, or the model can
    # never run: TF's ResourceExhaustedError now, naming the sizes, not an allocation failure later.
    hbm = device_memory(c)
    if hbm is not None:
        const_bytes = sum(nbytes(v) for v in set(p.constants))
        out_bytes = sum(nbytes(v) for v in p.outputs)
        need = c.plan.arena_bytes + const_bytes + out_bytes + cached_bytes
        if need > hbm:
            raise OutOfMemoryError(f"graph {c.name!r} needs {need} bytes of device memory "
                                   f"({c.plan.arena_bytes} working memory, {const_bytes} constants, "
                                   f"{out_bytes} results, {cached_bytes} converted weights); "
                                   f"the NPU has {hbm} bytes (hbm_size)")
    return {"arena_bytes": c.plan.arena_bytes, "lower_bound": c.plan.lower_bound_bytes,
            "inplace": inplace, "aliased": c.plan.aliased, "strategy": strategy,
            "cached_bytes": cached_bytes, "cached_conversions": len(cached),
            "cached_transient": transient, "in_place_outputs": len(in_place)}
