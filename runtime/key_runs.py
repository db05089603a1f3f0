"""Runs of equal neighbouring keys in a 1-D array (sorted positions, bag ids, a flat tensor's values): where each run
starts and how long it is, on any array module (NumPy or CuPy). The segment, unique and scatter-add code finds its
runs here.

>>> import numpy as np
>>> keys = np.array([3, 3, 5, 3, 3, 3])
>>> starts = run_starts(np, keys)
>>> starts.tolist()
[True, False, True, True, False, False]
>>> run_lengths(np, np.flatnonzero(starts), keys.size).tolist()
[2, 1, 3]
>>> run_starts(np, keys[:0]).tolist(), run_lengths(np, np.flatnonzero(starts[:0]), 0).tolist()
([], [])
"""
from __future__ import annotations

import numpy as np

__all__ = ["run_starts", "run_lengths"]


def run_starts(xp, keys):
    """A boolean mask over 1-D ``keys``: True where a run of equal keys starts (the first element, and every one that
    differs from the one before it); empty for empty ``keys``."""
    starts = xp.empty(keys.shape, dtype=bool)
    if keys.size:
        starts[0] = True
        xp.not_equal(keys[1:], keys[:-1], out=starts[1:])
    return starts


def run_lengths(xp, first, n):
    """int64 lengths of the runs that start at the ascending positions ``first`` of ``n`` elements (the last run
    ends at ``n``)."""
    bounds = xp.empty((first.size + 1,), dtype=np.int64)
    bounds[:-1] = first
    bounds[-1] = n
    return xp.diff(bounds)
