"""Elementwise chain fusion: connected elementwise/broadcast ops of one output shape become one
NpuElementwise kernel (ops/fused_elementwise.py) that reads its inputs and writes its outputs
once, instead of one pass over memory per op. docs/memory.md, "Elementwise chain fusion".

Groups grow in topological order: a node joins the groups of the fusible producers it reads
(merging them) when that creates no cycle, i.e. no value outside the merged group both
depends on the group and feeds it. Values of a group that anything outside it reads (a
non-elementwise op, a graph output) become extra outputs of the fused kernel. A group of single
elements (an optimizer's step-dependent scalars) folds into the one group that reads it, which
then computes it once per run. Scalar float constants become immediates of the program.
Control edges touching fused nodes are dropped: all compiled ops are pure, so they order
nothing.
"""
import math
import numpy as np

from graph_engine import ops
from graph_engine.ops import dtypes as dt
from graph_engine.compiler.node import Node
from graph_engine.compiler.reachability import path_exists
from graph_engine.ops.fused_elementwise import COMPARISONS, INT_TO_FLOAT, VALUE_DTYPES


_BOOL_OUT = COMPARISONS


def _one_element(v):
    return math.prod(v.shape) == 1


def _data_format(node):
    f = node.attr("data_format", "NHWC")
    return f.decode() if isinstance(f, bytes) else f


def fusible(node):
    """Whether the NpuElementwise kernel computes `node` exactly as its own kernel does."""
    if not ops.has(node.op, "fusible") or len(node.outputs) != 1 or not node.inputs:
        return False
    out = node.outputs[0]
    if out.shape is None or out.dtype not in VALUE_DTYPES + INT_TO_FLOAT or out.format is not None:
        return False
    if any(v.shape is None or v.format is not None for v in node.inputs):
        return False
    if node.op == "Cast" and node.inputs[0].dtype in INT_TO_FLOAT and out.dtype == dt.DT_FLOAT:
        return True                          # exact: float32(x), as the Cast kernel stores
    if any(v.dtype in INT_TO_FLOAT for v in node.inputs):
        # integer math (step counters): exact in the kernel's int64 path, single elements only
        return (ops.has(node.op, "integer_math") and all(v.dtype in INT_TO_FLOAT for v in node.inputs)
                and out.dtype in INT_TO_FLOAT + (dt.DT_BOOL,)
                and (out.dtype == dt.DT_BOOL) == (node.op in _BOOL_OUT)
                and _one_element(out) and all(_one_element(v) for v in node.inputs))
    if out.dtype not in VALUE_DTYPES or any(v.dtype not in VALUE_DTYPES for v in node.inputs):
        return False
    if node.op == "Select":                  # v1's vector condition is not NumPy broadcasting
        return node.inputs[0].shape == out.shape
    if node.op == "BiasAdd":                 # NHWC: the bias runs along the last axis
        return _data_format(node) == "NHWC" or len(out.shape) == 2
    if node.op in ("LogicalNot", "LogicalAnd", "LogicalOr"):
        return all(v.dtype == dt.DT_BOOL for v in node.inputs)
    if node.op not in ("Cast", "Select", "SelectV2") and node.op not in _BOOL_OUT:
        # arithmetic on floats only (bool arithmetic has integer semantics)
        return all(v.dtype != dt.DT_BOOL for v in node.inputs) and out.dtype != dt.DT_BOOL
    return True


def _scalar_const(v):
    """An immediate of the program: constants are float32, so integer ones stay inputs."""
    return (v.node.op == "Const" and v.const is not None and np.size(v.const) == 1
            and v.dtype in VALUE_DTYPES)


def form_groups(g, users):
    """Lists of nodes (topological order) to fuse, each of two or more nodes; `users`: the
    graph's data consumers."""
    order = g.topo_order()
    group_of = {}            # node -> group id
    members, masks, ext = {}, {}, {}   # group id -> nodes, bit mask of merged ids, outside preds
    anc = {}                 # node -> bit mask of group ids it depends on
    next_id = 0
    for n in order:
        preds = {v.node for v in n.inputs}
        mask = 0
        for p in preds:
            mask |= anc.get(p, 0) | masks.get(group_of.get(p), 0)
        anc[n] = mask
        if not fusible(n):
            continue
        shape = n.outputs[0].shape
        cands = {group_of[p] for p in preds
                 if p in group_of and members[group_of[p]][0].outputs[0].shape == shape}
        target = None
        for choice in ([cands] if cands else []) + [{c} for c in sorted(cands)]:
            m = 0
            for gid in choice:
                m |= masks[gid]
            outside = set().union(*(ext[gid] for gid in choice)) | preds
            outside = {x for x in outside if group_of.get(x) not in choice}
            if all(anc[x] & m == 0 for x in outside):
                target = choice
                break
        if target is None:
            gid = next_id
            next_id += 1
            members[gid], masks[gid], ext[gid] = [n], 1 << gid, set(preds)
        else:
            gid = min(target)
            for other in sorted(target - {gid}):
                for x in members.pop(other):
                    group_of[x] = gid
                    members[gid].append(x)
                masks[gid] |= masks.pop(other)
                ext[gid] |= ext.pop(other)
            members[gid].append(n)
            ext[gid] = {x for x in ext[gid] | preds if group_of.get(x) != gid and x is not n}
        group_of[n] = gid
    position = {n: i for i, n in enumerate(order)}
    groups = _merge_uniform(users, [sorted(ms, key=position.get) for ms in members.values()])
    groups = _merge_siblings(g, order, groups)
    groups = [sorted(ms, key=position.get) for ms in groups if len(ms) > 1]
    return _break_cycles(order, groups)


def _uniform(group):
    return all(_one_element(n.outputs[0]) for n in group)


def _merge_uniform(users, groups):
    """Folds a group whose values are single elements (an optimizer's step-dependent scalars)
    into the one group that reads them when nothing else does: the kernel computes such
    instructions once per run, and one kernel launch goes away. Nothing outside reads the
    folded group, so no cycle can form; a group read by two groups (or by anything else) stays
    its own kernel rather than being computed twice."""
    group_of = {n: i for i, ms in enumerate(groups) for n in ms}
    for i in range(len(groups)):      # group_of follows each fold: chains fold transitively
        ms = groups[i]
        if not _uniform(ms):
            continue
        readers = {group_of.get(u) for n in ms for u, _ in users.get(n.outputs[0], ())
                   if group_of.get(u) != i}
        if len(readers) != 1 or None in readers:
            continue
        (j,) = readers
        if len(ms[0].outputs[0].shape) > max(len(n.outputs[0].shape) for n in groups[j]):
            continue                             # broadcasting would change the output shape
        for n in ms:
            group_of[n] = j
        groups[j] = groups[j] + ms
        groups[i] = []
    return [ms for ms in groups if ms]


def _shape(group):
    return max((n.outputs[0].shape for n in group), key=math.prod)


def _merge_siblings(g, order, groups):
    """Groups of one shape that read the same full-size value and do not depend on each other
    fuse, so the value is read once (Adam's m and v updates both read the gradient). Neither
    may reach the other through any node (data or control edge), so no cycle can form."""
    succ = {n: set() for n in order}
    pred = {}
    for n in order:
        pred[n] = {v.node for v in n.inputs} | set(n.control_inputs)
        for p in pred[n]:
            succ[p].add(n)
    group_of = {n: i for i, ms in enumerate(groups) for n in ms}
    position = {n: i for i, n in enumerate(order)}
    shapes = [_shape(ms) for ms in groups]          # kept up to date below, not rescanned

    def reaches(src, dst):
        # `order` is topological: a bounded search from both ends (one-sided and unbounded, it
        # walked most of a training graph per call).
        return path_exists(groups[src], groups[dst], succ, pred, position)

    for n in order:
        for v in n.outputs:
            if v.node.op == "Const" or v.shape is None:
                continue
            readers = sorted({group_of[u] for u in succ[n] if u in group_of and v in u.inputs})
            readers = [i for i in readers if shapes[i] == v.shape]
            base = readers[0] if readers else None
            for other in readers[1:]:
                if other == base or reaches(base, other) or reaches(other, base):
                    continue
                for m in groups[other]:
                    group_of[m] = base
                groups[base] = groups[base] + groups[other]
                groups[other] = []
                shapes[base] = _shape(groups[base])
    return [ms for ms in groups if ms]


def _break_cycles(order, groups):
    """The node-level check above misses cycles that only appear between fused groups (a group
    that later absorbs a node reading another group it feeds); dissolve groups until the
    condensed graph is acyclic."""
    while True:
        rep = {n: ("g", i) for i, ms in enumerate(groups) for n in ms}
        key = lambda n: rep.get(n, n)
        succ, pending = {}, {}
        for n in order:
            k = key(n)
            pending.setdefault(k, 0)
            for p in {key(v.node) for v in n.inputs} - {k}:
                if k not in succ.setdefault(p, set()):
                    succ[p].add(k)
                    pending[k] += 1
        ready = [k for k, c in pending.items() if c == 0]
        while ready:
            for s in succ.get(ready.pop(), ()):
                pending[s] -= 1
                if pending[s] == 0:
                    ready.append(s)
        stuck = [k[1] for k, c in pending.items() if c > 0 and isinstance(k, tuple)]
        if not stuck:
            return groups
        groups = [ms for i, ms in enumerate(groups) if i != max(stuck)]


def fuse(g, nodes, users):
    """Replaces `nodes` by one NpuElementwise node; returns it."""
    inside = set(nodes)
    inputs, constants, operand = [], [], {}
    for n in nodes:
        for v in n.inputs:
            if v in operand or v.node in inside:
                continue
            if _scalar_const(v):
                operand[v] = f"k{len(constants)}"
                constants.append(float(np.asarray(v.const, np.float32).reshape(())))
            else:
                operand[v] = len(inputs)
                inputs.append(v)
    operand = {v: o if isinstance(o, str) else f"r{o}" for v, o in operand.items()}
    program, dtypes, outputs, results = [], [], [], []
    for i, n in enumerate(nodes):
        out = n.outputs[0]
        operand[out] = f"r{len(inputs) + i}"
        program.append(" ".join([n.op] + [operand[v] for v in n.inputs]))
        dtypes.append(int(out.dtype))
        if any(user not in inside for user, _ in users.get(out, ())):
            outputs.append(len(inputs) + i)
            results.append(out)
    first = nodes[0]
    fused = g.add(Node(g.unique_name(f"{first.name}/fused_elementwise"), "NpuElementwise",
                       device=first.device, inputs=inputs,
                       output_dtypes=[v.dtype for v in results]))
    fused.set_attr("program", ";".join(program))
    if constants:
        fused.set_attr("constants", constants)
    fused.set_attr("dtypes", dtypes)
    fused.set_attr("results", outputs)
    for i, v in enumerate(inputs):           # later fusions rewire these uses too
        users[v].append((fused, i))
    for new, old in zip(fused.outputs, results):
        new.shape = old.shape
        g.replace_uses(old, new, users)
    for n in nodes:
        g.remove(n)
    return fused


def run(c):
    g = c.graph
    users = g.data_consumers()
    groups = form_groups(g, users)
    fused_nodes = {n for ms in groups for n in ms}
    for n in g:
        if n.control_inputs:
            n.control_inputs = [p for p in n.control_inputs if p not in fused_nodes]
    for ms in groups:
        fuse(g, ms, users)
    return {"fused_groups": len(groups), "fused_ops": sum(len(ms) for ms in groups)}
