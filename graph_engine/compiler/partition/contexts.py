"""Control-flow contexts of a lowered graph, so that a cluster never mixes them.

A context is a tuple: ("frame", name) entered by Enter and left by Exit, ("pred", ref, port)
for nodes downstream of a Switch's output `port` whose predicate is `ref` (all Switches of one
cond or loop share the predicate). Merge takes the common prefix of its inputs. A node whose
inputs come from contexts where none contains the others gets MIXED: it is never clustered.
Nodes of one context run together (same frame iteration, same branch), so clustering them is
safe; an NpuGraphOp takes the context of its members.
"""
from graph_engine.compiler.partition import dag

MIXED = None


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


def control_contexts(g, topo):
    ctx = {}

    def out_ctx(producer, value):
        base = ctx[producer]
        if base is MIXED or value is None or producer.op not in ("Switch", "RefSwitch"):
            return base
        return base + (("pred", producer.inputs[1].ref, value.index),)

    for n in topo:
        ins = [out_ctx(p, v) for p, v in dag.predecessors(n)]
        if n.op in ("Merge", "RefMerge"):
            c = MIXED if not ins or MIXED in ins else ins[0]
            for other in ins[1:]:
                c = MIXED if c is MIXED else _prefix(c, other)
        else:
            c = _deepest(ins)
        if c is not MIXED and n.op in ("Enter", "RefEnter"):
            c = c + (("frame", n.attr("frame_name")),)
        elif c is not MIXED and n.op in ("Exit", "RefExit"):
            frames = [i for i, e in enumerate(c) if e[0] == "frame"]
            c = c[:frames[-1]] if frames else MIXED
        ctx[n] = c
    return ctx
