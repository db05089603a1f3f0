"""`matmul`: ``xp.matmul``, with the shapes NumPy's OpenBLAS handles slowly done another way.

float32 products the generated register tiles run faster, or that split over jitorch's threads, go through
`threaded_matmul`.

NumPy's OpenBLAS (0.3.31) is slow at ``k == 1``: a (1024, 1) by (1, 256) float32 product takes 0.71 ms, the
broadcast multiply that gives the same bits 0.15 ms (0.9 ms against 0.05 at ``k == 2``). Real code makes such products
all the time: the weight gradient of a layer trained on one sample at a time (a recurrent cell at batch 1, online
or reinforcement learning), a ``Linear(1, n)`` layer of a regression tutorial and the input gradient of a
``Linear(n, 1)``. A few rows times a transposed matrix (``x @ W.T`` of a linear layer decoding a few tokens) runs
as the transposed product ``(W @ x.T).T``, 1.3-2.4x faster from 4 to 32 rows.

>>> import numpy as np
>>> a, b = np.arange(3.0).reshape(3, 1), np.arange(4.0).reshape(1, 4)
>>> bool((matmul(np, a, b) == np.matmul(a, b)).all())
True
"""
from __future__ import annotations

import numpy as np

from .threaded_matmul import THREADED_MIN, threaded_matmul

__all__ = ["matmul"]


def matmul(xp, a, b, out=None):
    """``xp.matmul(a, b, out=out)``; NumPy products over one term as a broadcast multiply, and a few rows times a
    transposed matrix as the transposed product (see the module notes)."""
    if xp is np:
        sa, sb, dt = a.shape, b.shape, a.dtype  # read once: each ``.shape`` builds a tuple, on every layer call
        if len(sa) >= 2 and len(sb) >= 2 and dt == b.dtype and dt.kind in "fc":
            if sa[-1] == 1 and sb[-2] == 1:
                return np.multiply(a, b, out=out)
            if out is None and dt.char == "f" and (len(sa) > 2 or len(sb) > 2 or sa[0] * sa[1] * sb[1] >= THREADED_MIN):
                # float32 products the generated tiles run faster than BLAS, or split over the threads where BLAS
                # would not (a batch of small matrices) or would badly (a busy second core): see `threaded_matmul`.
                c = threaded_matmul(a, b)
                if c is not None:
                    return c
            if out is None and len(sa) == 2 and len(sb) == 2:
                work = sa[0] * sa[1] * sb[1]
                if (_FEW_ROWS[0] <= sa[0] <= _FEW_ROWS[1] and work >= _TRANSPOSED_MIN_WORK
                        and a.flags.c_contiguous and b.flags.f_contiguous and not b.flags.c_contiguous):
                    # x @ W.T with a few rows of x (a linear layer decoding a few tokens): OpenBLAS is 1.3-2.4x
                    # slower there than at (W @ x.T).T, even counting the copy back to rows (8 x 768 by 768 x 2304:
                    # 1.18 ms against 0.64). The same products, so the same values up to the order of the sums.
                    return np.ascontiguousarray(np.matmul(b.T, a.T).T)
                if work < _TRANSPOSED_MIN_WORK and dt.char in "fdFD":
                    # The same BLAS product without the gufunc machinery: 0.6 us less a call (8 x 32 by 32 x 16:
                    # 1.3 us against 1.9), the bulk of a small linear layer's time. Larger products keep matmul,
                    # which handles a transposed left operand better (768 x 8 by 8 x 768: 255 us against 329).
                    return np.dot(a, b)
    return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)


_FEW_ROWS = (4, 32)  # measured: below 4 rows both forms take OpenBLAS's small-matrix path; above 32 they tie
# Below this many multiply-adds a product is small: the direct product beats the transposed one (8 x 32 by 32 x 16:
# 2.3 us against 2.9, 8 x 128 by 128 x 128: 6.9 against 8.2; 8 x 256 by 256 x 256: 72 against 37: the copy back to
# rows costs more than the product saves), and np.dot's lower call cost is worth having.
_TRANSPOSED_MIN_WORK = 1 << 18
