"""Matrix products. On the device these are the cube-unit ops: float16/bfloat16 operands,
float32 accumulation (the reference widens to float32 and rounds on store, like the kernels)."""
import numpy as np

from graph_engine.ops.base import COMPLEX, FLOAT, INT, Op, broadcast, register


def _matmul_shape(a, b, ta, tb, what):
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"{what}: operands must have rank >= 2, got {list(a)} and {list(b)}")
    m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    if k != k2:
        raise ValueError(f"{what}: inner dimensions differ: {list(a)} x {list(b)} "
                         f"(transpose_a={ta}, transpose_b={tb})")
    return m, n


def _t(x, flag):
    return np.swapaxes(x, -1, -2) if flag else x


@register
class MatMul(Op):
    mixlist = "white"
    type_attrs = {"T": FLOAT + INT}

    def shapes(self, shapes, attrs):
        a, b = shapes
        if len(a) != 2 or len(b) != 2:
            raise ValueError(f"MatMul: operands must be matrices, got {list(a)} and {list(b)}")
        return [_matmul_shape(a, b, attrs.get("transpose_a"), attrs.get("transpose_b"), "MatMul")]

    def compute(self, xs, attrs):
        return _t(xs[0], attrs.get("transpose_a")) @ _t(xs[1], attrs.get("transpose_b"))


@register
class BatchMatMulV2(Op):
    """Batched matmul; batch dimensions broadcast. adj_x/adj_y: conjugate transposes (complex64:
    RFFT2D's gradient; kernel in runtime/kernels/complex.cc)."""
    mixlist = "white"
    type_attrs = {"T": FLOAT + INT + COMPLEX}

    def shapes(self, shapes, attrs):
        a, b = shapes
        m, n = _matmul_shape(a, b, attrs.get("adj_x"), attrs.get("adj_y"), self.name)
        try:
            batch = broadcast(a[:-2], b[:-2])
        except ValueError:
            raise ValueError(f"{self.name}: batch dimensions of {list(a)} and {list(b)} are not "
                             f"broadcastable") from None
        return [batch + (m, n)]

    def compute(self, xs, attrs):
        adj = lambda x, flag: np.conj(_t(x, flag)) if flag else x
        return np.matmul(adj(xs[0], attrs.get("adj_x")), adj(xs[1], attrs.get("adj_y")))


@register
class BatchMatMulV3(BatchMatMulV2):
    mixlist = "white"
    type_attrs = {"Ta": FLOAT + INT, "Tb": FLOAT + INT, "Tout": FLOAT + INT}
