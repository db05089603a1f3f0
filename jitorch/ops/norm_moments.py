"""Row statistics of the array fallbacks of layer norm and group norm (CuPy arrays, NumPy layouts the generated row
kernels do not take), computed as those kernels compute them (`jitorch._compile.lower_rows.layer_norm`): the row is
summed shifted by its first element ``x0``, ``mean = x0 + shift`` with ``shift = mean(x - x0)``, and the deviations
are ``(x - x0) - shift``. A constant row (padding, masked positions, expanded inputs) then has ``mean == x0``,
deviations and variance exactly 0, and normalizes to exactly 0 as torch's Welford statistics do, where
``x - sum(x) / n`` left a rounding that ``1 / sqrt(eps)`` amplified 316 times; rows far from 0 (1e4 plus noise) keep
the digits of their noise, since ``x - x0`` is exact there.

>>> import numpy as np
>>> mean, dev, var = shifted_moments(np, np.full((2, 7), -2.7, np.float32), 1, True)
>>> bool((mean == np.float32(-2.7)).all()), float(abs(dev).max()), float(var.max())
(True, 0.0, 0.0)
"""
from __future__ import annotations

import math

__all__ = ["shifted_moments"]


def shifted_moments(xp, x, k, blas):
    """(mean, deviations, variance) of ``x`` over its last ``k`` dims as ``(rows, 1)``, ``(rows, n)`` and
    ``(rows, 1)`` arrays of ``x``'s module ``xp`` (the variance the mean of squared deviations). ``blas``: the row sums
    as products with a vector of ones (one pass, where NumPy's reductions along the last axis run one short row at a
    time), else NumPy's pairwise ``mean`` (long rows)."""
    lead = x.shape[:x.ndim - k]
    rows, n = math.prod(lead), math.prod(x.shape[x.ndim - k:])
    first = x[(Ellipsis,) + (slice(0, 1),) * k] if n else xp.zeros(lead + (1,) * k, x.dtype)
    dev = (x - first).reshape(rows, n)  # a new array: the deviations are made in place from here
    if blas:
        shift = xp.matmul(dev, xp.ones(n, dtype=dev.dtype))[:, None]
        shift /= n
    else:
        shift = dev.mean(axis=1, keepdims=True)
    dev -= shift
    var = xp.einsum("ij,ij->i", dev, dev)[:, None] if blas else (dev * dev).mean(axis=1, keepdims=True)
    if blas:
        var /= n
    return first.reshape(rows, 1) + shift, dev, var
