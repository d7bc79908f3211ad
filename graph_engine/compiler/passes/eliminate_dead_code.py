"""Dead-code elimination: keeps what the outputs (_Retval) need through data edges, and every
_Arg (inputs keep their positions). Compiled ops have no side effects, so control edges keep
nothing alive."""


def run(c):
    g = c.graph
    live, stack = set(), [n for n in g if n.op == "_Retval"]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(v.node for v in n.inputs)
    removed = 0
    for n in g:
        if n not in live and n.op != "_Arg":
            g.remove(n)
            removed += 1
    for n in g:
        n.control_inputs = [p for p in n.control_inputs if p.name in g.nodes]
    return {"removed": removed}
