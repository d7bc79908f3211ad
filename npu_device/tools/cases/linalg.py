"""Linear algebra cases (graph_engine/ops/linalg.py). Decomposition inputs are well conditioned,
with distinct eigenvalues and singular values, so the gradients (which divide by their
differences) are well defined on both devices."""
import numpy as np

_I = np.int32
# Own generator: these values must not shift when other families' modules draw numbers first
# (float16 Qr gradients, a chain of float16-rounded ops, need well-conditioned inputs).
_R = np.random.default_rng(16)


def _f32(*shape, lo=-2.0, hi=2.0):
    return _R.uniform(lo, hi, shape).astype(np.float32)


def _spd(*batch, n=3):
    a = _f32(*batch, n, n, lo=-1.0, hi=1.0)
    return (a @ np.swapaxes(a, -1, -2) + np.diag(np.arange(1, n + 1)).astype(np.float32)).astype(np.float32)


def _general(*batch, n=3):
    """Diagonally dominant (invertible), with determinants of both signs."""
    a = _f32(*batch, n, n, lo=-1.0, hi=1.0)
    return (a + np.diag([3.0] * (n - 1) + [-3.0])).astype(np.float32)


def _tall(*shape):
    """Random plus 2 on the diagonal: well-separated singular values."""
    return (_f32(*shape, lo=-1.0, hi=1.0) + 2.0 * np.eye(*shape[-2:], dtype=np.float32)).astype(np.float32)


def _bands(*shape):
    """Band storage with diagonals away from zero (the main diagonal is row 0 or the last)."""
    return (_f32(*shape, lo=-1.0, hi=1.0) + 3.0).astype(np.float32)


def _tridiag(*shape):
    """[..., 3, M] diagonals; the sub- and superdiagonals large enough that pivoting happens."""
    d = _f32(*shape[:-1], 3, shape[-1], lo=-1.0, hi=1.0)
    d[..., 1, :] += 2.5
    return d


_X = _f32(2, 4, 5)
_SET3 = dict(input=_X, diagonal=_f32(2, 4, 4), k=np.array([-1, 2], _I))

CASES = [
    # diagonals and bands (also the gradients of the decompositions)
    ("MatrixBandPart", {"input": _X, "num_lower": _I(1), "num_upper": _I(-1)}, {}),
    ("MatrixBandPart", {"input": _X, "num_lower": _I(-1), "num_upper": _I(0)}, {}),
    ("MatrixBandPart", {"input": _f32(3, 3), "num_lower": _I(0), "num_upper": _I(2)}, {}),
    ("MatrixDiagPart", {"input": _f32(2, 3, 4)}, {}),
    ("MatrixDiagPartV2", {"input": _X, "k": _I(1), "padding_value": np.float32(0)}, {}),
    ("MatrixDiagPartV3", {"input": _X, "k": np.array([-1, 2], _I), "padding_value": np.float32(2)},
     {"align": "LEFT_RIGHT"}),
    ("MatrixDiagPartV3", {"input": _X, "k": np.array([-3, -1], _I), "padding_value": np.float32(0)}, {}),
    ("MatrixDiag", {"diagonal": _f32(2, 3)}, {}),
    ("MatrixDiagV2", {"diagonal": _f32(2, 4), "k": _I(1), "num_rows": _I(-1), "num_cols": _I(-1),
                      "padding_value": np.float32(0)}, {}),
    ("MatrixDiagV3", {"diagonal": _f32(2, 3, 4), "k": np.array([-1, 1], _I), "num_rows": _I(5),
                      "num_cols": _I(-1), "padding_value": np.float32(1)}, {"align": "RIGHT_LEFT"}),
    ("MatrixDiagV3", {"diagonal": _f32(3), "k": _I(0), "num_rows": _I(-1), "num_cols": _I(-1),
                      "padding_value": np.float32(0)}, {"align": "RIGHT_LEFT"}),
    ("MatrixSetDiag", {"input": _f32(2, 3, 3), "diagonal": _f32(2, 3)}, {}),
    ("MatrixSetDiagV2", {"input": _X, "diagonal": _f32(2, 4), "k": _I(0)}, {}),
    ("MatrixSetDiagV3", _SET3, {"align": "RIGHT_RIGHT"}),
    ("MatrixSetDiagV3", _SET3, {"align": "LEFT_RIGHT"}),
    ("Diag", {"diagonal": _f32(2, 3)}, {}),
    ("DiagPart", {"input": np.diag(_f32(6)).reshape(2, 3, 2, 3)}, {}),
    ("Cross", {"a": _f32(4, 3), "b": _f32(4, 3)}, {}),
    ("ConjugateTranspose", {"x": _f32(2, 3, 4), "perm": np.array([2, 0, 1], _I)}, {}),
    ("BatchMatMul", {"x": _f32(2, 3, 4), "y": _f32(2, 4, 5)}, {}),
    ("BatchMatMul", {"x": _f32(2, 4, 3), "y": _f32(2, 5, 4)}, {"adj_x": True, "adj_y": True}),
    # decompositions and solves
    ("MatrixInverse", {"input": _general(2)}, {}),
    ("MatrixInverse", {"input": _general(n=4)}, {"adjoint": True}),
    ("MatrixDeterminant", {"input": _general(2)}, {}),
    ("LogMatrixDeterminant", {"input": _general(2)}, {}),
    ("Cholesky", {"input": _spd(2)}, {}),
    ("MatrixSolve", {"matrix": _general(2), "rhs": _f32(2, 3, 2)}, {}),
    ("MatrixSolve", {"matrix": _general(2), "rhs": _f32(2, 3, 2)}, {"adjoint": True}),
    ("MatrixTriangularSolve", {"matrix": _general(2), "rhs": _f32(2, 3, 2)}, {"lower": True}),
    ("MatrixTriangularSolve", {"matrix": _general(2), "rhs": _f32(2, 3, 2)},
     {"lower": False, "adjoint": True}),
    ("MatrixTriangularSolve", {"matrix": _general(), "rhs": _f32(2, 3, 4)}, {"lower": True}),
    ("Qr", {"input": _f32(2, 4, 3)}, {"full_matrices": False}),
    ("Qr", {"input": _f32(3, 3)}, {"full_matrices": True}),
    ("Qr", {"input": _f32(3, 5)}, {"full_matrices": False}),
    ("SelfAdjointEigV2", {"input": _spd(2)}, {"compute_v": True}),
    ("Svd", {"input": _tall(2, 4, 3)}, {"compute_uv": True, "full_matrices": False}),
    ("Svd", {"input": _tall(3, 3)}, {"compute_uv": True, "full_matrices": True}),
    ("MatrixSquareRoot", {"input": _spd()}, {}),
    ("CholeskyGrad", {"l": np.linalg.cholesky(_spd(2)).astype(np.float32), "grad": _f32(2, 3, 3)}, {}),
    ("Lu", {"input": _f32(2, 4, 4)}, {}),
    ("Lu", {"input": _f32(3, 3)}, {"output_idx_type": "int64"}),
    ("BandedTriangularSolve", {"matrix": _bands(2, 2, 4), "rhs": _f32(2, 4, 3)}, {"lower": True}),
    ("BandedTriangularSolve", {"matrix": _bands(3, 4), "rhs": _f32(4, 2)},
     {"lower": False, "adjoint": True}),
    ("TridiagonalMatMul", {"superdiag": _f32(2, 1, 4), "maindiag": _f32(2, 1, 4),
                           "subdiag": _f32(2, 1, 4), "rhs": _f32(2, 4, 3)}, {}),
    ("TridiagonalSolve", {"diagonals": _tridiag(2, 5), "rhs": _f32(2, 5, 2)}, {}),
    ("TridiagonalSolve", {"diagonals": _tridiag(5), "rhs": _f32(5, 3)}, {"partial_pivoting": False}),
]
