"""``jitorch.linalg``: norms, solvers and decompositions, as ``torch.linalg``.

Factorizations are rows of ``ops/linalg_lapack.py`` (LAPACK through ``xp.linalg``, with matrix-calculus backwards); the
rest (``matrix_norm``, ``pinv``'s tolerances, ``lstsq``, ``matrix_power``, ``multi_dot``, ...) are composites.

>>> import jitorch
>>> a = jitorch.tensor([[4.0, 2.0], [2.0, 3.0]])
>>> jitorch.linalg.cholesky(a) @ jitorch.linalg.cholesky(a).mT
tensor([[4., 2.],
        [2., 3.]])
>>> jitorch.linalg.vector_norm(jitorch.tensor([3.0, 4.0])), jitorch.linalg.det(a).round()
(tensor(5.), tensor(8.))
"""
from __future__ import annotations

import math

from . import _dtype, return_types
from ._dispatch import TORCH_TYPE_NAMES, apply
from ._creation import _finish
from ._dispatch_modes import MODES
from ._grad_state import GradState
from ._linalg import cross as _cross
from ._linalg import matmul
from ._linalg_gelsy import gelsy, gelsy_applies
from ._pointwise import _write_out
from ._shape import wrap_dims
from ._tensor import Tensor
from .amp._cast_mode import autocast_policy
from .ops import linalg as L
from .ops.linalg import LinAlgError
from .ops.linalg_factor import TRIANGULAR_SOLVE

__all__ = [
    "LinAlgError", "norm", "vector_norm", "matrix_norm", "solve", "solve_ex", "solve_triangular", "inv", "inv_ex",
    "det", "slogdet", "cholesky", "cholesky_ex", "qr", "eigh", "eigvalsh", "svd", "svdvals", "pinv", "lstsq",
    "matrix_rank", "matrix_power", "multi_dot", "diagonal", "cross", "matmul", "vecdot", "matrix_exp", "cond", "vander",
    "lu_factor", "lu_factor_ex", "lu", "lu_solve", "eig", "eigvals", "householder_product", "tensorinv", "tensorsolve",
    "ldl_factor", "ldl_factor_ex", "ldl_solve",
]


def _named(name, fields):
    """The named tuple ``return_types.<name>``, created (and registered there) when that module lacks it."""
    existing = getattr(return_types, name, None)
    if existing is None:
        existing = return_types._make(name, fields)
        setattr(return_types, name, existing)
    return existing


linalg_qr = _named("linalg_qr", ("Q", "R"))
linalg_eigh = _named("linalg_eigh", ("eigenvalues", "eigenvectors"))
linalg_svd = _named("linalg_svd", ("U", "S", "Vh"))
linalg_slogdet = _named("linalg_slogdet", ("sign", "logabsdet"))
linalg_lstsq = _named("linalg_lstsq", ("solution", "residuals", "rank", "singular_values"))
linalg_inv_ex = _named("linalg_inv_ex", ("inverse", "info"))
linalg_cholesky_ex = _named("linalg_cholesky_ex", ("L", "info"))
linalg_solve_ex = _named("linalg_solve_ex", ("result", "info"))
SVD_LEGACY = _named("svd", ("U", "S", "V"))
QR_LEGACY = _named("qr", ("Q", "R"))


def _check_float(A, op):
    if not isinstance(A, Tensor):
        raise TypeError(f"{op}(): argument 'A' must be Tensor, not {type(A).__name__}")
    if A.dtype.category < _dtype.FLOAT:
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got "
                           f"{TORCH_TYPE_NAMES[A.dtype.name]}")


def _check_matrix(A, op, square=True):
    _check_float(A, op)
    if A._data.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor A must have at least 2 dimensions.")
    m, n = A._data.shape[-2:]
    if square and m != n:
        raise RuntimeError(f"{op}: A must be batches of square matrices, but they are {m} by {n} matrices")


# -- norms ---------------------------------------------------------------------------------------------------------
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``ord``-norm of ``x`` over ``dim`` (all dims by default), treating it as a vector: ord in R or +-inf."""
    _check_float(x, "linalg.vector_norm")
    if isinstance(ord, str):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not str (got {ord!r})")
    if dtype is not None:
        x = x.to(_vector_norm_dtype(x, dtype))
    nd = x._data.ndim
    dims = tuple(range(nd)) if dim is None or (isinstance(dim, (tuple, list)) and not dim) else \
        wrap_dims(dim, nd, "linalg.vector_norm")
    if nd == 0:  # dim 0/-1 of a 0-d tensor is the scalar itself: its norm reduces nothing
        dims = ()
    if (ord < 0 or math.isinf(ord)) and any(x._data.shape[d] == 0 for d in dims):
        raise RuntimeError(f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor because the operation "
                           "does not have an identity")
    return _write_out(apply(L.VECTOR_NORM, x, ord=float(ord), dims=dims, keepdim=bool(keepdim)), out)


def _vector_norm_dtype(x, dtype):
    """torch's checks of vector_norm's ``dtype=``: floating or complex as the input is (a complex input cast to a
    real dtype would lose its imaginary parts), and no narrower than the input's."""
    d, names = _dtype.to_dtype(dtype), TORCH_TYPE_NAMES
    if d.category < _dtype.FLOAT:
        problem = f"dtype should be floating point or complex, but got {names[d.name]}"
    elif x.is_complex() != d.is_complex:
        problem = f"dtype should be {'complex' if x.is_complex() else 'real'} for " \
                  f"{'complex' if x.is_complex() else 'real'} inputs, but got {names[d.name]}"
    elif _dtype.promote_types(x.dtype, d) is not d:
        problem = f"the dtype of the input ({names[x.dtype.name]}) should be convertible without narrowing to the " \
                  f"specified dtype ({names[d.name]})"
    else:
        return d
    raise RuntimeError(f"linalg.vector_norm: {problem}")


def _largest(x, dim, keepdim=False):
    """``amax`` of non-negative values, 0 over an empty dim (PyTorch's matrix norms do; their minima raise)."""
    if x._data.shape[dim] == 0:  # a fresh zero, outside the graph, as PyTorch's
        return x.detach().sum(dim, keepdim=keepdim)
    return x.amax(dim, keepdim=keepdim)


def _restore_dims(r, dims, keepdim):
    if keepdim:
        for d in sorted(dims):
            r = r.unsqueeze(d)
    return r


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """Matrix norm over the two dims ``dim``: 'fro', 'nuc', 1, -1, 2, -2, inf, -inf."""
    _check_float(A, "linalg.matrix_norm")
    if A._data.ndim < 2:
        raise RuntimeError(f"linalg.matrix_norm: The input tensor A must have at least 2 dimensions, got "
                           f"{A._data.ndim}.")
    if dtype is not None:
        A = A.to(dtype)
    dims = wrap_dims(dim, A._data.ndim, "linalg.matrix_norm")
    if len(dims) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {list(dim) if len(dims) > 1 else dim}")
    d0, d1 = dims
    if ord == "fro":
        result = vector_norm(A, 2, dims, keepdim)
    elif ord == "nuc" or ord in (2, -2):
        s = svdvals(A.movedim(dims, (-2, -1)))
        result = _restore_dims(s.sum(-1) if ord == "nuc" else _largest(s, -1) if ord == 2 else s.amin(-1), dims,
                               keepdim)
    elif ord in (1, -1, math.inf, -math.inf):
        summed, reduced = (d0, d1) if ord in (1, -1) else (d1, d0)
        sums = A.abs().sum(summed, keepdim=True)
        result = _largest(sums, reduced, keepdim=True) if ord > 0 else sums.amin(reduced, keepdim=True)
        result = result if keepdim else result.squeeze(dims)
    else:
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    return _write_out(result, out)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """Vector norm for one ``dim`` (or 1-D input), matrix norm for two (or 2-D input with ``ord`` given)."""
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) == 1:
            return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype, out=out)
        if len(dims) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype, out=out)
        raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dims)}")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype, out=out)
    if A._data.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype, out=out)
    if A._data.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype, out=out)
    raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                       f"{A._data.ndim}D.")


# -- solvers and inverses -----------------------------------------------------------------------------------------
def solve(A, B, *, left=True, out=None):
    """``X`` with ``A @ X = B`` (``X @ A = B`` when ``left=False``); batch dims broadcast, ``B`` may be a vector."""
    _check_matrix(A, "linalg.solve")
    _check_float(B, "linalg.solve")
    if not left:
        return _write_out(solve(A.mT, B.mT).mT, out)
    n = A._data.shape[-1]
    vector = B._data.ndim == 1 or (B._data.ndim == A._data.ndim - 1 and B._data.shape == A._data.shape[:-1])
    b = B.unsqueeze(-1) if vector else B
    if b._data.shape[-2] != n:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
                           f"({A._data.shape[-2]}x{n} and {b._data.shape[-2]}x{b._data.shape[-1]})")
    if A.dtype is not B.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type {A.dtype} "
                           f"and B of type {B.dtype} instead")
    from ._movement import broadcast_shapes

    batch = tuple(broadcast_shapes(A._data.shape[:-2], b._data.shape[:-2]))
    a = A.expand(batch + A._data.shape[-2:])
    b = b.expand(batch + b._data.shape[-2:])
    x = apply(L.SOLVE, a, b)
    return _write_out(x.squeeze(-1) if vector else x, out)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """Solve with the triangle of ``A`` selected by ``upper`` (its diagonal taken as ones if ``unitriangular``).

    As torch's, a zero on the diagonal is not an error: the solution holds inf/nan there.

    >>> import jitorch
    >>> jitorch.linalg.solve_triangular(jitorch.tensor([[2.0, 0.0], [1.0, 0.0]]), jitorch.ones(2, 1), upper=False)
    tensor([[0.5000],
            [   inf]])
    """
    _check_matrix(A, "linalg.solve_triangular")
    if B.dim() < 2:
        raise RuntimeError(f"linalg.solve_triangular: The input tensor B must have at least 2 dimensions, got shape "
                           f"{tuple(B.shape)}.")
    if B.dtype is not A.dtype and (A.is_floating_point() or A.is_complex()):
        # torch copies B into A's dtype here (where linalg.solve refuses the mix): MultivariateNormal.log_prob of a
        # float64 value under float32 parameters runs, in float32.
        B = B.to(A.dtype)
    if not left:  # X A = B is A^T X^T = B^T
        return _write_out(solve_triangular(A.mT, B.mT, upper=not upper, unitriangular=unitriangular).mT, out)
    n = A._data.shape[-1]
    if B._data.shape[-2] != n:
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation AX = B "
                           f"({A._data.shape[-2]}x{n} and {B._data.shape[-2]}x{B._data.shape[-1]})")
    from ._movement import broadcast_shapes

    batch = tuple(broadcast_shapes(A._data.shape[:-2], B._data.shape[:-2]))
    a, b = A.expand(batch + A._data.shape[-2:]), B.expand(batch + B._data.shape[-2:])
    return _write_out(apply(TRIANGULAR_SOLVE, a, b, upper=bool(upper), unitriangular=bool(unitriangular)), out)


def inv(A, *, out=None):
    """Inverse of each square matrix; raises ``LinAlgError`` for singular input."""
    _check_matrix(A, "linalg.inv")
    return _write_out(apply(L.INV, A), out)


def det(A, *, out=None):
    """Determinant of each square matrix."""
    _check_matrix(A, "linalg.det")
    return _write_out(apply(L.DET, A), out)


def slogdet(A, *, out=None):
    """``(sign, log|det|)`` of each square matrix, stable where ``det`` would under/overflow."""
    _check_matrix(A, "linalg.slogdet")
    return linalg_slogdet(*apply(L.SLOGDET, A))


def cholesky(A, *, upper=False, out=None):
    """Lower (or upper) Cholesky factor of each Hermitian positive-definite matrix."""
    _check_matrix(A, "linalg.cholesky")
    return _write_out(apply(L.CHOLESKY, A, upper=bool(upper)), out)


# -- decompositions ------------------------------------------------------------------------------------------------
def qr(A, mode="reduced", *, out=None):
    """``A = Q R`` with orthonormal ``Q`` and upper-triangular ``R``; mode 'reduced', 'complete' or 'r'."""
    _check_matrix(A, "linalg.qr", square=False)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or "
                           "'complete'")
    return linalg_qr(*apply(L.QR, A, mode=mode))


def eigh(A, UPLO="L", *, out=None):
    """Eigenvalues (ascending) and orthonormal eigenvectors of Hermitian matrices, from the ``UPLO`` triangle."""
    _check_matrix(A, "linalg.eigh")
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return linalg_eigh(*apply(L.EIGH, A, uplo=UPLO))


def eigvalsh(A, UPLO="L", *, out=None):
    """Eigenvalues (ascending) of Hermitian matrices."""
    _check_matrix(A, "linalg.eigvalsh")
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return _write_out(apply(L.EIGVALSH, A, uplo=UPLO), out)


def _check_driver(op, A, driver):
    if driver is not None and A.device.type != "cuda":
        raise RuntimeError(f"torch.{op}: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER "
                           f"backend (got driver={driver!r} for a {A.device.type} input).")


def svd(A, full_matrices=True, *, driver=None, out=None):
    """``A = U diag(S) Vh`` with singular values ``S`` in descending order."""
    _check_matrix(A, "linalg.svd", square=False)
    _check_driver("linalg.svd", A, driver)
    return linalg_svd(*apply(L.SVD, A, full_matrices=bool(full_matrices)))


def svdvals(A, *, driver=None, out=None):
    """Singular values in descending order."""
    _check_matrix(A, "linalg.svdvals", square=False)
    _check_driver("linalg.svdvals", A, driver)
    return _write_out(apply(L.SVDVALS, A), out)


def _tolerances(A, atol, rtol):
    """PyTorch's rule: ``rtol`` defaults to eps * max(m, n), or to 0 when only a positive ``atol`` is given."""
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else \
            float(_dtype.finfo(A.dtype.to_real()).eps) * max(A._data.shape[-2:])
    return float(atol or 0.0), float(rtol)


def pinv(A, *, atol=None, rtol=None, hermitian=False, rcond=None, out=None):
    """Moore-Penrose pseudo-inverse; singular values below ``max(atol, rtol * max(S))`` are treated as zero."""
    _check_matrix(A, "linalg.pinv", square=False)
    atol, rtol = _tolerances(A, atol, rcond if rtol is None else rtol)
    return _write_out(apply(L.PINV, A, atol=atol, rtol=rtol), out)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None, out=None):
    """Number of singular values above the tolerance (see ``pinv``)."""
    _check_matrix(A, "linalg.matrix_rank", square=False)
    atol, rtol = _tolerances(A, tol if atol is None else atol, rtol)
    s = svdvals(A).detach()
    limit = (s.amax(-1, keepdim=True) * rtol).clamp_min(atol) if s._data.shape[-1] else s.new_full((), atol)
    return _write_out((s > limit).sum(-1), out)


@autocast_policy(cpu="fp32", cuda="unlisted")
def lstsq(A, B, rcond=None, *, driver=None):
    """Least-squares solution of ``A X = B`` (CPU: LAPACK ``gelsy``, torch's default driver; else, and for
    gradients, through the pseudo-inverse), with rank and, for the SVD drivers, singular values and residuals as
    ``torch.linalg.lstsq`` reports them."""
    _check_matrix(A, "linalg.lstsq", square=False)
    if driver not in (None, "gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), "
                           f"got {driver}")
    if not 0 <= A._data.ndim - B._data.ndim <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    vector = B._data.ndim == A._data.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    if b._data.shape[-2] != A._data.shape[-2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size(-2), got "
                           f"{A._data.shape[-2]} and {b._data.shape[-2]}")
    empty = A.new_zeros((0,), dtype=A.dtype.to_real())
    fast = driver in (None, "gelsy") and not MODES and gelsy_applies(A._data, b._data)
    if fast:
        # ATen's driver on the CPU; its solution where no gradient is wanted (the backward is pinv's, below).
        m, n = A._data.shape[-2:]
        tol = float(_dtype.finfo(A.dtype.to_real()).eps) * max(m, n) if rcond is None else float(rcond)
        x, ranks = gelsy(A._data, b._data, tol)
        rank = _finish(ranks, device=A.device)
    needs_grad = GradState.enabled and (A.requires_grad or b.requires_grad)
    solution = _finish(x, device=A.device) if fast and not needs_grad else matmul(pinv(A, rtol=rcond), b)
    s = svdvals(A.detach()) if driver in ("gelsd", "gelss") else None
    if not fast:
        rank = empty.long() if driver == "gels" else matrix_rank(A.detach(), rtol=rcond)
    m, n = A._data.shape[-2:]
    residuals = A.reshape(-1).narrow(0, 0, 0).abs()  # empty, real, but part of the graph as PyTorch's is
    if driver not in (None, "gelsy") and m > n and bool((rank == n).all()):
        residuals = ((matmul(A, solution) - b).abs() ** 2).sum(-2)
    return linalg_lstsq(solution.squeeze(-1) if vector else solution, residuals, rank,
                        empty if s is None else s)


# -- products ---------------------------------------------------------------------------------------------------
def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """Diagonals of the matrices in the last two dims (a view)."""
    return A.diagonal(offset, dim1, dim2)


def cross(input, other, *, dim=-1, out=None):
    """Cross product of 3-vectors along ``dim`` (default last), broadcasting the inputs."""
    return _cross(input, other, dim, out=out)


@autocast_policy(cpu="lower", cuda="lower")
def vecdot(x, y, *, dim=-1, out=None):
    """``sum(x.conj() * y, dim)``."""
    return _write_out((x.conj() * y).sum(dim), out)


from ._linalg_extra import cond, matrix_exp, matrix_power, multi_dot, vander  # noqa: E402,F401 - composites
from ._linalg_lu import cholesky_ex, inv_ex, lu, lu_factor, lu_factor_ex, lu_solve, solve_ex  # noqa: E402
from ._linalg_more import eig, eigvals, householder_product, tensorinv, tensorsolve  # noqa: E402
from ._linalg_ldl import ldl_factor, ldl_factor_ex, ldl_solve  # noqa: E402

from ._overrides import publish as _publish  # noqa: E402

_publish(globals())  # see jitorch/_overrides.py
