"""Cast cancellation: a Cast of a Cast whose middle type holds every value of the source type
exactly is one Cast (or none when it returns to the source type), so mixed-precision graphs
carry no Cast chains. A narrowing middle (float32 -> float16 -> float32) rounds on purpose
(cube_fp16in_fp32out) and stays. Casts of the same value to the same type merge too.
Run by the precision pass, before and after its rewrite."""
from graph_engine.ops import dtypes as dt

# Which types each type represents exactly (value-preserving widening).
_EXACT_IN = {
    dt.DT_FLOAT: {dt.DT_HALF, dt.DT_BFLOAT16, dt.DT_INT8, dt.DT_UINT8, dt.DT_INT16,
                  dt.DT_BOOL},
    dt.DT_DOUBLE: {dt.DT_FLOAT, dt.DT_HALF, dt.DT_BFLOAT16, dt.DT_INT8, dt.DT_UINT8,
                   dt.DT_INT16, dt.DT_INT32, dt.DT_BOOL},
    dt.DT_HALF: {dt.DT_INT8, dt.DT_UINT8, dt.DT_BOOL},
    dt.DT_INT64: {dt.DT_INT32, dt.DT_INT16, dt.DT_INT8, dt.DT_UINT8, dt.DT_BOOL},
    dt.DT_INT32: {dt.DT_INT16, dt.DT_INT8, dt.DT_UINT8, dt.DT_BOOL},
}


def holds(wide, narrow):
    return wide == narrow or narrow in _EXACT_IN.get(wide, ())


def _skippable(source, middle, target):
    """Cast(source -> middle -> target) == Cast(source -> target): the middle is exact, and the
    last step is the same conversion of the same value, except float -> narrower integer,
    whose out-of-range behaviour differs from integer wrapping."""
    return holds(middle, source) and (target in dt.FLOATING or holds(target, source)
                                      or source == dt.DT_BOOL)


def run(c):
    g = c.graph
    users = g.data_consumers()
    seen = {}                                    # (source Value, DstT) -> Cast output
    for node in g.topo_order():
        if node.op != "Cast":
            continue
        src, out = node.inputs[0], node.outputs[0]
        if src.node.op == "Cast" and _skippable(src.node.inputs[0].dtype, src.dtype, out.dtype):
            src = node.inputs[0] = src.node.inputs[0]      # skip the exact middle
            node.set_attr("SrcT", type=src.dtype)
        key = (src, out.dtype)
        replacement = src if src.dtype == out.dtype else seen.get(key)
        if replacement is None:
            seen[key] = out
            continue
        for consumer, i in users.pop(out, []):
            consumer.inputs[i] = replacement
            users[replacement].append((consumer, i))
    # Casts left without consumers go with the following dead-code elimination.
