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
    kernels = p.kernels
    position = {id(k): i for i, k in enumerate(kernels)}
    producer_of = {v: k for k in kernels for v in k.outputs}
    readers = {}
    for k in kernels:
        for v in k.inputs:
            readers.setdefault(v, []).append(k)
    moved = 0
    for out_index, in_index in sorted(c.in_place_requests.items()):
        out, inp = p.outputs[out_index], p.inputs[in_index]
        if out not in producer_of:
            continue
        producer = position[id(producer_of[out])]
        last = max((position[id(k)] for k in readers.get(inp, ())), default=-1)
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
        position.update((id(k), i) for i, k in enumerate(kernels[producer:last + 1], producer))
        moved += 1
    return {"moved": moved}
