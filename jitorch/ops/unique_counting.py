"""``unique`` and ``unique_consecutive`` of whole (flattened) tensors, without a sort where none is needed.

ATen sorts every input of ``unique``; for integer and bool tensors whose values span a range not much wider than
their count, one count per value (``bincount`` of the values less the minimum) gives the same sorted values, counts
and inverse indices in a few linear passes (1e6 int64 in [0, 1000): 70 ms by sorting, 2 ms by counting). Other
inputs (floats, wide ranges) take the sorting row's kernel. ``unique_consecutive`` compares neighbours of the flat
array directly instead of as one-column rows.

>>> import jitorch
>>> jitorch.unique(jitorch.tensor([3, 1, 3, 7]), return_inverse=True, return_counts=True)
(tensor([1, 3, 7]), tensor([1, 0, 1, 2]), tensor([1, 2, 1]))
"""
from __future__ import annotations

import numpy as np

from ..runtime.key_runs import run_lengths, run_starts
from .sets_and_counts import _unique_kernel
from .sorting_first_tie import first_in_std_sort
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["UNIQUE_FLAT", "UNIQUE_CONSECUTIVE_FLAT"]

# Counting allocates one slot per value in [min, max]: worth it while that is at most this many slots per element
# (plus a floor so small inputs with a few spread-out values still count).
_SLOTS_PER_ELEMENT = 4
_MIN_SLOTS = 1 << 16
# unique_consecutive writes its inverse run by run (``repeat``) when runs average more than this many elements.
_LONG_RUNS = 8


def _counting_range(xp, flat):
    """(minimum, number of slots) when counting suits ``flat``, else None."""
    if flat.dtype.kind not in "iub" or flat.size == 0 or flat.dtype == np.uint64:  # uint64 may not fit an offset
        return None
    if flat.dtype.kind == "b":
        return 0, 2
    low, high = int(flat.min()), int(flat.max())
    slots = high - low + 1
    return (low, slots) if slots <= max(_SLOTS_PER_ELEMENT * flat.size, _MIN_SLOTS) else None


def _unique_flat_kernel(xp, a, with_inverse):
    flat = a.reshape(-1)
    span = _counting_range(xp, flat)
    if span is None:
        values, inverse, counts = _unique_kernel(xp, a, None)
        return _aten_zero(xp, flat, values, inverse), inverse, counts
    low, slots = span
    # Offsets from the minimum in the platform's index type (bincount's and take's own), so no copy when it is int64
    # with a zero minimum.
    offset = flat.astype(np.intp, copy=False)
    if low:
        offset = offset - low
    tally = xp.bincount(offset, minlength=slots)
    present = tally != 0
    slot = xp.flatnonzero(present)
    values = (slot + low).astype(a.dtype) if flat.dtype.kind != "b" else slot.astype(bool)
    counts = tally[slot].astype(np.int64, copy=False)
    if not with_inverse:  # an unused placeholder: the caller asked for no inverse
        return values, xp.empty((0,), dtype=np.int64), counts
    rank = xp.cumsum(present) - 1  # each slot's position among the present values
    inverse = rank.take(offset).reshape(a.shape).astype(np.int64, copy=False)
    return values, inverse, counts


def _aten_zero(xp, flat, values, inverse):
    """``values`` (sorted, unique) with ATen's zero where ``flat`` holds both -0.0 and 0.0: the first of its
    ``std::sort``, which is not stable beyond 16 elements (a stable sort keeps the first zero of the input)."""
    if xp is not np or flat.size <= 16 or flat.dtype.kind not in "fV":
        return values
    slot = int(np.searchsorted(values, 0))  # (NaNs sort last)
    if slot == values.size or values[slot] != 0:
        return values
    # -0.0 is the sign bit alone: one integer comparison a element (no gather of the zeros)
    bits = flat.view(np.dtype(f"u{flat.itemsize}"))
    negative = np.count_nonzero(bits == bits.dtype.type(1 << (8 * flat.itemsize - 1)))
    if negative == 0 or negative == np.count_nonzero(flat == 0):
        return values
    # each element's rank among the values: the comparator's order, NaNs all equal (and last)
    ranks = np.minimum(inverse.reshape(-1), np.count_nonzero(values == values))
    values[slot] = flat[first_in_std_sort(ranks, slot)]
    return values


def _unique_consecutive_flat_kernel(xp, a, with_inverse):
    flat = a.reshape(-1)
    n = flat.size
    starts = run_starts(xp, flat)
    first = xp.flatnonzero(starts)
    counts = run_lengths(xp, first, n)
    if not with_inverse:
        return flat[first], xp.empty((0,), dtype=np.int64), counts
    if first.size * _LONG_RUNS < n:  # long runs: each run's index written out is cheaper than a running count
        inverse = xp.repeat(xp.arange(first.size, dtype=np.int64), counts)
    else:
        inverse = xp.cumsum(starts, dtype=np.int64)
        inverse -= 1
    return flat[first], inverse.reshape(a.shape), counts


UNIQUE_FLAT = defop("unique_flat", _unique_flat_kernel, NOT_DIFFERENTIABLE, Opaque("data-dependent shape"), nout=3)
UNIQUE_CONSECUTIVE_FLAT = defop("unique_consecutive_flat", _unique_consecutive_flat_kernel, NOT_DIFFERENTIABLE,
                                Opaque("data-dependent shape"), nout=3)
