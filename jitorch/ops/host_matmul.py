"""`matmul`: ``xp.matmul``, with the product over a single term (an outer product) as the multiply it is.

NumPy's OpenBLAS (0.3.31) is slow at ``k == 1``: a (1024, 1) by (1, 256) float32 product takes 0.71 ms, the
broadcast multiply that gives the same bits 0.15 ms (0.9 ms against 0.05 at ``k == 2``). Real code makes such products
all the time: the weight gradient of a layer trained on one sample at a time (a recurrent cell at batch 1, online
or reinforcement learning), a ``Linear(1, n)`` layer of a regression tutorial and the input gradient of a
``Linear(n, 1)``.

>>> import numpy as np
>>> a, b = np.arange(3.0).reshape(3, 1), np.arange(4.0).reshape(1, 4)
>>> bool((matmul(np, a, b) == np.matmul(a, b)).all())
True
"""
from __future__ import annotations

import numpy as np

__all__ = ["matmul"]


def matmul(xp, a, b, out=None):
    """``xp.matmul(a, b, out=out)``; NumPy products over one term as a broadcast multiply (see the module notes)."""
    if (xp is np and a.ndim >= 2 and b.ndim >= 2 and a.shape[-1] == 1 and b.shape[-2] == 1
            and a.dtype == b.dtype and a.dtype.kind in "fc"):
        return np.multiply(a, b, out=out)
    return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)
