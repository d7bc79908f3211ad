"""Results the caller asked to write over an input (a variable its cluster updates in place:
partition/variables_in_place.py) have their kernel moved after the input's other readers, so
that writing over the input cannot change what those read. plan_memory.py then checks which of
them may share the input's buffer.

Topological order may put Adam's update of a weight before the backward convolution that still
reads that weight (neither needs the other); the update, and whatever in between reads its
results, moves to just after that reader. A result the last reader itself needs stays put.
"""


def _root(v, aliases):
    while v in aliases:
        v = aliases[v]
    return v


def run(c):
    p = c.program
    moved = 0
    for out_index, in_index in sorted(c.in_place_requests.items()):
        out, inp = p.outputs[out_index], p.inputs[in_index]
        kernels = p.kernels
        producer = next((i for i, k in enumerate(kernels) if out in k.outputs), None)
        if producer is None:
            continue
        last = max((i for i, k in enumerate(kernels) if inp in k.inputs), default=-1)
        if last <= producer:
            continue
        made, moving = set(kernels[producer].outputs), {id(kernels[producer])}
        for k in kernels[producer + 1:last + 1]:
            if any(_root(v, p.aliases) in made for v in k.inputs):
                made.update(k.outputs)
                moving.add(id(k))
        if id(kernels[last]) in moving:
            continue
        span = kernels[producer:last + 1]
        kernels[producer:last + 1] = ([k for k in span if id(k) not in moving]
                                      + [k for k in span if id(k) in moving])
        moved += 1
    return {"moved": moved}
