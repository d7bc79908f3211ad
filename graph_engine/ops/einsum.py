"""Einsum (Keras' MultiHeadAttention and EinsumDense) and ConcatOffset (ConcatV2's gradient).
Kernel: runtime/kernels/einsum.cc (ConcatOffset is always folded: its inputs are shapes)."""
import numpy as np

from graph_engine.ops.base import FLOAT, INDEX, Op, norm_axis, register, scalar


def _terms(equation, shapes):
    """(input label lists, output label list) with '...' expanded to labels 0, 1, ...
    (right-aligned, numpy broadcasting); letters stay strings. TF requires an explicit output."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if not arrow or "->" in rhs:
        raise ValueError(f"Einsum: equation {equation!r} must contain exactly one '->'")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"Einsum: equation {equation!r} has {len(terms)} operands, got {len(shapes)} inputs")
    ell = max([len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes) if "..." in t] or [0])

    def expand(t, own):
        if not all(c.isalpha() for c in t.replace("...", "")):
            raise ValueError(f"Einsum: invalid term {t!r} in {equation!r} (labels are letters and '...')")
        head, dots, tail = t.partition("...")
        return list(head) + (list(range(ell - own, ell)) if dots else []) + list(tail)

    ins = []
    for t, s in zip(terms, shapes):
        own = len(s) - len(t.replace("...", "")) if "..." in t else 0
        labels = expand(t, own)
        if len(labels) != len(s) or own < 0:
            raise ValueError(f"Einsum: term {t!r} does not fit a rank-{len(s)} operand")
        ins.append(labels)
    return ins, expand(rhs, ell)


@register
class Einsum(Op):
    type_attrs = {"T": FLOAT}

    def shapes(self, shapes, attrs):
        ins, out = _terms(attrs["equation"], shapes)
        size = {}
        for labels, s in zip(ins, shapes):
            for l, d in zip(labels, s):
                if size.get(l, 1) not in (1, d) and d != 1:
                    raise ValueError(f"Einsum: label {l!r} has sizes {size[l]} and {d}")
                size[l] = d if size.get(l, 1) == 1 else size[l]
        missing = [l for l in out if l not in size]
        if missing:
            raise ValueError(f"Einsum: output labels {missing} are not in any input")
        return [tuple(size[l] for l in out)]

    def compute(self, xs, attrs):
        ins, out = _terms(attrs["equation"], [x.shape for x in xs])
        # numpy's einsum with integer sublists; a repeated output label (TF's gradient of
        # "ii->i" is "i->ii") is computed once per distinct label and written on the diagonal
        ids = {l: i for i, l in enumerate(dict.fromkeys(l for t in ins for l in t))}
        distinct = list(dict.fromkeys(out))
        args = [a for x, t in zip(xs, ins) for a in (x, [ids[l] for l in t])]
        small = np.einsum(*args, [ids[l] for l in distinct])
        shape = self.shapes([x.shape for x in xs], attrs)[0]
        result = np.zeros(shape, small.dtype)
        grids = np.indices(small.shape) if small.ndim else []
        result[tuple(grids[distinct.index(l)] for l in out)] = small
        return result


@register
class ConcatOffset(Op):
    """Where each ConcatV2 input starts in the result: zeros except the running sum along
    concat_dim."""
    type_attrs = {"shape_type": INDEX}
    const_inputs = ("concat_dim",)
    trivial = True
    runtime_kernel = False

    def shapes(self, shapes, attrs):
        return [tuple(s) for s in shapes]

    def compute(self, xs, attrs):
        rank = xs[0].shape[0]
        axis = norm_axis(scalar(attrs, "concat_dim"), rank, "concat_dim")
        outs, at = [], 0
        for s in xs:
            if s.shape != (rank,) or any(s[d] != xs[0][d] for d in range(rank) if d != axis):
                raise ValueError(f"ConcatOffset: shapes {[list(x) for x in xs]} differ outside axis {axis}")
            o = np.zeros(rank, s.dtype)
            o[axis] = at
            at += int(s[axis])
            outs.append(o)
        return outs
