"""torch's output layout for an elementwise op of two operands of one shape laid out differently: the first one's.

NumPy's ufuncs (order "K") fall back to row-major when their operands' memory orders disagree; torch's
TensorIterator orders the output's dimensions by the operands' strides, the first operand's first, so a
channels-last activation plus a row-major one stays channels-last and ``x.t() + y`` is column-major.

>>> import numpy as np
>>> x, y = np.ones((4, 3)).T, np.ones((3, 4))
>>> in_first_layout(np.add, x, y).strides, np.add(x, y).strides
((8, 24), (32, 8))
"""
from __future__ import annotations

import numpy as np

__all__ = ["in_first_layout"]


def in_first_layout(ufunc, x, y):
    """``ufunc(x, y)`` laid out in ``x``'s memory order, for operands of one shape whose orders differ (NumPy's
    "K" order then picks row-major; torch's TensorIterator gives the first operand's order: a channels-last
    activation plus a contiguous one stays channels-last); None where ``x``'s order is ambiguous (equal or zero
    strides of dims longer than 1) or ``x`` is row-major already."""
    strides = [abs(st) for st, n in zip(x.strides, x.shape) if n > 1]
    if len(set(strides)) != len(strides) or 0 in strides:  # (an expanded first operand orders nothing)
        return None
    order = sorted(range(x.ndim), key=lambda d: (-abs(x.strides[d]) if x.shape[d] > 1 else 0, d))
    if order == list(range(x.ndim)):
        return None
    inverse = np.argsort(order)
    return ufunc(x.transpose(order), y.transpose(order)).transpose(inverse)
