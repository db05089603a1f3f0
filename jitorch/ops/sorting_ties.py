"""Which index PyTorch's CPU kernels report among equal values: their selection algorithms replayed on one slice.

Where a slice holds ties, ``kthvalue``, ``topk`` and ``mode`` return whichever tied element their algorithm leaves in
place, and users see those indices. ATen's ``kthvalue`` runs its own median-of-three quickselect; ``topk`` runs
libstdc++'s ``std::partial_sort`` (``k * 64 <= n``) or ``std::nth_element`` followed by ``std::sort`` of the first
``k - 1``; ``mode`` runs ``std::sort`` on (value, index) pairs compared by value and keeps the last pair of the longest
run. The functions below replay those algorithms step by step on Python lists, so they are slow: the kernels call them
only for the slices whose answer a tie makes ambiguous, and compute every other slice vectorized.

>>> replay_kthvalue([2.0, 1.0, 1.0, 0.0, 1.0], 3)  # the last of the three 1.0s (a stable sort gives index 2)
4
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["replay_kthvalue", "replay_topk", "replay_mode", "replay_tied", "nan_greater", "nan_less",
           "all_nan_median", "REPLAY_MAX"]

# The replay runs in Python (some microseconds per comparison): longer slices keep the vectorized answer, whose ties
# resolve to the first occurrence in the input.
REPLAY_MAX = 1024


def replay_tied(xp, a, dim, fast, tied, replay):
    """``fast`` (indices along ``dim``) with the slices flagged in ``tied`` (``a``'s shape less ``dim``) recomputed by
    ``replay(values) -> indices``: PyTorch's CPU algorithm, whose choice among equal values users see. CUDA arrays
    keep the vectorized answer (torch's CUDA kernels choose differently from its CPU ones anyway), as do slices longer
    than ``REPLAY_MAX``."""
    if xp is not np or a.shape[dim] > REPLAY_MAX or not tied.any():
        return fast
    values = np.moveaxis(a, dim, -1)
    if values.dtype.kind == "f" or values.dtype.name == "bfloat16":
        values = values.astype(np.float64)
    out = np.moveaxis(fast, dim, -1).copy()
    for pos in np.argwhere(tied):  # (argwhere, unlike nonzero, takes the 0-d flag of a 1-d input)
        pos = tuple(pos)
        out[pos] = replay(values[pos].tolist())
    return np.moveaxis(out, -1, dim).copy()  # torch's strides: C order, size-1 dims included


def _isnan(v):
    return v != v


def nan_greater(x, y):
    """ATen's ``gt_or_nan``: NaN sorts above every number."""
    return (_isnan(x) and not _isnan(y)) or x > y


def nan_less(x, y):
    """topk's smallest-first order: NaN sorts below nothing (last)."""
    return (not _isnan(x) and _isnan(y)) or x < y


# -- ATen's quickselect (aten/src/ATen/native/SortingUtils.h: quick_select_template) -------------------------------
def replay_kthvalue(values, k):
    """Index (into ``values``) that ``torch.kthvalue`` reports for the ``k``-th smallest (1-based) on CPU."""
    vals, idx = list(values), list(range(len(values)))

    def swap(i, j):
        vals[i], vals[j] = vals[j], vals[i]
        idx[i], idx[j] = idx[j], idx[i]

    gt, kk = nan_greater, k - 1
    lo, hi = 0, len(vals) - 1
    while True:
        if hi <= lo:
            break
        if hi == lo + 1:
            if gt(vals[lo], vals[hi]):
                swap(lo, hi)
            break
        mid = lo + (hi - lo) // 2
        swap(mid, lo + 1)
        if gt(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if gt(vals[lo], vals[hi]):
            swap(lo, hi)
        if gt(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j, pivot = lo + 1, hi, vals[lo]
        while True:
            i += 1
            while gt(pivot, vals[i]):
                i += 1
            j -= 1
            while gt(vals[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= kk:
            lo = i
        if j >= kk:
            hi = j - 1
    return idx[kk]


# -- libstdc++'s algorithms over a list of (value, index) pairs, compared by value ---------------------------------
class _Std:
    """``std::sort``, ``std::nth_element`` and ``std::partial_sort`` as libstdc++ implements them (introsort with a
    median-of-three pivot and an unguarded partition, a final insertion sort over 16-element runs, heap selection)."""

    THRESHOLD = 16

    def __init__(self, items, less):
        self.a = items
        self.less = less

    def comp(self, i, j):
        return self.less(self.a[i][0], self.a[j][0])

    def swap(self, i, j):
        a = self.a
        a[i], a[j] = a[j], a[i]

    # sort
    def sort(self, first, last):
        if last - first > 1:
            self._introsort(first, last, 2 * _lg(last - first))
            self._final_insertion_sort(first, last)

    def _introsort(self, first, last, depth):
        while last - first > self.THRESHOLD:
            if depth == 0:
                self.partial_sort(first, last, last)
                return
            depth -= 1
            cut = self._partition_pivot(first, last)
            self._introsort(cut, last, depth)
            last = cut

    def _partition_pivot(self, first, last):
        mid = first + (last - first) // 2
        self._median_to_first(first, first + 1, mid, last - 1)
        return self._unguarded_partition(first + 1, last, first)

    def _median_to_first(self, result, a, b, c):
        comp = self.comp
        if comp(a, b):
            pick = b if comp(b, c) else (c if comp(a, c) else a)
        else:
            pick = a if comp(a, c) else (c if comp(b, c) else b)
        self.swap(result, pick)

    def _unguarded_partition(self, first, last, pivot):
        comp = self.comp
        while True:
            while comp(first, pivot):
                first += 1
            last -= 1
            while comp(pivot, last):
                last -= 1
            if not first < last:
                return first
            self.swap(first, last)
            first += 1

    def _final_insertion_sort(self, first, last):
        if last - first > self.THRESHOLD:
            self._insertion_sort(first, first + self.THRESHOLD)
            for i in range(first + self.THRESHOLD, last):
                self._linear_insert(i)
        else:
            self._insertion_sort(first, last)

    def _insertion_sort(self, first, last):
        a = self.a
        for i in range(first + 1, last):
            if self.comp(i, first):
                a[first + 1:i + 1], a[first] = a[first:i], a[i]
            else:
                self._linear_insert(i)

    def _linear_insert(self, last):
        a, less = self.a, self.less
        val = a[last]
        nxt = last - 1
        while less(val[0], a[nxt][0]):
            a[last] = a[nxt]
            last, nxt = nxt, nxt - 1
        a[last] = val

    # nth_element
    def nth_element(self, first, nth, last):
        if first == last or nth == last:
            return
        depth = 2 * _lg(last - first)
        while last - first > 3:
            if depth == 0:
                self._heap_select(first, nth + 1, last)
                self.swap(first, nth)
                return
            depth -= 1
            cut = self._partition_pivot(first, last)
            if cut <= nth:
                first = cut
            else:
                last = cut
        self._insertion_sort(first, last)

    # partial_sort and the heap helpers
    def partial_sort(self, first, middle, last):
        self._heap_select(first, middle, last)
        while middle - first > 1:
            middle -= 1
            self._pop_heap(first, middle, middle)

    def _heap_select(self, first, middle, last):
        self._make_heap(first, middle)
        for i in range(middle, last):
            if self.comp(i, first):
                self._pop_heap(first, middle, i)

    def _make_heap(self, first, last):
        n = last - first
        if n < 2:
            return
        parent = (n - 2) // 2
        while True:
            self._adjust_heap(first, parent, n, self.a[first + parent])
            if parent == 0:
                return
            parent -= 1

    def _pop_heap(self, first, last, result):
        a = self.a
        value = a[result]
        a[result] = a[first]
        self._adjust_heap(first, 0, last - first, value)

    def _adjust_heap(self, first, hole, n, value):
        a, less = self.a, self.less
        top = child = hole
        while child < (n - 1) // 2:
            child = 2 * (child + 1)
            if less(a[first + child][0], a[first + child - 1][0]):
                child -= 1
            a[first + hole] = a[first + child]
            hole = child
        if n % 2 == 0 and child == (n - 2) // 2:
            child = 2 * (child + 1)
            a[first + hole] = a[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and less(a[first + parent][0], value[0]):
            a[first + hole] = a[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        a[first + hole] = value


def _lg(n):
    return n.bit_length() - 1


def replay_topk(values, k, largest, sorted=True):
    """Indices (into ``values``) that ``torch.topk`` reports on CPU, in its output order (ATen's topk_impl_loop)."""
    n = len(values)
    std = _Std([(v, i) for i, v in enumerate(values)], nan_greater if largest else nan_less)
    if k * 64 <= n:
        std.partial_sort(0, k, n)
    else:
        std.nth_element(0, k - 1, n)
        if sorted:
            std.sort(0, k - 1)
    return [i for _, i in std.a[:k]]


@functools.lru_cache(maxsize=256)
def all_nan_median(n):
    """Index that ``torch.nanmedian`` reports along a dim of ``n`` NaNs on CPU. ATen asks ``std::nth_element`` for
    position ``(n - #nan - 1) / 2``, which C++ truncates to 0, under a comparator that holds for no pair of NaNs; so
    every pivot step moves the middle element to the front and reverses the rest of the range (`_Std.nth_element` on
    equal values), then halves the range, until 3 elements are left for an insertion sort that moves nothing."""
    order = np.arange(n)
    last = n
    while last > 3:  # (the depth limit, 2 * lg(n) steps, is never reached: each step halves the range)
        mid = last // 2
        order[0], order[mid] = order[mid], order[0]
        order[1:last] = order[1:last][::-1].copy()
        last = (last + 1) // 2
    return int(order[0]) if n else 0


def replay_mode(values):
    """Index (into ``values``) that ``torch.mode`` reports on CPU: ``std::sort`` by value, then the last pair of the
    first longest run (NaNs are never equal, so each is a run of its own)."""
    std = _Std([(v, i) for i, v in enumerate(values)], lambda x, y: x < y)
    std.sort(0, len(values))
    pairs = std.a
    best, best_index, run = 0, 0, 0
    for i, (v, index) in enumerate(pairs):
        run += 1
        if i == len(pairs) - 1 or v != pairs[i + 1][0]:
            if run > best:
                best, best_index = run, index
            run = 0
    return best_index


