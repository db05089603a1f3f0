"""The cumulative reduction rows, ``cumsum`` and ``cumprod``: a running value in torch's accumulation type (float64
for float32 on the host, float32 for halves), each output rounded once; ``cumprod``'s backward also where the input
holds zeros. Split from ``reduction.py``, which re-exports them.

>>> import jitorch
>>> jitorch.tensor([1.0, 2.0, 3.0]).cumprod(0).tolist(), jitorch.tensor([-0.0, -0.0]).cumsum(0).tolist()
([1.0, 2.0, 6.0], [0.0, 0.0])
"""
from __future__ import annotations

import numpy as np

from .._grad_state import GradState
from ..runtime import is_cupy
from .native_scan import cumsum_float32
from .reduction import _HALF, _row_major, defop
from .table import Reduction


def _scan_kernel(name):
    def kernel(xp, a, dim, dtype):
        if not a.ndim:
            return a.astype(dtype)
        # As PyTorch (acc_type): the running value is float32 for halves and, on the host, float64 for float32; each
        # output is rounded once. A running value in the output type drifts with the length of the scan.
        if dtype == _F32:
            # (None unless a C-contiguous float32 host array: the loop below then)
            out = cumsum_float32(a, dim, op)
            if out is not None:
                return out
        dtype = np.dtype(dtype)
        acc = np.float32 if dtype in _HALF else np.float64 if dtype == _F32 and not is_cupy(xp) else None
        out = getattr(xp, name)(a, axis=dim, dtype=dtype if acc is None else acc)
        if name == "cumsum" and out.dtype.kind == "f" and not is_cupy(xp):
            out += 0.0  # ATen's sums start from 0.0: a run of -0.0 gives 0.0 (NumPy's start from the first element)
        return _row_major(xp, a, out if acc is None else out.astype(dtype))
    op = "sum" if name == "cumsum" else "prod"
    return kernel


_F32 = np.dtype(np.float32)
CUMSUM = defop("cumsum", _scan_kernel("cumsum"),
               lambda ctx, g: g.flip(ctx.attrs["dim"]).cumsum(ctx.attrs["dim"]).flip(ctx.attrs["dim"]),
               Reduction("scan_sum"), ordered=True)


def _cumprod_backward(ctx, g):
    (x,) = ctx.inputs
    dim = ctx.attrs["dim"]
    out = ctx.out
    if x.is_complex():  # the conjugate Wirtinger gradient: g times the conjugate of each partial product
        x, out = x.conj(), out.conj()
    if not bool((x == 0).any()):
        return (g * out).flip(dim).cumsum(dim).flip(dim) / x
    if not GradState.enabled:  # (a gradient of this gradient needs the O(n^2) form below, as in torch)
        return _cumprod_grad_through_zeros(g, x, out, dim)
    # Zeros: fall back to the O(n^2) sum over j >= i of g_j * prod_{k <= j, k != i} x_k, built from masks.
    n = x.shape[dim]
    xm = x.movedim(dim, -1)
    gm = g.movedim(dim, -1)
    from .. import _creation

    eye = _creation.eye(n, dtype=x.dtype, device=x.device).bool()
    # others[..., i, j] = prod_{k <= j} (x_k if k != i else 1)
    replaced = xm.unsqueeze(-2).expand(*xm.shape[:-1], n, n).masked_fill(eye, 1.0)
    others = replaced.cumprod(-1)
    upper = _creation.ones(n, n, dtype=x.dtype, device=x.device).triu()
    grad = (others * upper * gm.unsqueeze(-2)).sum(-1)
    return grad.movedim(-1, dim)


def _cumprod_grad_through_zeros(g, x, out, dim):
    """torch's O(n) gradient of ``out = cumprod(x)`` where ``x`` holds zeros, op for op: before the first zero ``z1``
    the reversed cumulative sum of ``g * out`` over ``x``; at ``z1``, ``prod(x[:z1])`` times the sum over ``[z1,
    z2)`` (up to the second zero) of ``g`` times the products of ``x`` past ``z1``; zero past ``z1``."""
    n = x.shape[dim]
    if n == 1:
        return g
    is_zero = x == 0
    zeros_seen = is_zero.cumsum(dim)
    before, between = zeros_seen == 0, zeros_seen == 1
    first = between & is_zero
    head = (out * g).masked_fill(~before, 0.0).flip(dim).cumsum(dim).flip(dim) / x
    after_first = between & ~first
    at_first = (x.masked_fill(~after_first, 1.0).cumprod(dim) * g.masked_fill(~between, 0.0)).sum(dim, keepdim=True)
    from .._movement_join import cat

    # prod(x[:z1]) is out[z1 - 1] (1 where z1 = 0): out shifted one step along dim
    shifted = cat([out.new_ones(out.narrow(dim, 0, 1).shape), out.narrow(dim, 0, n - 1)], dim)
    return head.where(before, (at_first * shifted).where(first, 0.0))


CUMPROD = defop("cumprod", _scan_kernel("cumprod"), _cumprod_backward, Reduction("scan_prod"), saves="both",
                ordered=True)
