"""Control-flow contexts of a lowered graph, so that a cluster never mixes them.

A context is a tuple: ("frame", name) entered by Enter and left by Exit, ("pred", ref, port)
for nodes downstream of a Switch's (or a lowered Case's _SwitchN's) output `port` whose
predicate (branch index) is `ref` (all Switches of one cond or loop share the predicate),
("first", name) right after a frame entry for values that exist in the first iteration only (a
non-constant Enter's output, until a loop Merge turns it into a per-iteration value; a constant
Enter's value is present in every iteration). Merge
takes the common prefix of its inputs. A node whose inputs come from contexts where none
contains the others gets MIXED: it is never clustered.

Nodes of one context run together: in the same frame iterations, and in one iteration either
all of them are alive or all are dead (same branch). So clustering them is safe for the
executor as far as timing and deadness go (an NpuGraphOp takes the context of its members);
the dependencies a loop adds beyond its DAG edges are `frame_of`'s business (clusters.py).
"""
from graph_engine.compiler.partition import dag

MIXED = None

ENTER = ("Enter", "RefEnter")
EXIT = ("Exit", "RefExit")
MERGE = ("Merge", "RefMerge")
SWITCH = ("Switch", "RefSwitch", "_SwitchN")   # _SwitchN: a lowered Case (tf.switch_case)


def _prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _deepest(ctxs):
    """The longest context if all others are prefixes of it, else MIXED."""
    best = ()
    for c in ctxs:
        if c is MIXED:
            return MIXED
        if len(c) > len(best):
            c, best = best, c
        if best[:len(c)] != c:
            return MIXED
    return best


def _out_ctx(ctx, producer, value):
    base = ctx[producer]
    if base is MIXED or value is None or producer.op not in SWITCH:
        return base
    return base + (("pred", producer.inputs[1].ref, value.index),)


def _input_contexts(ctx, n):
    return [_out_ctx(ctx, p, v) for p, v in dag.predecessors(n)]


def _is_loop_merge(n):
    return n.op in MERGE and any(dag.is_back_edge(v.node, n) for v in n.inputs)


def control_contexts(g, topo):
    ctx = {}
    for n in topo:
        ins = _input_contexts(ctx, n)
        if n.op in MERGE:
            c = MIXED if not ins or MIXED in ins else ins[0]
            for other in ins[1:]:
                c = MIXED if c is MIXED else _prefix(c, other)
            if c and _is_loop_merge(n) and c[-1][0] == "first":
                c = c[:-1]                   # iteration i > 0 reads the NextIteration input
        else:
            c = _deepest(ins)
        if c is not MIXED and n.op in ENTER:
            c = c + (("frame", n.attr("frame_name")),)
            if not n.attr("is_constant", False):
                c = c + (("first", n.attr("frame_name")),)
        elif c is not MIXED and n.op in EXIT:
            frames = [i for i, e in enumerate(c) if e[0] == "frame"]
            c = c[:frames[-1]] if frames else MIXED
        ctx[n] = c
    return ctx


def _frame_key(c):
    """The context up to and including its innermost frame entry (None: no frame, or MIXED)."""
    if c is MIXED:
        return None
    frames = [i for i, e in enumerate(c) if e[0] == "frame"]
    return c[:frames[-1] + 1] if frames else None


def frame_of(n, ctx):
    """The frame (a context ending in ("frame", name)) that Enter `n` enters or Exit `n`
    leaves; None for other nodes and where contexts do not tell (MIXED)."""
    if n.op in ENTER:
        return _frame_key(ctx[n])
    if n.op in EXIT:
        return _frame_key(_deepest(_input_contexts(ctx, n)))
    return None
