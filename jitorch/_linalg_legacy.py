"""The legacy ``torch.*`` spellings of ``jitorch.linalg``'s decompositions and inverses (``torch.inverse``,
``torch.svd`` returning V, ``torch.qr(some=...)``, ``torch.cholesky_solve``...), built on the linalg functions.

Split from ``_linalg.py`` (the matrix products), which re-exports them and attaches their Tensor methods.

>>> import jitorch
>>> a = jitorch.tensor([[2.0, 0.0], [0.0, 4.0]])
>>> jitorch.inverse(a).tolist(), jitorch.det(a).item(), a.logdet().item() == jitorch.log(jitorch.tensor(8.0)).item()
([[0.5, 0.0], [0.0, 0.25]], 8.0, True)
"""
from __future__ import annotations

from ._pointwise import _write_out
from .amp._cast_mode import autocast_policy
# _linalg imports this module at its end, once this is defined.
from ._linalg import matmul


def inverse(input, *, out=None):
    from .linalg import inv

    return _write_out(inv(input), out)


def det(input):
    from .linalg import det as linalg_det

    return linalg_det(input)


def logdet(input):
    """``log(det(A))``: NaN for a negative determinant, -inf for a singular matrix; complex ``log(det)`` for complex
    input (the sign's phase as the imaginary part)."""
    from .linalg import slogdet as linalg_slogdet

    sign, logabs = linalg_slogdet(input)
    if input.is_complex():
        return sign.log() + logabs
    return logabs.where(sign >= 0, float("nan"))


def slogdet(input):
    from . import return_types
    from .linalg import slogdet as linalg_slogdet

    return return_types.slogdet(*linalg_slogdet(input))


def cholesky(input, upper=False, *, out=None):
    from .linalg import cholesky as linalg_cholesky

    return _write_out(linalg_cholesky(input, upper=upper), out)


def cholesky_solve(B, L, upper=False, *, out=None):
    """Solve ``A X = B`` given the Cholesky factor of ``A``."""
    from .linalg import solve

    if B.dim() < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.dim()} dimensions instead")

    factor = L.mH if upper else L
    return _write_out(solve(matmul(factor, factor.mH), B), out)


def cholesky_inverse(L, upper=False, *, out=None):
    """``inv(A)`` given the Cholesky factor of ``A``."""
    from .linalg import inv

    factor = L.mH if upper else L
    return _write_out(inv(matmul(factor, factor.mH)), out)


def svd(input, some=True, compute_uv=True, *, out=None):
    """Legacy SVD: returns ``(U, S, V)`` (V, not Vh); zero-filled U and V when ``compute_uv=False``."""
    from . import linalg

    if not compute_uv:
        m, n = input._data.shape[-2:]
        batch = input._data.shape[:-2]
        return linalg.SVD_LEGACY(input.new_zeros(batch + (m, m)), linalg.svdvals(input),
                                 input.new_zeros(batch + (n, n)))
    u, s, vh = linalg.svd(input, full_matrices=not some)
    return linalg.SVD_LEGACY(u, s, vh.mH)


def qr(input, some=True, *, out=None):
    from . import linalg

    return linalg.QR_LEGACY(*linalg.qr(input, mode="reduced" if some else "complete"))


@autocast_policy(cpu="fp32")
def pinverse(input, rcond=1e-15):
    from .linalg import pinv

    return pinv(input, rtol=rcond)


def matrix_power(input, n):
    from .linalg import matrix_power as linalg_matrix_power

    return linalg_matrix_power(input, n)


def geqrf(input, *, out=None):
    """LAPACK's ``geqrf``: the QR factorization as Householder reflectors, ``(a, tau)``. ``a`` holds R on and above
    the diagonal and the reflectors' vectors below it; ``householder_product(a, tau)`` is Q. Both come back
    column-major, as torch's. Not differentiable (torch has no derivative for it either)."""
    import numpy as np

    from . import return_types
    from ._tensor import Tensor

    if input.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if not (input.dtype.is_floating_point or input.dtype.is_complex) or input.dtype.itemsize < 4:
        from ._dispatch import TORCH_TYPE_NAMES

        raise RuntimeError(f"\"geqrf_cpu\" not implemented for '{TORCH_TYPE_NAMES[input.dtype.name]}'")
    host = np.asarray(input.detach()._host())
    m, n = host.shape[-2:]
    batch = host.shape[:-2]
    # NumPy's "raw" QR is geqrf itself: its (n, m) row-major result is the (m, n) column-major ``a``.
    a_t = np.empty(batch + (n, m), host.dtype)
    tau = np.empty(batch + (min(m, n),), host.dtype)
    for idx in np.ndindex(*batch):
        a_t[idx], tau[idx] = np.linalg.qr(host[idx], mode="raw")
    a = Tensor._make(np.swapaxes(a_t, -1, -2)).to(input.device)
    return _write_out(return_types.geqrf(a, Tensor._make(tau).to(input.device)), out)


def ormqr(input, tau, other, left=True, transpose=False, *, out=None):
    """``op(Q) @ other`` (``left``) or ``other @ op(Q)``, where ``Q = H_1 ... H_k`` is the full square product of the
    reflectors ``geqrf`` left in ``input`` and ``tau`` and ``op`` is the conjugate transpose when ``transpose``.
    Q is built by ``linalg.householder_product`` of the reflectors padded to a square (a zero ``tau`` is the
    identity), so gradients flow to all three arguments."""
    from .linalg import householder_product

    side = -2 if left else -1
    # torch 2.13's checks, in its order and words
    if input.dim() < 2:
        raise RuntimeError("torch.ormqr: input must have at least 2 dimensions.")
    if other.dim() < 2:
        raise RuntimeError("torch.ormqr: other must have at least 2 dimensions.")
    if other.shape[side] != input.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if input.dim() - tau.dim() != 1:
        raise RuntimeError(f"torch.ormqr: Expected tau to have one dimension less than input, but got tau.ndim equal "
                           f"to {tau.dim()} and input.ndim is equal to {input.dim()}")
    if tau.shape[-1] != min(other.shape[side], input.shape[-1]):
        raise RuntimeError(f"torch.ormqr: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])")
    if input.dim() != other.dim():
        raise RuntimeError(f"torch.ormqr: Expected other to have the same number of dimensions as input, but got "
                           f"other.ndim equal to {other.dim()} and input.ndim is equal to {input.dim()}")
    if input.dtype is not tau.dtype or input.dtype is not other.dtype:
        raise RuntimeError(f"torch.ormqr: Expected input, tau and other to have the same dtype, but got "
                           f"{input.dtype}, {tau.dtype} and {other.dtype}")
    m, k = input.shape[-2], tau.shape[-1]
    reflectors = input.narrow(-1, 0, k)
    square = _cat_last(reflectors, input.new_zeros(tuple(input.shape[:-1]) + (m - k,)))
    q = householder_product(square, _cat_last(tau, tau.new_zeros(tuple(tau.shape[:-1]) + (m - k,))))
    q = q.mH if transpose else q
    result = matmul(q, other) if left else matmul(other, q)
    return _write_out(result.mT.contiguous().mT, out)  # column-major, as LAPACK writes it


def _cat_last(a, b):
    from ._movement_join import cat

    return cat([a, b], -1)
