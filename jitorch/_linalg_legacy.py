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
