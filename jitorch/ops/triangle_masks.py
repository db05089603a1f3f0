"""``tril``/``triu`` as a select against a cached triangle mask per (rows, cols, diagonal, side).

NumPy's ``tril`` builds its mask (an outer comparison of two ranges) on every call and selects with ``where``: 32x32
5.3 us (torch 1.4). The mask is kept here, and a C-contiguous float32 matrix selects through the generated
branch-free kernel (`native_select.where`: 1000x1000 0.7 -> ~0.25 ms); other dtypes, batches and devices take the
array module's ``where`` against the same broadcast mask. A select copies every kept element bit for bit (-0.0, nan).

>>> import numpy as np
>>> triangle(np, np.arange(9, dtype=np.float32).reshape(3, 3), -1, upper=False).tolist()
[[0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [6.0, 7.0, 0.0]]
"""
from __future__ import annotations

import numpy as np

from .._memory_format import row_major
from .native_select import where as native_where

__all__ = ["triangle"]

_MASKS_MAX = 64  # masks kept (a 1000x1000 one is 1 MB); a full table starts over
_masks: dict = {}


def _mask(xp, a, diagonal, upper):
    """The bool (rows, cols) mask of ``a``'s kept elements: ``j - i <= diagonal`` (tril) or ``>= diagonal`` (triu),
    on ``a``'s device."""
    rows, cols = a.shape[-2:]
    diagonal = max(-rows - 1, min(cols + 1, diagonal))  # beyond the matrix every such diagonal gives one mask
    key = (None if xp is np else (xp.__name__, str(getattr(a, "device", None))), rows, cols, diagonal, upper)
    mask = _masks.get(key)
    if mask is None:
        if len(_masks) >= _MASKS_MAX:
            _masks.clear()
        mask = xp.tri(rows, cols, diagonal - 1 if upper else diagonal, dtype=bool)
        mask = _masks[key] = ~mask if upper else mask
    return mask


def triangle(xp, a, diagonal, upper):
    """``a.triu(diagonal)`` (``upper``) or ``a.tril(diagonal)`` of an array of at least 2 dims, row-major as ATen's."""
    a = row_major(a)
    mask = _mask(xp, a, int(diagonal), upper)
    if a.ndim == 2:
        out = native_where(mask, a, 0.0)  # (None unless float32 NumPy of at least 128 elements)
        if out is not None:
            return out
    return xp.where(mask, a, xp.zeros((), a.dtype))
