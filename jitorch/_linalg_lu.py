"""LU factorizations (``linalg.lu_factor``/``lu_factor_ex``/``lu``/``lu_solve``, ``torch.lu_unpack``, the legacy
``torch.lu``/``torch.lu_solve``) and the ``*_ex`` spellings that report ``info`` instead of raising.

The factorization is the ``linalg_lu_factor`` row; unpacking, solving and the ``info`` handling are composites.

>>> import jitorch
>>> a = jitorch.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> p, l, u = jitorch.linalg.lu(a)
>>> bool(jitorch.allclose(p @ l @ u, a))
True
"""
from __future__ import annotations

from . import _dtype
from ._dispatch import apply
from ._pointwise import _write_out
from ._tensor import Tensor
from .ops import linalg_factor as F
from .ops.linalg import LinAlgError

__all__ = ["lu_factor", "lu_factor_ex", "lu", "lu_unpack", "lu_solve", "inv_ex", "solve_ex", "cholesky_ex"]


def _named(name, fields):
    from .linalg import _named as named

    return named(name, fields)


def _check(A, op):
    from .linalg import _check_matrix

    _check_matrix(A, op, square=False)


def _raise_for(op, A, info, message, error=LinAlgError):
    flat = info.reshape(-1).tolist()
    for index, code in enumerate(flat):
        if code:
            prefix = f"(Batch element {index}): " if A.dim() > 2 else ""
            raise error(f"{op}: {prefix}{message(code)}")


def lu_factor_ex(A, *, pivot=True, check_errors=False, out=None):
    """``(LU, pivots, info)``: LAPACK's packed ``getrf`` factorization; ``info[i] = k > 0`` when ``U[k-1, k-1]`` of
    matrix ``i`` is zero (no error is raised unless ``check_errors``)."""
    _check(A, "linalg.lu_factor_ex")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    lu, pivots, info = apply(F.LU_FACTOR, A)
    if check_errors:
        _raise_for("torch.linalg.lu_factor_ex", A, info, lambda k: f"U[{k},{k}] is zero and using it on lu_solve "
                   "would result in a division by zero.", RuntimeError)  # PyTorch's is no LinAlgError
    return _named("linalg_lu_factor_ex", ("LU", "pivots", "info"))(lu, pivots, info)


def lu_factor(A, *, pivot=True, out=None):
    """``(LU, pivots)``; raises when some ``U`` has a zero on its diagonal, as ``torch.linalg.lu_factor``."""
    lu, pivots, info = lu_factor_ex(A, pivot=pivot)
    _raise_for("torch.linalg.lu_factor", A, info, lambda k: f"U[{k},{k}] is zero and using it on lu_solve would "
               "result in a division by zero. If you still want to perform the factorization, consider calling "
               "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)", RuntimeError)
    return _named("linalg_lu_factor", ("LU", "pivots"))(lu, pivots)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, out=None):  # noqa: N803 - torch's names
    """``(P, L, U)`` of a packed factorization; parts not asked for are empty tensors, as PyTorch's."""
    m, n = LU_data.shape[-2:]
    if LU_pivots.dtype is not _dtype.int32:
        raise RuntimeError(f"torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype. "
                           f"Note: this function is intended to be used with the output produced by "
                           f"torch.linalg.lu_factor. Got {LU_pivots.dtype}")
    p, lower, upper = F.unpack(LU_data, LU_pivots, m, n)
    empty = LU_data.new_empty((0,))
    result = _named("lu_unpack", ("P", "L", "U"))
    return result(p if unpack_pivots else empty, lower if unpack_data else empty, upper if unpack_data else empty)


def lu(A, *, pivot=True, out=None):
    """``(P, L, U)`` with ``A = P L U``."""
    lu_data, pivots, _ = lu_factor_ex(A, pivot=pivot)
    return _named("linalg_lu", ("P", "L", "U"))(*F.unpack(lu_data, pivots, *A.shape[-2:]))


def lu_solve(LU, pivots, B, *, left=True, adjoint=False, out=None):  # noqa: N803 - torch's argument names
    """Solve ``A X = B`` (``A^H X = B`` with ``adjoint``, ``X A = B`` when not ``left``) from ``lu_factor``'s output."""
    from .linalg import solve_triangular

    if not left:  # X A = B  <=>  A^H X^H = B^H
        return _write_out(lu_solve(LU, pivots, B.mH, adjoint=not adjoint).mH, out)
    n = LU.shape[-1]
    if LU.shape[-2] != n:
        raise RuntimeError(f"linalg.lu_solve: A must be batches of square matrices, but they are {LU.shape[-2]} by "
                           f"{n} matrices")
    if B.dim() < 2 or B.shape[-2] != n:
        raise RuntimeError(f"linalg.lu_solve: Incompatible shapes of A and B for the equation AX = B ({n}x{n} and "
                           f"{'x'.join(map(str, B.shape[-2:]))})")
    p, _, _ = F.unpack(LU.detach(), pivots, n, n)
    if adjoint:  # A^H = U^H L^H P^T
        x = solve_triangular(LU.mH, B, upper=False)
        x = solve_triangular(LU.mH, x, upper=True, unitriangular=True)
        return _write_out(p @ x, out)
    x = solve_triangular(LU, p.mT @ B, upper=False, unitriangular=True)
    return _write_out(solve_triangular(LU, x, upper=True), out)


# -- the *_ex spellings -------------------------------------------------------------------------------------------
def _singular_info(A):
    """LU's ``info`` of each matrix (no graph): nonzero where the matrix is singular."""
    return apply(F.LU_FACTOR, A.detach())[2]


def _replace_failed(A, bad):
    """``A`` with the failed matrices swapped for identities, so the batched routine runs on the rest."""
    from ._creation import eye

    identity = eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return A.where(~bad.unsqueeze(-1).unsqueeze(-1), identity)


def inv_ex(A, *, check_errors=False, out=None):
    """``(inverse, info)``: ``info`` is LU's (nonzero for a singular matrix, whose inverse is NaN)."""
    from .linalg import _check_matrix, inv

    _check_matrix(A, "linalg.inv_ex")
    info = _singular_info(A)
    bad = info != 0
    if not bool(bad.any()):
        return _named("linalg_inv_ex", ("inverse", "info"))(inv(A), info)
    if check_errors:
        _raise_for("linalg.inv_ex", A, info, lambda k: f"The diagonal element {k} is zero, the inversion could not "
                   "be completed because the input matrix is singular.")
    inverse = inv(_replace_failed(A, bad)).where(~bad.unsqueeze(-1).unsqueeze(-1), float("nan"))
    return _named("linalg_inv_ex", ("inverse", "info"))(inverse, info)


def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """``(result, info)``: ``info`` is LU's (nonzero for a singular matrix, whose solution is NaN)."""
    from .linalg import _check_matrix, solve

    _check_matrix(A, "linalg.solve_ex")
    info = _singular_info(A)
    bad = info != 0
    if not bool(bad.any()):
        return _named("linalg_solve_ex", ("result", "info"))(solve(A, B, left=left), info)
    if check_errors:
        _raise_for("torch.linalg.solve_ex", A, info, lambda k: "The solver failed because the input matrix is "
                   "singular.")
    result = solve(_replace_failed(A, bad), B, left=left)
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    mask = bad.unsqueeze(-1) if vector else bad.unsqueeze(-1).unsqueeze(-1)
    return _named("linalg_solve_ex", ("result", "info"))(result.where(~mask, float("nan")), info)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """``(L, info)``: ``info[i] = k > 0`` when the leading minor of order ``k`` of matrix ``i`` is not
    positive-definite (its factor is then zeros)."""
    from .linalg import cholesky

    try:
        factor = cholesky(A, upper=upper)
    except LinAlgError as error:
        if check_errors:
            raise LinAlgError(str(error).replace("linalg.cholesky:", "linalg.cholesky_ex:", 1)) from None
        if not hasattr(error, "info"):
            raise
        from ._creation import tensor

        info = tensor(error.info, dtype=_dtype.int32, device=A.device)
        bad = info != 0
        factor = cholesky(_replace_failed(A, bad), upper=upper).where(~bad.unsqueeze(-1).unsqueeze(-1), 0.0)
        return _named("linalg_cholesky_ex", ("L", "info"))(factor, info)
    from ._creation import zeros

    info = zeros(A.shape[:-2], dtype=_dtype.int32, device=A.device)
    return _named("linalg_cholesky_ex", ("L", "info"))(factor, info)


# -- legacy torch.* spellings -------------------------------------------------------------------------------------
def legacy_lu(A, pivot=True, get_infos=False, out=None):
    """``torch.lu``: ``(LU, pivots)`` or, with ``get_infos``, ``(LU, pivots, infos)``."""
    if get_infos:
        return _named("_lu_with_info", ("LU", "pivots", "info"))(*lu_factor_ex(A, pivot=pivot))
    return tuple(lu_factor(A, pivot=pivot))


def legacy_lu_solve(b, LU_data, LU_pivots, *, out=None):  # noqa: N803 - torch's argument names
    """``torch.lu_solve(b, LU_data, LU_pivots)``."""
    return _write_out(lu_solve(LU_data, LU_pivots, b), out)


for _name, _fn in {"lu": legacy_lu, "lu_solve": legacy_lu_solve}.items():
    setattr(Tensor, _name, _fn)
