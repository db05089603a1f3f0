"""``linalg.ldl_factor``/``ldl_factor_ex``/``ldl_solve``: the Bunch-Kaufman LDL^T (LDL^H) factorization of a
symmetric (Hermitian) matrix in LAPACK's packed form (``?sytrf``/``?hetrf``: L below the diagonal, the 1x1 and 2x2
blocks of D on it, 1-based pivots, negative for a 2x2 block), and the solve with it (``?sytrs``/``?hetrs``).
SciPy's LAPACK runs each matrix of a batch; as in torch the results carry no gradient.

>>> import jitorch
>>> A = jitorch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=jitorch.float64)
>>> LD, pivots = ldl_factor(A)
>>> ldl_solve(LD, pivots, jitorch.tensor([[1.0], [2.0]], dtype=jitorch.float64)).flatten().tolist()
[0.09090909090909091, 0.6363636363636364]
"""
from __future__ import annotations

import numpy as np

from . import _dtype

__all__ = ["ldl_factor_ex", "ldl_factor", "ldl_solve"]

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d", np.dtype(np.complex64): "c",
           np.dtype(np.complex128): "z"}


def _lapack(kind, array, hermitian):
    from scipy.linalg import lapack

    name = ("he" if hermitian and array.dtype.kind == "c" else "sy") + kind
    return getattr(lapack, _PREFIX[array.dtype] + name)


def _host(t, op, what):
    if t.dtype.category < _dtype.FLOAT or str(t.dtype).rpartition(".")[2] in ("float16", "bfloat16"):
        raise RuntimeError(f"{op}: Expected {what} to be a float32, float64, complex64 or complex128 tensor, got "
                           f"{t.dtype}")
    return np.asarray(t.detach().cpu().numpy())


def _wrap(array, like, dtype=None):
    import jitorch

    out = jitorch.from_numpy(np.array(array if dtype is None else array.astype(dtype), order="C"))  # 0-d stays 0-d
    return out if like.device.type == "cpu" else out.to(like.device)


def ldl_factor_ex(A, *, hermitian=False, check_errors=False, out=None):
    """``(LD, pivots, info)`` of each symmetric (``hermitian``: Hermitian) matrix in ``A``; ``info > 0`` marks a
    singular D (no error unless ``check_errors``).

    >>> import jitorch
    >>> ldl_factor_ex(jitorch.eye(2)).info.item()
    0
    """
    from .linalg import _check_matrix, _named

    _check_matrix(A, "linalg.ldl_factor_ex")
    a = _host(A, "torch.linalg.ldl_factor_ex", "A")
    batch, n = a.shape[:-2], a.shape[-1]
    flat = a.reshape(int(np.prod(batch, dtype=np.int64)), n, n)
    ld, pivots, info = np.zeros_like(flat), np.zeros(flat.shape[:2], np.int32), np.zeros(len(flat), np.int32)
    if n:
        factor = _lapack("trf", flat, hermitian)
        for i, matrix in enumerate(flat):
            packed, ipiv, code = factor(matrix, lower=1)
            ld[i], pivots[i], info[i] = np.tril(packed), ipiv, code
    if check_errors and info.any():
        from .ops.linalg import LinAlgError

        raise LinAlgError(f"torch.linalg.ldl_factor_ex: The factorization could not be completed because the input "
                          f"is not invertible (info = {int(info[info != 0][0])}).")
    result = _named("linalg_ldl_factor_ex", ("LD", "pivots", "info"))
    return result(_wrap(ld.reshape(a.shape), A), _wrap(pivots.reshape(*batch, n), A),
                  _wrap(info.reshape(batch), A))


def ldl_factor(A, *, hermitian=False, out=None):
    """``(LD, pivots)``; raises when a factor is singular, as ``torch.linalg.ldl_factor``.

    >>> import jitorch
    >>> ldl_factor(2 * jitorch.eye(2)).LD.diagonal().tolist()
    [2.0, 2.0]
    """
    from .linalg import _named

    LD, pivots, info = ldl_factor_ex(A, hermitian=hermitian)
    if bool((info != 0).any()):
        from .ops.linalg import LinAlgError

        bad = int(info[info != 0].reshape(-1)[0])
        raise LinAlgError(f"torch.linalg.ldl_factor: The factorization could not be completed because the input is "
                          f"not invertible (info = {bad}).")
    return _named("linalg_ldl_factor", ("LD", "pivots"))(LD, pivots)


def ldl_solve(LD, pivots, B, *, hermitian=False, out=None):  # noqa: N803 - torch's argument names
    """``X`` with ``A X = B`` from ``ldl_factor``'s ``(LD, pivots)``; ``B`` is (..., n, k).

    >>> import jitorch
    >>> LD, piv = ldl_factor(2 * jitorch.eye(2))
    >>> ldl_solve(LD, piv, jitorch.ones(2, 1)).flatten().tolist()
    [0.5, 0.5]
    """
    if pivots.dtype != _dtype.int32:
        raise RuntimeError(f"torch.linalg.ldl_solve: Expected pivots to be integers. Got {pivots.dtype}")
    if LD.dtype != B.dtype:
        raise RuntimeError(f"torch.linalg.ldl_solve: Expected LD and B to have the same dtype, but got LD with dtype "
                           f"{LD.dtype} and B with dtype {B.dtype} instead")
    if B.dim() < 2 or B.shape[-2] != LD.shape[-1]:
        raise RuntimeError(f"torch.linalg.ldl_solve: Incompatible shapes of LD and B for the equation AX = B "
                           f"({tuple(LD.shape[-2:])} and {tuple(B.shape[-2:])})")
    ld, piv, b = _host(LD, "torch.linalg.ldl_solve", "LD"), pivots.cpu().numpy(), _host(B, "torch.linalg.ldl_solve",
                                                                                         "B")
    batch = np.broadcast_shapes(ld.shape[:-2], b.shape[:-2])
    n, k = ld.shape[-1], b.shape[-1]
    count = int(np.prod(batch, dtype=np.int64))
    ld = np.broadcast_to(ld, batch + ld.shape[-2:]).reshape(count, n, n)
    piv = np.broadcast_to(piv, batch + piv.shape[-1:]).reshape(count, n)
    rhs = np.broadcast_to(b, batch + (n, k)).reshape(count, n, k)
    x = np.zeros_like(rhs)
    if n and k:
        solve = _lapack("trs", ld, hermitian)
        for i in range(len(rhs)):
            x[i], _ = solve(ld[i], piv[i], rhs[i], lower=1)
    return _wrap(x.reshape(batch + (n, k)), B)
