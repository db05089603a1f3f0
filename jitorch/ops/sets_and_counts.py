"""Set and counting rows (no gradient): ``unique``/``unique_consecutive`` along a dim, ``searchsorted`` (ATen's
binary search where the sorted sequence holds NaN), ``histc`` and ``bincount`` (split from `sorting.py`).

>>> import jitorch
>>> jitorch.bincount(jitorch.tensor([0, 2, 2]), jitorch.tensor([0.5, 1.0, 2.0]))
tensor([0.5000, 0.0000, 3.0000])
"""
from __future__ import annotations

import numpy as np

from ..runtime import scatter_add
from ..runtime.key_runs import run_lengths, run_starts
from .sorting import stable_argsort
from .sorting_ties import REPLAY_MAX, _Std
from .table import NOT_DIFFERENTIABLE, Opaque, defop

# -- set and counting ops (no gradient) ---------------------------------------------------------------------------
def _unique_kernel(xp, a, dim):
    if dim is None:
        flat = a.reshape(-1)
        order = stable_argsort(xp, flat, 0)
        ordered = flat[order]
        starts = run_starts(xp, ordered)
        run = xp.cumsum(starts) - 1
        inverse = xp.empty(flat.shape, dtype=np.int64)
        inverse[order] = run
        first = xp.nonzero(starts)[0]
        counts = run_lengths(xp, first, flat.size)
        return ordered[first], inverse.reshape(a.shape), counts.astype(np.int64)
    if xp is not np or not a.size or a.dtype.kind == "c":
        values, inverse, counts = xp.unique(a, return_inverse=True, return_counts=True, axis=dim)
        return values, inverse.reshape(-1).astype(np.int64), counts.astype(np.int64)
    return _unique_dim(a, dim)


def _unique_dim(a, dim):
    """ATen's CPU ``unique(dim=)``: the slices along ``dim`` ordered by ``std::sort`` under a lexicographic
    less-than, then runs of elementwise-equal neighbours kept as their first slice. Where slices hold NaN (which
    that less-than treats as equal to anything) or -0.0 (equal to 0.0, but which one is kept shows), the sort's own
    order decides the answer and is replayed (`_Std`; inputs of more than ``REPLAY_MAX`` slices keep the stable
    order, as the other replays); elsewhere a stable lexicographic sort gives the same answer."""
    moved = np.moveaxis(a, dim, 0)
    n = moved.shape[0]
    rows = moved.reshape(n, -1)
    keys = rows if rows.dtype.kind in "iubf" else rows.astype(np.float64)  # (bfloat16: exact in float64)
    if keys.dtype.kind == "f" and n <= REPLAY_MAX and (np.isnan(keys).any() or np.signbit(keys[keys == 0]).any()):
        std = _Std([(tuple(row), i) for i, row in enumerate(keys.tolist())], _rows_less)
        std.sort(0, n)
        order = np.array([i for _, i in std.a], dtype=np.int64)
    else:
        order = np.lexsort(keys.T[::-1]) if keys.shape[1] else np.arange(n)
    ordered = keys[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)  # (NaN != NaN: a slice with a NaN is a run of its own)
    first = np.nonzero(starts)[0]
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    counts = np.diff(np.append(first, n)).astype(np.int64)
    return np.moveaxis(moved[order[first]], 0, dim), inverse, counts


def _rows_less(x, y):
    """ATen's comparator of two slices: the first element that compares less or greater decides."""
    for u, v in zip(x, y):
        if u < v:
            return True
        if u > v:
            return False
    return False


def _unique_consecutive_kernel(xp, a, dim):
    """Along ``dim`` (a whole tensor's runs are `unique_counting`'s row)."""
    moved = xp.moveaxis(a, dim, 0)
    n = moved.shape[0]
    rows = moved.reshape(n, int(np.prod(moved.shape[1:])))  # -1 is ambiguous when n == 0
    starts = xp.ones((n,), dtype=bool)
    if n > 1:
        starts[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    first = xp.nonzero(starts)[0]
    inverse = (xp.cumsum(starts) - 1).astype(np.int64)
    counts = xp.diff(xp.concatenate([first, xp.asarray([n])])).astype(np.int64)
    return xp.moveaxis(moved[first], 0, dim), inverse, counts


UNIQUE = defop("unique", _unique_kernel, NOT_DIFFERENTIABLE, Opaque("data-dependent shape"), nout=3)
UNIQUE_CONSECUTIVE = defop("unique_consecutive", _unique_consecutive_kernel, NOT_DIFFERENTIABLE,
                           Opaque("data-dependent shape"), nout=3)


def _searchsorted_kernel(xp, seq, values, side, out_dtype):
    common = xp.result_type(seq.dtype, values.dtype)
    seq, values = seq.astype(common, copy=False), values.astype(common, copy=False)
    if seq.dtype.kind == "f" and seq.size and bool(xp.isnan(seq).any()):
        return _aten_binary_search(xp, seq, values, side == "right").astype(out_dtype)
    if seq.ndim == 1:
        return xp.searchsorted(seq, values, side=side).astype(out_dtype)
    out = xp.empty(values.shape, dtype=out_dtype)
    for row in np.ndindex(*seq.shape[:-1]):  # NumPy and CuPy search one sorted row at a time
        out[row] = xp.searchsorted(seq[row], values[row], side=side)
    return out


def _aten_binary_search(xp, seq, values, right):
    """ATen's lower/upper bound, all values at once: a NaN boundary fails both comparisons, so the search steps past
    it wherever it probes one (NumPy orders NaN last instead, and gives other positions)."""
    n = seq.shape[-1]
    rows = seq.reshape(-1, n)
    vals = values.reshape(rows.shape[0], -1)
    row = xp.arange(rows.shape[0])[:, None]
    start = xp.zeros(vals.shape, dtype=np.int64)
    end = xp.full(vals.shape, n, dtype=np.int64)
    while True:
        active = start < end
        if not bool(active.any()):
            return start.reshape(values.shape)
        mid = start + ((end - start) >> 1)
        probe = rows[row, xp.minimum(mid, n - 1)]
        step_past = ~(probe > vals) if right else ~(probe >= vals)
        start = xp.where(active & step_past, mid + 1, start)
        end = xp.where(active & ~step_past, mid, end)


def _histc_kernel(xp, a, bins, lo, hi):
    if lo == hi and a.size:
        lo, hi = a.min().item(), a.max().item()
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    flat = a.reshape(-1)
    inside = flat[(flat >= lo) & (flat <= hi)]
    # Bin arithmetic in the input's dtype, like PyTorch, so values on bin edges land in the same bin.
    pos = ((inside - a.dtype.type(lo)) * a.dtype.type(bins) / (a.dtype.type(hi) - a.dtype.type(lo))).astype(np.int64)
    pos = xp.minimum(pos, bins - 1)
    return xp.bincount(pos, minlength=bins).astype(a.dtype)


def _bincount_kernel(xp, a, weights, minlength):
    if weights is None or a.size == 0:  # ATen: an empty input gives int64 zeros, weighted or not
        return xp.bincount(a, minlength=minlength).astype(np.int64, copy=False)
    if weights.dtype == np.float32:
        # ATen's running sum is float32, in input order: a float64 sum rounded once differs in the last bit in most
        # bins. NumPy's add.at adds in order (and as fast as bincount); CuPy's atomics have no order, as CUDA's.
        out = xp.zeros(max(int(a.max()) + 1, minlength), dtype=np.float32)
        if xp is np:
            np.add.at(out, a, weights)
        else:
            scatter_add(xp, out, a, weights)
        return out
    # every other dtype (half ones, integers, float64) sums into double in input order: NumPy's weighted bincount
    return xp.bincount(a, weights=weights.astype(np.float64, copy=False), minlength=minlength)


SEARCHSORTED = defop("searchsorted", _searchsorted_kernel, NOT_DIFFERENTIABLE, Opaque("binary search"))
HISTC = defop("histc", _histc_kernel, NOT_DIFFERENTIABLE, Opaque("histogram"), promotion="keep")
def _bincount_backward(ctx, *grads):
    raise RuntimeError("derivative for aten::bincount is not implemented")


BINCOUNT = defop("bincount", _bincount_kernel, _bincount_backward, Opaque("histogram"))
