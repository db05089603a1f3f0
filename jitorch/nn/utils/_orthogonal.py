"""``torch.nn.utils.parametrizations.orthogonal``: a matrix (or batch of matrices) kept orthogonal (unitary) through a
matrix exponential, a Cayley map or a product of Householder reflectors of the stored tensor, with torch's state-dict
keys (``parametrizations.weight.original`` and, with the dynamic trivialization, ``parametrizations.weight.0.base``).

>>> import jitorch
>>> from jitorch import nn
>>> m = nn.utils.parametrizations.orthogonal(nn.Linear(3, 3))
>>> bool(jitorch.allclose(m.weight @ m.weight.T, jitorch.eye(3), atol=1e-5))
True
"""
from __future__ import annotations

import enum

from ... import _creation, _dtype, _movement_copy, _random, linalg
from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ..modules.module import Module
from . import parametrize

__all__ = ["orthogonal"]


def _is_orthogonal(q):
    n, k = q.size(-2), q.size(-1)
    eye = _creation.eye(k, dtype=q.dtype, device=q.device)
    return bool((q.mH @ q).allclose(eye, atol=10.0 * n * _dtype.finfo(q.dtype).eps))


def _make_orthogonal(a):
    """The Q of ``a = QR`` (``a`` tall) with a real, non-negative diagonal of R."""
    q, r = linalg.qr(a)
    return q * r.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


def _geqrf(a):
    """LAPACK's ``geqrf`` of a tall ``a``: R on and above the diagonal, the Householder vectors (unit first entry
    implied) below it, and their ``tau``; ``dlarfg``'s conventions, so the reflectors are torch's."""
    a = a.clone()
    m, n = a.shape[-2:]
    taus = []
    for j in range(n):
        alpha, x = a[..., j, j], a[..., j + 1:, j]
        xnorm = linalg.vector_norm(x, dim=-1)
        beta = -(alpha.hypot(xnorm)).copysign(alpha)
        # x == 0: no reflection (tau = 0, H = I), the diagonal entry stays alpha
        keep = xnorm == 0
        tau = ((beta - alpha) / beta).masked_fill(keep, 0.0)
        v = x / (alpha - beta).masked_fill(keep, 1.0).unsqueeze(-1)
        beta = beta.where(~keep, alpha)
        w = _movement_copy.cat([_creation.ones_like(alpha).unsqueeze(-1), v], -1).unsqueeze(-1)
        rest = a[..., j:, j + 1:]
        a[..., j:, j + 1:] = rest - tau[..., None, None] * w * (w.mT @ rest)
        a[..., j, j] = beta
        a[..., j + 1:, j] = v
        taus.append(tau)
    return a, _movement_copy.stack(taus, -1) if taus else a.new_zeros(a.shape[:-2] + (0,))


class _OrthMaps(enum.Enum):
    matrix_exp = enum.auto()
    cayley = enum.auto()
    householder = enum.auto()


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        # A complex unitary matrix has more real degrees of freedom than the reflectors below its diagonal.
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):  # noqa: N803 - torch's argument name
        n, k = X.size(-2), X.size(-1)
        transposed = n < k
        if transposed:
            X, n, k = X.mT, k, n  # noqa: N806
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()  # noqa: N806 - n*k - k(k-1)/2 free parameters
            if n != k:  # embedded in a square matrix
                X = _movement_copy.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], -1)  # noqa: N806
            A = X - X.mH  # noqa: N806 - skew-symmetric (skew-hermitian)
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = linalg.matrix_exp(A)  # noqa: N806
            else:  # the Cayley retraction (I + A/2)(I - A/2)^-1
                eye = _creation.eye(n, dtype=A.dtype, device=A.device)
                Q = linalg.solve(eye.add(A, alpha=-0.5), eye.add(A, alpha=0.5))  # noqa: N806
            if n != k:
                Q = Q[..., :k]  # noqa: N806
        else:
            A = X.tril(diagonal=-1)  # noqa: N806
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            # X's diagonal holds the signs (+-1); cast so that it is neither differentiated nor updated
            Q = linalg.householder_product(A, tau) * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)  # noqa: N806
        if hasattr(self, "base"):
            Q = self.base @ Q  # noqa: N806
        return Q.mT if transposed else Q

    @no_grad()
    def right_inverse(self, Q):  # noqa: N803 - torch's argument name
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {Q.shape}.")
        q_init = Q
        n, k = Q.size(-2), Q.size(-1)
        transpose = n < k
        if transpose:
            Q, n, k = Q.mT, k, n  # noqa: N806
        if not hasattr(self, "base"):
            if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                          "parametrizations when use_trivialization=False.")
            # Householder: the reflectors of Q's QR, with the signs making diag(R) > 0 on the diagonal (a zero tau,
            # no reflection, flips it)
            A, tau = _geqrf(Q)  # noqa: N806
            signs = A.diagonal(dim1=-2, dim2=-1).sign()
            A.diagonal(dim1=-2, dim2=-1).copy_(signs.where(tau != 0.0, -signs))
            return A.mT if transpose else A
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)  # noqa: N806
        else:  # completed into a full n x n orthogonal matrix
            N = _random.randn(*(Q.size()[:-2] + (n, n - k)), dtype=Q.dtype, device=Q.device)  # noqa: N806
            Q = _make_orthogonal(_movement_copy.cat([Q, N], -1))  # noqa: N806
        self.base = Q
        # -I, so that householder(zeros) is the identity
        neg_id = _creation.zeros_like(q_init)
        neg_id.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_id


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Make ``module.<name>`` orthogonal (unitary): orthonormal columns if it is tall, rows if it is wide.

    ``orthogonal_map`` is ``"matrix_exp"``, ``"cayley"`` or ``"householder"`` (default: ``"matrix_exp"`` for square or
    complex matrices, ``"householder"`` otherwise).
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        square = weight.size(-2) == weight.size(-1)
        orthogonal_map = "matrix_exp" if square or weight.is_complex() else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(f'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
