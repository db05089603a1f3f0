"""Which of several equal elements libstdc++'s ``std::sort`` (ATen's CPU sort when not stable) puts first.

``std::sort`` is an introsort: Hoare partitions around a median of three down to runs of 16, then one insertion sort
over everything (stable). The first of a class of equal elements is therefore the earliest-placed one of the leftmost
run holding any of them after the partitions. Every element left of a cut is at most every element right of it, so
only the side holding the class's leftmost member is followed: O(log n) partitions, each a few NumPy passes over
its range (a Hoare partition's swaps pair the k-th left stop with the k-th right stop until they cross), where
`sorting_ties._Std` replays the whole sort element by element in Python.

ATen's ``unique`` keeps the first element of each run of its sorted input: this names the zero (-0.0 or 0.0) it keeps.

>>> import numpy as np
>>> keys = np.array([0, 2, 0, 0, 1, 0, 1, 1, 2, 1, 0, 0, 2, 0, 2, 0, 0, 0, 0, 0])
>>> first_in_std_sort(keys, 0)  # (a stable sort puts index 0 first)
10
"""
from __future__ import annotations

import numpy as np

from .sorting_ties import _Std

__all__ = ["first_in_std_sort"]

_THRESHOLD = 16  # libstdc++'s _S_threshold


def first_in_std_sort(keys, key):
    """Index into ``keys`` (integers comparing as the sort's comparator: ranks) of the element equal to ``key`` that
    ``std::sort(keys)`` places first."""
    keys = np.array(keys)  # a copy, partitioned in place
    index = np.arange(keys.size)
    first, last = 0, keys.size
    depth = 2 * (keys.size.bit_length() - 1)
    while last - first > _THRESHOLD:
        if depth == 0:  # libstdc++'s heapsort fallback: simulated element by element (adversarial inputs only)
            _heap_sort(keys, index, first, last)
            break
        depth -= 1
        cut = _partition_pivot(keys, index, first, last)
        if (keys[first:cut] == key).any():
            last = cut
        else:
            first = cut
    run = np.flatnonzero(keys[first:last] == key)
    return int(index[first + run[0]])  # the final insertion sort is stable


def _swap(keys, index, i, j):
    keys[[i, j]] = keys[[j, i]]
    index[[i, j]] = index[[j, i]]


def _partition_pivot(keys, index, first, last):
    """``__unguarded_partition_pivot``: the median of (first + 1, mid, last - 1) moved to ``first``, then a Hoare
    partition of ``[first + 1, last)`` around it; returns the cut."""
    a, b, c = first + 1, first + (last - first) // 2, last - 1
    ka, kb, kc = keys[a], keys[b], keys[c]
    if ka < kb:
        median = b if kb < kc else (c if ka < kc else a)
    else:
        median = a if ka < kc else (c if kb < kc else b)
    _swap(keys, index, first, median)
    pivot = keys[first]
    span = keys[first + 1:last]
    left = np.flatnonzero(~(span < pivot)) + first + 1  # where the left scan stops, in order
    right = (np.flatnonzero(~(pivot < span)) + first + 1)[::-1]  # the right scan's stops
    n = min(left.size, right.size)
    crossed = np.flatnonzero(left[:n] >= right[:n])
    k = int(crossed[0]) if crossed.size else n
    i, j = left[:k], right[:k]
    keys[i], keys[j] = keys[j], keys[i].copy()
    index[i], index[j] = index[j], index[i].copy()
    # the k-th left stop: its own, or the previous right stop (now holding a value not below the pivot)
    stop = int(left[k]) if k < left.size else int(right[k - 1])
    return min(stop, int(right[k - 1])) if k else stop


def _heap_sort(keys, index, first, last):
    """libstdc++'s ``__partial_sort(first, last, last)`` on the range, through `sorting_ties._Std`'s replay."""
    std = _Std(list(zip(keys[first:last].tolist(), index[first:last].tolist())), lambda x, y: x < y)
    std.partial_sort(0, last - first, last - first)
    keys[first:last] = [k for k, _ in std.a]
    index[first:last] = [i for _, i in std.a]
