"""``linalg.matrix_exp``, ``linalg.cond``, ``linalg.vander``, ``linalg.matrix_power`` and ``linalg.multi_dot`` as
composites of matmul, solve and norms (a chain of products in the cheapest order).

>>> import jitorch
>>> jitorch.linalg.matrix_exp(jitorch.zeros(2, 2))
tensor([[1., 0.],
        [0., 1.]])
"""
from __future__ import annotations

import math

from ._linalg import matmul
from ._pointwise import _write_out
from ._tensor import Tensor
from .amp._cast_mode import autocast_policy

__all__ = ["matrix_exp", "cond", "vander", "matrix_power", "multi_dot"]

# Pade [13/13] coefficients (Higham, "The scaling and squaring method for the matrix exponential revisited", 2005).
_B13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
        10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152  # the 1-norm up to which [13/13] is accurate to double precision without scaling


@autocast_policy(cpu="unlisted", cuda="unlisted")
def matrix_exp(A):  # noqa: N803 - torch's argument name
    """``exp(A)`` of square matrices (batched) by scaling and squaring with a [13/13] Pade approximant."""
    from .linalg import matrix_norm, solve

    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.matrix_exp: A must be batches of square matrices, but they are "
                           f"{A.shape[-2] if A.dim() >= 2 else ''} by {A.shape[-1] if A.dim() else ''} matrices")
    if not A.dtype.is_floating_point and not A.dtype.is_complex:
        raise RuntimeError(f"linalg.matrix_exp: expected a floating point or complex tensor, got {A.dtype}")
    if A.numel() == 0:
        return A.clone()
    if A.dtype.is_floating_point and A.dtype.itemsize == 2:  # float16/bfloat16: solved in float32, rounded once
        return matrix_exp(A.float()).to(A.dtype)
    norm = matrix_norm(A.detach(), 1).max().item()
    squarings = max(0, math.ceil(math.log2(norm / _THETA13))) if norm > _THETA13 else 0
    a = A / (2.0 ** squarings)
    eye = a.new_zeros(a.shape[-1:]).add(1).diag_embed().expand(a.shape)
    b = _B13
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = solve(v - u, v + u)
    for _ in range(squarings):
        r = r @ r
    return r


def cond(A, p=None):  # noqa: N803 - torch's argument name
    """Condition number of ``A`` in the ``p`` norm (the 2-norm ratio of singular values by default); ``inf`` for a
    singular matrix in the norms that need its inverse, 0 for empty matrices, as PyTorch's."""
    from .linalg import _check_matrix, inv_ex, matrix_norm, svdvals

    if p not in (None, 2, -2, 1, -1, math.inf, -math.inf, "fro", "nuc"):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    _check_matrix(A, "linalg.cond", square=False)
    if p not in (None, 2, -2) and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.cond(ord={p}): A must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")
    if A.numel() == 0:
        return A.new_zeros(A.shape[:-2], dtype=A.dtype.to_real())
    if p is None or p in (2, -2):
        s = svdvals(A)
        big, small = s[..., 0], s[..., -1]
        return big / small if p != -2 else small / big
    inverse, info = inv_ex(A)
    result = matrix_norm(A, p) * matrix_norm(inverse.where(inverse == inverse, 0.0), p)
    return result.where(info == 0, math.inf)


def vander(x, N=None):  # noqa: N803 - torch's argument name
    """Vandermonde matrix with increasing powers along the last dim (batched over leading dims)."""
    from ._movement import stack

    if not isinstance(x, Tensor) or x.dim() < 1:
        raise ValueError("linalg.vander: x must have at least one dimension")
    n = x.shape[-1] if N is None else N
    if n <= 1 and N is not None and n < 1:
        raise ValueError("N must be greater than 1.")
    cols = [x.new_ones(x.shape)] + [x ** k for k in range(1, n)]
    return stack(cols[:n], -1)


def matrix_power(A, n, *, out=None):
    """``A`` multiplied by itself ``n`` times (``n < 0`` uses the inverse; ``n == 0`` gives the identity)."""
    if A._data.ndim < 2 or A._data.shape[-1] != A._data.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but got shape "
                           f"{tuple(A.shape)}")
    if n == 0:
        from ._creation import eye

        identity = eye(A._data.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
        # PyTorch copies the identity into a clone of A: the result is in A's graph with a zero gradient.
        return A.clone().copy_(identity) if A.requires_grad else identity.clone()
    from .linalg import inv  # (linalg imports this module at its end)

    base = inv(A) if n < 0 else A
    n = abs(n)
    result = None
    while n:  # binary exponentiation: log2(n) squarings
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return _write_out(result, out)


def multi_dot(tensors, *, out=None):
    """Product of a chain of matrices in the cheapest order; the first/last may be vectors."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first_vec, last_vec = tensors[0]._data.ndim == 1, tensors[-1]._data.ndim == 1
    mats = [t.unsqueeze(0) if i == 0 and first_vec else t.unsqueeze(-1) if i == len(tensors) - 1 and last_vec else t
            for i, t in enumerate(tensors)]
    for i, t in enumerate(mats):
        if t._data.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {tensors[i]._data.ndim}D")
    for i in range(len(mats) - 1):
        if mats[i]._data.shape[1] != mats[i + 1]._data.shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {tuple(tensors[i].shape)} and "
                               f"{tuple(tensors[i + 1].shape)} cannot be multiplied")
    result = _chain(mats, _chain_order([m._data.shape[0] for m in mats] + [mats[-1]._data.shape[1]]),
                    0, len(mats) - 1)
    if first_vec:
        result = result.squeeze(0)
    if last_vec:
        result = result.squeeze(-1)
    return _write_out(result, out)


def _chain_order(dims):
    """Matrix-chain dynamic programme: ``split[i][j]`` is where to split the product of matrices i..j."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def _chain(mats, split, i, j):
    if i == j:
        return mats[i]
    k = split[i][j]
    return matmul(_chain(mats, split, i, k), _chain(mats, split, k + 1, j))
