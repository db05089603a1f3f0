"""The reducing scatter row, ``scatter_reduce`` with prod, amax or amin (sum and mean are composites of
``scatter_add``), and ``reduce_at``, its ``out[key] = reduce(out[key], values)`` with repeated positions combined.

Split from ``indexing.py`` (which re-exports these names).

>>> import numpy as np
>>> out = np.ones(3)
>>> reduce_at(np, "prod", out, (np.array([0, 0, 2]),), np.array([2.0, 3.0, 4.0]))
>>> out.tolist()
[6.0, 1.0, 4.0]
"""
from __future__ import annotations

import numpy as np

from ..runtime import ufunc_at
from ..runtime.key_runs import run_starts
from .indexing import check_bounds
from .table import Opaque, defop

__all__ = ["SCATTER_REDUCE", "reduce_at", "reduce_in_rounds"]


# -- reducing scatters with no gradient-friendly composite: prod, amax, amin -------------------------------------------
_UFUNCS = {"prod": "multiply", "amax": "maximum", "amin": "minimum"}


def _identity(reduce, dtype):
    if reduce == "prod":
        return 1
    if dtype.kind == "b":
        return reduce == "amin"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if reduce == "amax" else info.max
    return -np.inf if reduce == "amax" else np.inf


def reduce_at(xp, reduce, out, key, values):
    """``out[key] = reduce(out[key], values)`` with repeated positions combined (``ufunc.at``); ``key`` holds one
    integer array per dim of ``out``.

    Array modules without ``ufunc.at`` (CuPy, for these ufuncs) get ``reduce_in_rounds``.
    """
    if not ufunc_at(xp, _UFUNCS[reduce], out, key, values):
        reduce_in_rounds(xp, reduce, out, key, values)


def reduce_in_rounds(xp, reduce, out, key, values):
    """``reduce_at`` in rounds of duplicate-free writes: the r-th occurrence of each position in round r, so every
    round is a plain fancy-index update."""
    ufunc = getattr(xp, _UFUNCS[reduce])
    key = xp.broadcast_arrays(*key)
    lin = xp.ravel_multi_index(tuple(k % n for k, n in zip(key, out.shape)), out.shape).reshape(-1)
    vals = xp.broadcast_to(xp.asarray(values, dtype=out.dtype), key[0].shape).reshape(-1)
    order = xp.argsort(lin, kind="stable")
    sorted_lin = lin[order]
    starts = run_starts(xp, sorted_lin)
    segment = xp.cumsum(starts) - 1
    rank = xp.arange(lin.size) - xp.nonzero(starts)[0][segment]
    flat = out.reshape(-1)
    for r in range(int(rank.max()) + 1 if lin.size else 0):
        pick = order[rank == r]
        flat[lin[pick]] = ufunc(flat[lin[pick]], vals[pick])


def _dim_key(xp, index, dim):
    """Index arrays that make ``a[key]`` read ``a`` at ``index`` along ``dim`` and at the element's own position
    along the other dims (the gather/scatter addressing)."""
    nd = index.ndim
    key = []
    for d in range(nd):
        if d == dim:
            key.append(index)
        else:
            shape = [1] * nd
            shape[d] = index.shape[d]
            key.append(xp.arange(index.shape[d]).reshape(shape))
    return tuple(key)


def _scatter_reduce_kernel(xp, a, index, src, dim, reduce, include_self):
    out = a.copy()
    check_bounds(index, a.shape[dim], dim, negative=False)
    key = _dim_key(xp, index, dim)
    if not include_self:
        out[key] = _identity(reduce, a.dtype)
    reduce_at(xp, reduce, out, key, src)
    return out


def _scatter_reduce_backward(ctx, g):
    from .. import _creation
    from .._pointwise import where

    self, index, src = ctx.inputs
    result = ctx.out
    dim, reduce, include_self = ctx.attrs["dim"], ctx.attrs["reduce"], ctx.attrs["include_self"]
    if reduce == "prod":
        # Products of the others, computed without dividing by zero (PyTorch's formula).
        masked_self = self.masked_fill(self == 0, 1)
        grad_self = g * masked_self.scatter_reduce(dim, index, src, "prod", include_self=include_self) / masked_self
        src_zero = src == 0
        zeros_in_slot = _creation.zeros_like(self).scatter_add(dim, index, src_zero.to(self.dtype)).gather(dim, index)
        single_zero = src_zero & (zeros_in_slot == 1)
        masked_src_result = self.scatter_reduce(dim, index, src.masked_fill(single_zero, 1), "prod",
                                                include_self=include_self)
        grad_src = where(single_zero, (g * masked_src_result).gather(dim, index),
                         (g * result).gather(dim, index) / src.masked_fill(src_zero, 1))
    else:
        # Ties share the gradient evenly, as in PyTorch.
        value = result.gather(dim, index)
        self_is_result = self == result
        src_is_result = src == value
        count = self_is_result.to(self.dtype).scatter_add(dim, index, src_is_result.to(self.dtype))
        share = g / count
        grad_self = self_is_result * share
        grad_src = src_is_result * share.gather(dim, index)
    if not include_self:
        grad_self = grad_self.scatter(dim, index, 0)
    return (grad_self if ctx.needs_grad(0) else None), None, (grad_src if ctx.needs_grad(2) else None)


SCATTER_REDUCE = defop("scatter_reduce", _scatter_reduce_kernel, _scatter_reduce_backward,
                       Opaque("reducing scatter"), saves="both", grad_name="ScatterReduceBackward0")
