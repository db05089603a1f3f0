"""``segment_argmax``: where each column of each run of rows peaks, for ``embedding_bag(mode="max")``.

A bag's rows are consecutive (its bag ids never decrease), so a bag's maxima are one ``maximum.reduceat`` over the
runs, and the row each maximum came from is the first row that equals it. ATen's loop takes a bag's first row, then
replaces only on a strictly greater value: the first maximum wins, a NaN first row stays, later NaNs are skipped.
``embedding_bag`` gathers the rows at these positions, so its gradient flows back to exactly the rows torch's
``max_indices`` name, instead of a ``scatter_reduce`` whose ``ufunc.at`` runs element by element. NumPy float arrays
take the generated loop of ``codegen/llvm_segment_max.py`` (4096 bags of 16384 64-wide rows, forward and backward:
33 ms through ``scatter_reduce``, 3.3 ms; torch 6.1); off NumPy, ``reduceat`` finds the maxima.

>>> import numpy as np
>>> from jitorch.ops.segment_max import segment_argmax
>>> segment_argmax(np, np.array([[1.0], [3.0], [2.0]]), np.array([0, 0, 2]), 3).ravel().tolist()
[1, -1, 2]
"""
from __future__ import annotations

import numpy as np

from ..runtime.key_runs import run_lengths, run_starts
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["SEGMENT_ARGMAX", "segment_argmax"]


def segment_argmax(xp, rows, bag_ids, bags):
    """(bags, width) int64: the row of ``rows`` (n, width) holding each bag's first maximum per column; -1 for a
    bag with no rows. ``bag_ids`` (n,) is the nondecreasing bag of each row."""
    n, width = rows.shape
    positions = xp.full((bags, width), -1, dtype=np.int64)
    if n == 0 or width == 0:
        return positions
    if xp is np and rows.dtype in (np.float32, np.float64) and 0 <= bag_ids[0] and bag_ids[-1] < bags:
        best = np.empty((bags, width), dtype=rows.dtype)
        _native(rows.dtype)(np.ascontiguousarray(rows), np.ascontiguousarray(bag_ids, dtype=np.int64), best,
                            positions)
        return positions
    first = xp.flatnonzero(run_starts(xp, bag_ids))
    lengths = run_lengths(xp, first, n)
    positions[bag_ids[first]] = _scan_by_reduceat(xp, rows, first, lengths)
    return positions


_kernels = {}


def _native(dtype):
    """The compiled loop of ``codegen/llvm_segment_max.py`` for ``dtype``, built once."""
    key = "f32" if dtype == np.float32 else "f64"
    if key not in _kernels:
        from ..codegen.llvm_objcache import default_cache
        from ..codegen.llvm_segment_max import SegmentMax

        _kernels[key] = SegmentMax(key, cache=default_cache())
    return _kernels[key]


def _run_maxima(xp, values, first, lengths):
    """Each run's maximum down the rows of ``values``: ``maximum.reduceat`` on NumPy; CuPy has ``reduceat`` for add
    alone, so there a running maximum that restarts at each run's first row, in log2(n) doubling steps."""
    if xp is np:
        return np.maximum.reduceat(values, first, axis=0)
    n = values.shape[0]
    run = xp.repeat(xp.arange(first.shape[0]), lengths)
    running, shift = values.copy(), 1
    while shift < n:
        same = (run[shift:] == run[:-shift])[:, None]
        step = running.copy()
        step[shift:] = xp.where(same, xp.maximum(running[shift:], running[:-shift]), running[shift:])
        running, shift = step, shift * 2
    return running[first + lengths - 1]


def _scan_by_reduceat(xp, rows, first, lengths):
    """Off the native path: each run's maximum (`_run_maxima`), then the first row equal to it."""
    n = rows.shape[0]
    best = _run_maxima(xp, rows, first, lengths)
    nan_first = None
    if bool(xp.isnan(best).any()):  # NaN propagated: skip NaNs as ATen does, except a run's first row
        nan_first = xp.isnan(rows[first])
        rows = xp.where(xp.isnan(rows), -np.inf, rows)
        best = _run_maxima(xp, rows, first, lengths)
    hit = rows == xp.repeat(best, lengths, axis=0)
    # The first hit of a run: the largest (n - row) among the hits (misses count as 0).
    countdown = xp.arange(n, 0, -1, dtype=np.int64)[:, None]
    found = n - _run_maxima(xp, xp.where(hit, countdown, 0), first, lengths)
    return found if nan_first is None else xp.where(nan_first, first[:, None], found)


SEGMENT_ARGMAX = defop("segment_argmax", segment_argmax, NOT_DIFFERENTIABLE, Opaque("bag maxima"))
