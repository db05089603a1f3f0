"""``linalg.eig``/``eigvals`` (the ``linalg_eig`` row), and composites: ``householder_product``, ``tensorinv``,
``tensorsolve`` and the legacy ``torch.triangular_solve``.

>>> import jitorch
>>> jitorch.linalg.eigvals(jitorch.tensor([[2.0, 0.0], [0.0, 3.0]]))
tensor([2.+0.j, 3.+0.j])
"""
from __future__ import annotations

import math

from ._dispatch import apply
from ._pointwise import _write_out
from ._tensor import Tensor
from .ops import linalg_factor as F

__all__ = ["eig", "eigvals", "householder_product", "tensorinv", "tensorsolve"]


def _named(name, fields):
    from .linalg import _named as named

    return named(name, fields)


def eig(A, *, out=None):
    """Eigenvalues and (unit-norm) eigenvectors of general square matrices, always complex."""
    from .linalg import _check_matrix

    _check_matrix(A, "linalg.eig")
    return _named("linalg_eig", ("eigenvalues", "eigenvectors"))(*apply(F.EIG, A))


def eigvals(A, *, out=None):
    """Eigenvalues of general square matrices (complex)."""
    from .linalg import _check_matrix

    _check_matrix(A, "linalg.eigvals")
    return _write_out(apply(F.EIG, A)[0], out)


def householder_product(A, tau, *, out=None):  # noqa: N803 - torch's argument name
    """The first ``n`` columns of ``H_1 ... H_k`` with ``H_i = I - tau_i v_i v_i^H`` (``v_i``: column ``i`` of ``A``
    below the diagonal, with a unit on it), as LAPACK's ``orgqr``."""
    from ._creation import eye

    if A.dim() < 2:
        raise RuntimeError("torch.linalg.householder_product: input must have at least 2 dimensions.")
    m, n = A.shape[-2:]
    k = tau.shape[-1] if tau.dim() else 0
    if m < n:
        raise RuntimeError("torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                           f"input.shape[-1], got {m} < {n}")
    if n < k:
        raise RuntimeError("torch.linalg.householder_product: input.shape[-1] must be greater than or equal to "
                           f"tau.shape[-1], got {n} < {k}")
    if tau.dim() != A.dim() - 1 or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"torch.linalg.householder_product: Expected batch dimensions of tau to be equal to "
                           f"input.shape[:-2], but got tau of shape {tuple(tau.shape)} for input of shape "
                           f"{tuple(A.shape)}")
    if A.dtype is not tau.dtype:
        raise RuntimeError(f"torch.linalg.householder_product: tau dtype {tau.dtype} does not match input dtype "
                           f"{A.dtype}")
    vectors = A.tril(-1) + eye(m, n, dtype=A.dtype, device=A.device)
    q = eye(m, n, dtype=A.dtype, device=A.device).expand(A.shape)
    if k == 0:  # no reflector: still a function of A (zero gradient), as PyTorch's
        q = q + A * 0
    for i in reversed(range(k)):  # apply H_k first: Q = H_1 (H_2 (... H_k I))
        v = vectors.narrow(-1, i, 1)
        q = q - tau.narrow(-1, i, 1).unsqueeze(-1) * (v @ (v.mH @ q))
    return _write_out(q, out)


def tensorinv(A, ind=2, *, out=None):  # noqa: N803 - torch's argument name
    """Inverse of ``A`` seen as a map from its last dims to its first ``ind`` dims."""
    from .linalg import inv

    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = A.shape[:ind], A.shape[ind:]
    if math.prod(rows) != math.prod(cols):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {math.prod(cols)} != {math.prod(rows)}")
    square = A.reshape(math.prod(rows), math.prod(cols))
    return _write_out(inv(square).reshape(tuple(cols) + tuple(rows)), out)


def tensorsolve(A, B, dims=None, *, out=None):  # noqa: N803 - torch's argument names
    """``X`` with ``tensordot(A, X, X.ndim) == B``; ``dims`` of ``A`` are moved to the end first."""
    from .linalg import solve

    if dims is not None:
        dims = [d % A.dim() for d in dims]
        A = A.movedim(dims, list(range(A.dim() - len(dims), A.dim())))
    result = A.shape[B.dim():]
    if math.prod(result) != B.numel() or tuple(A.shape[:B.dim()]) != tuple(B.shape):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           f"prod(self.shape[:other.ndim]), but got {math.prod(result)} != "
                           f"{math.prod(A.shape[:B.dim()])}")
    x = solve(A.reshape(B.numel(), math.prod(result)), B.reshape(-1))
    return _write_out(x.reshape(result), out)


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False, *, out=None):  # noqa: N803
    """Legacy ``torch.triangular_solve(b, A)``: ``(solution, cloned_coefficient)`` of ``op(A) X = b``."""
    from .linalg import solve_triangular

    if b.dim() < 2 or A.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected b to have at least 2 dimensions, but it has {b.dim()} "
                           f"dimensions instead" if b.dim() < 2 else
                           f"torch.triangular_solve: Expected A to have at least 2 dimensions, but it has {A.dim()} "
                           "dimensions instead")
    coefficient = A.mT if transpose else A
    solution = solve_triangular(coefficient, b, upper=upper != transpose, unitriangular=unitriangular)
    return _named("triangular_solve", ("solution", "cloned_coefficient"))(solution, A.clone())


Tensor.triangular_solve = lambda self, A, upper=True, transpose=False, unitriangular=False: triangular_solve(
    self, A, upper, transpose, unitriangular)
