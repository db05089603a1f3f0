"""``linalg.lstsq``'s default CPU driver: LAPACK's ``?gelsy`` (QR with column pivoting) on each matrix, as ATen
calls it, giving the solution and the rank of every matrix of a NumPy batch in one QR each (the SVD drivers need
an SVD, several times slower).

>>> import numpy as np
>>> a = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]]); b = np.array([[1.0], [4.0], [5.0]])
>>> x, rank = gelsy(a, b, rcond=1e-7)
>>> x.ravel().tolist(), rank.tolist()
([1.0, 2.0], 2)
"""
from __future__ import annotations

import numpy as np

__all__ = ["gelsy", "gelsy_applies"]


def gelsy_applies(a, b):
    """Whether ``gelsy`` takes these arrays: NumPy float32/64 or complex64/128 matrices, none of them empty."""
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.dtype.name in
            ("float32", "float64", "complex64", "complex128") and a.ndim >= 2 and b.ndim >= 2 and
            0 not in a.shape[-2:] and b.shape[-1] != 0)


def gelsy(a, b, rcond):
    """``(x, rank)``: least-squares solutions ``x`` (``(..., n, k)``) of ``a x = b`` over the broadcast batch dims of
    ``a`` (``(..., m, n)``) and ``b`` (``(..., m, k)``), and the ranks (int64) over ``a``'s batch dims; ``rcond``
    as LAPACK's."""
    from scipy.linalg import lapack

    m, n = a.shape[-2:]
    k = b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    routine, lwork_query = lapack.get_lapack_funcs(("gelsy", "gelsy_lwork"), (a, b))
    work, info = lwork_query(m, n, k, rcond)
    lwork = max(int(np.real(work)), 1)
    a_all = np.broadcast_to(a, batch + (m, n)).reshape((-1, m, n))
    b_all = np.broadcast_to(b, batch + (m, k)).reshape((-1, m, k))
    rows = max(m, n)
    x = np.empty((a_all.shape[0], n, k), a.dtype)
    ranks = np.empty(a_all.shape[0], np.int64)
    pivots = np.ones(n, np.int32)
    for i in range(a_all.shape[0]):
        rhs = np.zeros((rows, k), a.dtype, order="F")
        rhs[:m] = b_all[i]
        # Nonzero: every column kept in place, as torch's gelsy behaves (its ranks of matrices with dependent
        # leading columns are the unpivoted factorization's: [1, 2, x] has rank 1 there, not 2).
        pivots[:] = 1
        _, sol, _, rank, info = routine(np.asfortranarray(a_all[i]), rhs, pivots, rcond, lwork,
                                        overwrite_a=1, overwrite_b=1)
        if info < 0:
            raise RuntimeError(f"linalg.lstsq: LAPACK gelsy rejected argument {-info} for a {m}x{n} matrix")
        x[i] = sol[:n]
        ranks[i] = rank
    # A rank depends on its matrix alone: over ``a``'s own batch dims, as torch's.
    ranks = ranks.reshape(batch)[(0,) * (len(batch) - (a.ndim - 2))]
    ranks = ranks[tuple(slice(None) if size > 1 else slice(0, 1) for size in a.shape[:-2])]
    return x.reshape(batch + (n, k)), np.array(ranks)  # a copy, 0-d for one matrix
