"""Linear algebra (tf.linalg): decompositions, solves, matrix diagonals and bands.

Kernels: runtime/kernels/linalg.cc (Eigen's dense decompositions, per matrix of a batch, as TF's
CPU kernels use them) and runtime/kernels/matrix_diag.cc (diagonals, bands, Diag, Cross,
ConjugateTranspose: data movement). The diagonal ops follow TF's "k = (lower, upper)" form:
diagonal d of an M x N matrix holds the elements (y, x) with x - y = d, stored in row
upper - d of the packed [num_diags, max_diag_len] form, aligned LEFT or RIGHT by `align`
(superdiagonals first, then subdiagonals: "RIGHT_LEFT" is V3's default, V1/V2 are "LEFT_LEFT").

Decompositions unique only up to signs (Qr, Svd, SelfAdjointEigV2) are never constant-folded: the
device computes TF's (Eigen's) choice, numpy's LAPACK may choose other signs.
"""
import numpy as np
import scipy.linalg

from graph_engine.ops import dtypes as dt
from graph_engine.ops.array import Transpose
from graph_engine.ops.base import ALL, INDEX, NUMBER, Op, broadcast, register, scalar
from graph_engine.ops.matmul import BatchMatMulV2

F32 = (dt.DT_FLOAT,)
F32_F16 = (dt.DT_FLOAT, dt.DT_HALF)


# ---- diagonals and bands ---------------------------------------------------------------------

def _k(attrs):
    """(lower, upper) diagonal indices from the const input k (one or two values)."""
    k = [int(v) for v in np.asarray(attrs.get("k", [0])).reshape(-1)]
    if len(k) not in (1, 2):
        raise ValueError(f"diag_index must have only one or two elements, received {len(k)} "
                         f"elements.")
    lo, hi = k[0], k[-1]
    if lo > hi:
        raise ValueError(f"lower_diag_index must not be larger than upper_diag_index: {lo} > {hi}")
    return lo, hi


def _check_k_bounds(m, n, lo, hi):
    for what, d in (("lower", lo), ("upper", hi)):
        if not (-m < d < n or d == 0):
            raise ValueError(f"{what}_diag_index is out of bound: {d}. It must be between {-m} "
                             f"and {n}")


def _max_diag_len(m, n, lo, hi):
    return min(m + min(hi, 0), n - max(lo, 0))


def _band_positions(m, n, lo, hi, align):
    """Flat positions (in the M x N matrix, in the packed [num_diags, max_diag_len] diagonals) of
    every element of diagonals lo..hi, with TF's alignment of short diagonals."""
    left_super, left_sub = (a == "LEFT" for a in (align or "LEFT_LEFT").split("_"))
    width = _max_diag_len(m, n, lo, hi)
    mat, packed = [], []
    for d in range(lo, hi + 1):
        length = min(m + min(0, d), n - max(0, d))
        if length <= 0:
            continue
        offset = 0 if ((d >= 0 and left_super) or (d <= 0 and left_sub)) else width - length
        j = np.arange(length)
        mat.append((j + max(-d, 0)) * n + j + max(d, 0))
        packed.append((hi - d) * width + j + offset)
    cat = lambda a: np.concatenate(a) if a else np.zeros(0, np.int64)
    return cat(mat), cat(packed)


def _diag_part_shape(shape, lo, hi):
    if len(shape) < 2:
        raise ValueError(f"input must be at least 2-dim, received shape: {list(shape)}")
    m, n = shape[-2:]
    _check_k_bounds(m, n, lo, hi)
    width = _max_diag_len(m, n, lo, hi)
    return tuple(shape[:-2]) + ((hi - lo + 1,) if hi > lo else ()) + (max(width, 0),)


def _align(op, attrs):
    return attrs.get("align", op.default_align)


class _DiagOp(Op):
    type_attrs = {"T": ALL}
    default_align = "LEFT_LEFT"


@register
class MatrixDiagPartV3(_DiagOp):
    """The diagonals lo..hi of each matrix, short ones padded with padding_value."""
    const_inputs = ("k",)
    default_align = "RIGHT_LEFT"

    def shapes(self, shapes, attrs):
        return [_diag_part_shape(shapes[0], *_k(attrs))]

    def compute(self, xs, attrs):
        x = xs[0]
        pad = xs[1] if len(xs) > 1 else np.zeros((), x.dtype)
        lo, hi = _k(attrs)
        out_shape = _diag_part_shape(x.shape, lo, hi)
        m, n = x.shape[-2:]
        width = _max_diag_len(m, n, lo, hi)
        mat, packed = _band_positions(m, n, lo, hi, _align(self, attrs))
        batch = x.reshape(-1, m * n)
        out = np.full((batch.shape[0], (hi - lo + 1) * max(width, 0)), pad, x.dtype)
        out[:, packed] = batch[:, mat]
        return out.reshape(out_shape)


@register
class MatrixDiagPartV2(MatrixDiagPartV3):
    default_align = "LEFT_LEFT"


@register
class MatrixDiagPart(MatrixDiagPartV3):
    const_inputs = ()


def _diag_matrix_shape(shape, lo, hi, rows, cols):
    """TF's MatrixDiagV3 output shape: num_rows/num_cols -1 are inferred from the diagonals."""
    if len(shape) < 1 or (hi > lo and len(shape) < 2):
        raise ValueError(f"diagonal must be at least {1 if hi == lo else 2}-dim, received shape: "
                         f"{list(shape)}")
    if hi > lo and shape[-2] != hi - lo + 1:
        raise ValueError("The number of diagonals provided in the input does not match the "
                         "lower_diag_index and upper_diag_index range.")
    width = shape[-1]
    min_rows, min_cols = width - min(hi, 0), width + max(lo, 0)
    if rows != -1 and rows < min_rows:
        raise ValueError("The number of rows is too small.")
    if cols != -1 and cols < min_cols:
        raise ValueError("The number of columns is too small.")
    if rows == -1 and cols == -1:
        rows = cols = max(min_rows, min_cols)
    elif rows == -1:
        rows = min_rows
    elif cols == -1:
        cols = min_cols
    if rows != min_rows and cols != min_cols:
        raise ValueError("The number of rows or columns is not consistent with the specified "
                         "d_lower, d_upper, and diagonal.")
    batch = shape[:-2] if hi > lo else shape[:-1]
    return tuple(batch) + (rows, cols)


@register
class MatrixDiagV3(_DiagOp):
    """Matrices with the given diagonals lo..hi, padding_value elsewhere."""
    const_inputs = ("k", "num_rows", "num_cols")
    default_align = "RIGHT_LEFT"

    def _shape(self, shape, attrs):
        lo, hi = _k(attrs)
        rows = scalar(attrs, "num_rows") if "num_rows" in attrs else -1
        cols = scalar(attrs, "num_cols") if "num_cols" in attrs else -1
        return _diag_matrix_shape(shape, lo, hi, rows, cols)

    def shapes(self, shapes, attrs):
        return [self._shape(shapes[0], attrs)]

    def compute(self, xs, attrs):
        diag = xs[0]
        pad = xs[1] if len(xs) > 1 else np.zeros((), diag.dtype)
        lo, hi = _k(attrs)
        out_shape = self._shape(diag.shape, attrs)
        m, n = out_shape[-2:]
        mat, packed = _band_positions(m, n, lo, hi, _align(self, attrs))
        packed_size = (hi - lo + 1) * diag.shape[-1]
        src = diag.reshape(-1, packed_size)
        out = np.full((src.shape[0], m * n), pad, diag.dtype)
        out[:, mat] = src[:, packed]
        return out.reshape(out_shape)


@register
class MatrixDiagV2(MatrixDiagV3):
    default_align = "LEFT_LEFT"


@register
class MatrixDiag(MatrixDiagV3):
    const_inputs = ()


def _set_diag_check(shape, dshape, lo, hi):
    want = _diag_part_shape(shape, lo, hi)
    if tuple(dshape) != want:
        raise ValueError(f"diagonal must have shape {list(want)} for input {list(shape)} and "
                         f"k = ({lo}, {hi}), received {list(dshape)}")


@register
class MatrixSetDiagV3(_DiagOp):
    """The input with diagonals lo..hi replaced."""
    const_inputs = ("k",)
    default_align = "RIGHT_LEFT"

    def shapes(self, shapes, attrs):
        _set_diag_check(shapes[0], shapes[1], *_k(attrs))
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x, diag = xs
        lo, hi = _k(attrs)
        _set_diag_check(x.shape, diag.shape, lo, hi)
        m, n = x.shape[-2:]
        mat, packed = _band_positions(m, n, lo, hi, _align(self, attrs))
        out = x.reshape(-1, m * n).copy()
        out[:, mat] = diag.reshape(out.shape[0], -1)[:, packed]
        return out.reshape(x.shape)


@register
class MatrixSetDiagV2(MatrixSetDiagV3):
    default_align = "LEFT_LEFT"


@register
class MatrixSetDiag(MatrixSetDiagV3):
    const_inputs = ()


@register
class MatrixBandPart(Op):
    """Keeps the elements with -num_lower <= x - y <= num_upper (negative: no bound)."""
    type_attrs = {"T": ALL, "Tindex": INDEX}
    const_inputs = ("num_lower", "num_upper")

    def _bounds(self, shape, attrs):
        if len(shape) < 2:
            raise ValueError(f"input must be at least 2-dim, received shape: {list(shape)}")
        lower, upper = scalar(attrs, "num_lower"), scalar(attrs, "num_upper")
        if lower > shape[-2]:
            raise ValueError(f"num_lower must be negative or less or equal to number of rows "
                             f"({shape[-2]}) got: {lower}")
        if upper > shape[-1]:
            raise ValueError(f"num_upper must be negative or less or equal to number of columns "
                             f"({shape[-1]}) got: {upper}")
        return lower, upper

    def shapes(self, shapes, attrs):
        self._bounds(shapes[0], attrs)
        return [tuple(shapes[0])]

    def compute(self, xs, attrs):
        x = xs[0]
        lower, upper = self._bounds(x.shape, attrs)
        y, c = np.indices(x.shape[-2:])
        keep = ((lower < 0) | (y - c <= lower)) & ((upper < 0) | (c - y <= upper))
        return np.where(keep, x, np.zeros((), x.dtype))


@register
class Diag(Op):
    """A rank-2k tensor with the rank-k input on its diagonal (MatrixDiag of the flat input)."""
    type_attrs = {"T": (dt.DT_FLOAT, dt.DT_HALF, dt.DT_INT32, dt.DT_INT64)}

    def shapes(self, shapes, attrs):
        if len(shapes[0]) < 1:
            raise ValueError("Input must be at least rank 1, got 0")
        return [tuple(shapes[0]) * 2]

    def compute(self, xs, attrs):
        flat = xs[0].reshape(-1)
        return np.diag(flat).reshape(self.shapes([xs[0].shape], attrs)[0])


@register
class DiagPart(Op):
    type_attrs = Diag.type_attrs

    def shapes(self, shapes, attrs):
        s = tuple(shapes[0])
        k = len(s) // 2
        if len(s) == 0 or len(s) % 2:
            raise ValueError(f"The rank of the tensor should be even and positive, got shape "
                             f"{list(s)}")
        for i in range(k):
            if s[i] != s[i + k]:
                raise ValueError(f"Invalid shape {list(s)}: dimensions {i} and {i + k} do not "
                                 f"match.")
        return [s[:k]]

    def compute(self, xs, attrs):
        out = self.shapes([xs[0].shape], attrs)[0]
        size = int(np.prod(out))
        return np.diagonal(xs[0].reshape(size, size)).reshape(out)


@register
class Cross(Op):
    """Cross products of the 3-vectors along the last axis."""
    type_attrs = {"T": NUMBER}

    def shapes(self, shapes, attrs):
        a, b = (tuple(s) for s in shapes)
        if a != b:
            raise ValueError(f"Both inputs must be of same shape: {list(a)} vs. {list(b)}")
        if len(a) < 1 or a[-1] != 3:
            raise ValueError(f"Arguments must have a last dimension of 3, got shape {list(a)}")
        return [a]

    def compute(self, xs, attrs):
        self.shapes([x.shape for x in xs], attrs)
        with np.errstate(over="ignore"):
            return np.cross(xs[0], xs[1]).astype(xs[0].dtype)


@register
class ConjugateTranspose(Transpose):
    """Transpose and conjugate: the real dtypes the NPU holds have nothing to conjugate."""


@register
class BatchMatMul(BatchMatMulV2):
    """The V1 op: batch dimensions must be equal (no broadcasting)."""
    type_attrs = {"T": NUMBER}

    def shapes(self, shapes, attrs):
        a, b = shapes
        if len(a) != len(b):
            raise ValueError(f"In[0] and In[1] has different ndims: {list(a)} vs. {list(b)}")
        for i in range(len(a) - 2):
            if a[i] != b[i]:
                raise ValueError(f"In[0].dim({i}) and In[1].dim({i}) must be the same: "
                                 f"{list(a)} vs {list(b)}")
        return super().shapes(shapes, attrs)


# ---- decompositions and solves ---------------------------------------------------------------

def _square(shape, what="Input"):
    if len(shape) < 2:
        raise ValueError(f"{what} must have rank >= 2, got {len(shape)}")
    if shape[-1] != shape[-2]:
        raise ValueError(f"{what} matrix must be square.")
    return tuple(shape)


def _adj(x):
    return np.swapaxes(x, -1, -2)


@register
class MatrixInverse(Op):
    type_attrs = {"T": F32_F16}

    def shapes(self, shapes, attrs):
        return [_square(shapes[0])]

    def compute(self, xs, attrs):
        x = _adj(xs[0]) if attrs.get("adjoint") else xs[0]
        try:
            return np.linalg.inv(x)
        except np.linalg.LinAlgError:
            raise ValueError("Input is not invertible.") from None


def _slogdet(x):
    """TF's SLogDet from the LU pivots u: sign det(P) prod(sign(u)), log sum(log |u|), nothing
    remapped: a zero pivot gives (0, -inf), an infinite one (±1, inf), a NaN one (NaN, NaN)."""
    flat = x.reshape((-1,) + x.shape[-2:])
    sign, logdet = np.ones(len(flat), x.dtype), np.zeros(len(flat), x.dtype)
    for i, a in enumerate(flat):
        if a.size:
            lu, piv = scipy.linalg.lu_factor(a, check_finite=False)
            u = np.diagonal(lu)
            with np.errstate(divide="ignore", invalid="ignore"):
                sign[i] = (-1.0) ** np.sum(piv != np.arange(len(piv))) * np.prod(np.sign(u))
                logdet[i] = np.sum(np.log(np.abs(u)))
    return sign.reshape(x.shape[:-2]), logdet.reshape(x.shape[:-2])


@register
class MatrixDeterminant(Op):
    """sign * exp(log |det|) of TF's SLogDet: inf and NaN determinants are results, not errors."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        return [_square(shapes[0])[:-2]]

    def compute(self, xs, attrs):
        sign, logdet = _slogdet(xs[0])
        with np.errstate(over="ignore", invalid="ignore"):
            return (sign * np.exp(logdet)).astype(xs[0].dtype)


@register
class LogMatrixDeterminant(Op):
    """(sign, log |det|); a singular matrix gives (0, -inf) as on TF's CPU."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        b = _square(shapes[0])[:-2]
        return [b, b]

    def compute(self, xs, attrs):
        return list(_slogdet(xs[0]))


@register
class Cholesky(Op):
    """The lower-triangular L with L L^T = input (its lower triangle is read). A matrix that is
    not positive definite is no error: its L is NaN (lower triangle), as on TF's CPU."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        return [_square(shapes[0])]

    def compute(self, xs, attrs):
        x = xs[0]
        flat = x.reshape((-1,) + x.shape[-2:])
        out = np.zeros_like(flat)
        for i, a in enumerate(flat):
            try:
                out[i] = np.linalg.cholesky(np.tril(a) + np.tril(a, -1).T)
            except np.linalg.LinAlgError:
                out[i] = np.tril(np.full_like(a, np.nan))
        return out.reshape(x.shape)


@register
class MatrixSolve(Op):
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        a, b = shapes
        _square(a)
        if len(b) != len(a) or tuple(a[:-2]) != tuple(b[:-2]) or b[-2] != a[-1]:
            raise ValueError(f"Input matrix and right-hand side must have the same number of "
                             f"rows and batch dimensions: {list(a)} vs. {list(b)}")
        return [tuple(b)]

    def compute(self, xs, attrs):
        a = _adj(xs[0]) if attrs.get("adjoint") else xs[0]
        try:
            return np.linalg.solve(a, xs[1])
        except np.linalg.LinAlgError:
            raise ValueError("Input matrix is not invertible.") from None


@register
class MatrixTriangularSolve(Op):
    """Solves with the lower (or upper) triangle of `matrix`; batch dimensions broadcast.
    float16 beyond TF's CPU kernel: Qr's float16 gradient solves with it."""
    type_attrs = {"T": F32_F16}

    def shapes(self, shapes, attrs):
        a, b = shapes
        _square(a)
        if len(b) < 2 or b[-2] != a[-1]:
            raise ValueError(f"Input matrix and right-hand side must have the same number of "
                             f"rows: {list(a)} vs. {list(b)}")
        return [broadcast(a[:-2], b[:-2]) + tuple(b[-2:])]

    def compute(self, xs, attrs):
        a, b = xs
        tri = np.tril(a) if attrs.get("lower", True) else np.triu(a)
        if attrs.get("adjoint"):
            tri = _adj(tri)
        out = self.shapes([a.shape, b.shape], attrs)[0]
        tri = np.broadcast_to(tri, out[:-2] + a.shape[-2:])
        return np.linalg.solve(tri, np.broadcast_to(b, out)) if out[-2] else np.zeros(out, b.dtype)


@register
class Qr(Op):
    type_attrs = {"T": F32_F16}
    foldable = False         # signs: Eigen's Householder choice (see the module doc)

    def shapes(self, shapes, attrs):
        s = shapes[0]
        if len(s) < 2:
            raise ValueError(f"Input must have rank >= 2, got {len(s)}")
        m, n = s[-2:]
        k = m if attrs.get("full_matrices") else min(m, n)
        return [tuple(s[:-2]) + (m, k), tuple(s[:-2]) + (k, n)]

    def compute(self, xs, attrs):
        q, r = np.linalg.qr(xs[0], mode="complete" if attrs.get("full_matrices") else "reduced")
        return [q, r]


@register
class SelfAdjointEigV2(Op):
    """Eigenvalues (ascending) and eigenvectors of the matrices' lower triangles."""
    type_attrs = {"T": F32}
    foldable = False

    def shapes(self, shapes, attrs):
        s = _square(shapes[0])
        return [s[:-1], s if attrs.get("compute_v", True) else s[:-2]]

    def compute(self, xs, attrs):
        e, v = np.linalg.eigh(xs[0], UPLO="L")
        if not attrs.get("compute_v", True):
            v = np.zeros(xs[0].shape[:-2], xs[0].dtype)    # TF leaves it undefined
        return [e, v]


@register
class Svd(Op):
    type_attrs = {"T": F32}
    foldable = False

    def shapes(self, shapes, attrs):
        s = shapes[0]
        if len(s) < 2:
            raise ValueError(f"Input must have rank >= 2, got {len(s)}")
        b, (m, n) = tuple(s[:-2]), s[-2:]
        k = min(m, n)
        if not attrs.get("compute_uv", True):
            return [b + (k,), b, b]                      # u, v: TF leaves them undefined
        full = attrs.get("full_matrices")
        return [b + (k,), b + (m, m if full else k), b + (n, n if full else k)]

    def compute(self, xs, attrs):
        x = xs[0]
        if not attrs.get("compute_uv", True):
            z = np.zeros(x.shape[:-2], x.dtype)
            return [np.linalg.svd(x, compute_uv=False), z, z]
        u, s, vh = np.linalg.svd(x, full_matrices=bool(attrs.get("full_matrices")))
        return [s, u, _adj(vh)]


@register
class MatrixSquareRoot(Op):
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        return [_square(shapes[0])]

    def compute(self, xs, attrs):
        x = xs[0]
        flat = x.reshape((-1,) + x.shape[-2:])
        out = [np.real(scipy.linalg.sqrtm(a)) if a.size else a for a in flat]
        return np.asarray(out, x.dtype).reshape(x.shape)


@register
class CholeskyGrad(Op):
    """The gradient of Cholesky: with S = L^-T Phi(L^T tril(grad)) L^-1 (Phi: the lower
    triangle, diagonal halved), the symmetric (S + S^T) / 2, as TF's blocked algorithm gives."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        if tuple(shapes[0]) != tuple(shapes[1]):
            raise ValueError(f"l and grad must have the same shape: {list(shapes[0])} vs. "
                             f"{list(shapes[1])}")
        return [_square(shapes[0])]

    def compute(self, xs, attrs):
        l, g = np.tril(xs[0]), np.tril(xs[1])
        p = np.tril(_adj(l) @ g)
        p = p - 0.5 * np.eye(l.shape[-1], dtype=p.dtype) * p
        linv = np.linalg.inv(l)
        s = _adj(linv) @ p @ linv
        return 0.5 * (s + _adj(s))


@register
class Lu(Op):
    """P input = L U (PartialPivLU): the packed L\\U and p with input[p] = L U."""
    type_attrs = {"T": F32, "output_idx_type": INDEX}

    def shapes(self, shapes, attrs):
        s = _square(shapes[0])
        return [s, s[:-1]]

    def compute(self, xs, attrs):
        x = xs[0]
        flat = x.reshape((-1,) + x.shape[-2:])
        lus, perms = [], []
        for a in flat:
            p, l, u = scipy.linalg.lu(a)          # a = p l u
            if np.any(np.diag(u) == 0):
                raise ValueError("Input is not invertible.")
            lus.append(np.tril(l, -1) + u)
            perms.append(np.argmax(p, axis=0))
        out = np.asarray(lus, x.dtype).reshape(x.shape)
        idx = dt.numpy_dtype(attrs.get("output_idx_type", dt.DT_INT32))
        return [out, np.asarray(perms, idx).reshape(x.shape[:-1])]


def _banded_dense(bands, n, lower):
    """The triangular matrix of TF's LEFT_RIGHT band storage: row r holds diagonal -r (lower,
    right-aligned) or diagonal K-1-r (upper, left-aligned)."""
    k = bands.shape[-2]
    out = np.zeros(bands.shape[:-2] + (n, n), bands.dtype)
    for r in range(k):
        d = r if lower else k - 1 - r
        for i in range(d, n) if lower else range(n - d):
            if lower:
                out[..., i, i - d] = bands[..., r, i]
            else:
                out[..., i, i + d] = bands[..., r, i]
    return out


@register
class BandedTriangularSolve(Op):
    """Bands beyond the matrix (more rows than columns) are ignored, as on TF's CPU. TF checks
    the diagonal of the first matrix of the batch only: the others may divide by zero."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        a, b = shapes
        for i, s in enumerate((a, b)):
            if len(s) < 2:
                raise ValueError(f"In[{i}] ndims must be >= 2: {len(s)}")
            if 0 in s:
                raise ValueError(f"In[{i}] must not be an empty tensor: shape {list(s)}")
        if a[-1] != b[-2]:
            raise ValueError(f"In[0] mismatch In[1] shape: {a[-1]} vs. {b[-2]}: {list(a)} "
                             f"{list(b)}")
        return [broadcast(a[:-2], b[:-2]) + tuple(b[-2:])]

    def compute(self, xs, attrs):
        a, b = xs
        lower = attrs.get("lower", True)
        self.shapes([a.shape, b.shape], attrs)
        first = a.reshape((-1,) + a.shape[-2:])[0]
        if not np.min(np.abs(first[0 if lower else -1])) > 0:
            raise ValueError("Input matrix is not invertible.")
        dense = _banded_dense(a, a.shape[-1], lower)
        if attrs.get("adjoint"):
            dense = _adj(dense)
        out = self.shapes([a.shape, b.shape], attrs)[0]
        dense = np.broadcast_to(dense, out[:-2] + dense.shape[-2:])
        return np.linalg.solve(dense, np.broadcast_to(b, out)) if out[-2] else np.zeros(out, b.dtype)


def _tridiagonal(sup, main, sub):
    """Dense matrices from the three diagonals [..., M] (sup's last, sub's first ignored)."""
    m = main.shape[-1]
    return (main[..., :, None] * np.eye(m, dtype=main.dtype)
            + sup[..., :, None] * np.eye(m, k=1, dtype=main.dtype)
            + sub[..., :, None] * np.eye(m, k=-1, dtype=main.dtype))


@register
class TridiagonalMatMul(Op):
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        *diags, rhs = shapes
        if len(rhs) < 2:
            raise ValueError(f"Input must have rank >= 2, but got {list(rhs)}")
        for d in diags:
            if tuple(d) != tuple(rhs[:-2]) + (1, rhs[-2]):
                raise ValueError(f"diagonals must have shape {list(rhs[:-2]) + [1, rhs[-2]]}, "
                                 f"got {list(d)}")
        return [tuple(rhs)]

    def compute(self, xs, attrs):
        sup, main, sub, rhs = xs
        return _tridiagonal(sup[..., 0, :], main[..., 0, :], sub[..., 0, :]) @ rhs


@register
class TridiagonalSolve(Op):
    """diagonals [..., 3, M]: superdiagonal, diagonal, subdiagonal. A singular system gives NaN
    (TF's CPU logs a warning), never an error."""
    type_attrs = {"T": F32}

    def shapes(self, shapes, attrs):
        d, rhs = shapes
        if len(d) < 2 or d[-2] != 3:
            raise ValueError(f"Expected 3 diagonals got {d[-2] if len(d) > 1 else list(d)}")
        if len(rhs) != len(d) or tuple(rhs[:-2]) != tuple(d[:-2]) or rhs[-2] != d[-1]:
            raise ValueError(f"diagonals {list(d)} and rhs {list(rhs)} do not match")
        if attrs.get("perturb_singular"):
            raise ValueError("TridiagonalSolve: perturb_singular is not supported on the NPU")
        return [tuple(rhs)]

    def compute(self, xs, attrs):
        d, rhs = xs
        a = _tridiagonal(d[..., 0, :], d[..., 1, :], d[..., 2, :])
        flat_a, flat_b = a.reshape((-1,) + a.shape[-2:]), rhs.reshape((-1,) + rhs.shape[-2:])
        out = []
        for m, b in zip(flat_a, flat_b):
            try:
                out.append(np.linalg.solve(m, b) if m.size else b)
            except np.linalg.LinAlgError:
                out.append(np.full_like(b, np.nan))
        return np.asarray(out, rhs.dtype).reshape(rhs.shape)
