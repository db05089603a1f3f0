"""Sorting-family primitives: index producers (no gradient) and the gather/scatter pair that carries gradients.

Every value-selecting op (sort, topk, kthvalue, median, mode, cummax, ...) is a composite: a row computes the
indices, ``take_along`` gathers the values, and the gradient flows back through ``put_along_add`` (a scatter-add,
since cummax/cummin repeat indices). The two rows are each other's backward, so double backward works; they live in
``sorting_gather.py``, re-exported here.

>>> import jitorch
>>> x = jitorch.tensor([3.0, 1.0, 2.0], requires_grad=True)
>>> values, indices = x.sort()
>>> values.backward(jitorch.tensor([10.0, 20.0, 30.0]))
>>> x.grad
tensor([30., 10., 20.])
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..runtime import accumulate
from .native_topk import topk_head
from .sort_keys import keyed, keyed_argsort, keyed_head
from .sorting_ties import REPLAY_MAX, _Std, all_nan_median, replay_kthvalue, replay_mode, replay_topk
from .sorting_ties import replay_tied as _replay_tied
from .sorting_gather import (  # noqa: F401 - split for size; re-exported here
    PUT_ALONG_ADD, TAKE_ALONG, flat_positions_checked, take_along, take_checked,
)
from .._memory_format import row_major
from .table import NOT_DIFFERENTIABLE, Opaque, defop

_HALF = {"float16", "bfloat16"}
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


# -- helpers shared by the kernels ---------------------------------------------------------------------------------
def _flipped(a, axis):
    """``a`` reversed along ``axis`` as a view (``xp.flip`` normalizes its axis in Python: 1.5 us)."""
    return a[(slice(None),) * (axis % a.ndim) + (slice(None, None, -1),)]


def stable_argsort(xp, a, axis, descending=False):
    """Stable argsort along ``axis``; NaN sorts as the largest value (last ascending, first descending)."""
    if keyed(a, axis):
        return keyed_argsort(a, axis, descending)
    if not descending:
        return _ascending(xp, a, axis)
    # Sorting the reversed array and reversing back keeps equal elements in their original order.
    n = a.shape[axis]
    return (n - 1) - _flipped(_ascending(xp, _flipped(a, axis), axis), axis)


def _ascending(xp, a, axis):
    # CuPy's argsort is always stable and accepts kind="stable" (and nothing else): one spelling for both. (The
    # method skips NumPy's Python wrapper of the function.)
    if type(a) is np.ndarray:
        return a.argsort(axis=axis, kind="stable")
    return xp.argsort(a, axis=axis, kind="stable")


def _sorted_prefix(xp, a, dim, descending, count):
    """``take(stable_argsort(a, dim, descending), arange(count), dim)``, C-contiguous; a descending one reversed
    and offset after the cut (a small top-k spent as long on the whole reversed order as on the sort)."""
    lead = (slice(None),) * dim
    if descending and not keyed(a, dim):
        head = _flipped(_ascending(xp, _flipped(a, dim), dim), dim)[lead + (slice(0, count),)]
        return (a.shape[dim] - 1) - head
    return stable_argsort(xp, a, dim, descending)[lead + (slice(0, count),)].copy()


def _isnan(xp, a):
    return xp.isnan(a) if _has_nan(a.dtype) else xp.zeros(a.shape, dtype=bool)


def _has_nan(dtype):
    return dtype.kind in "fc" or dtype == _BFLOAT16  # (not ``dtype.name``: 1-2 us in NumPy 2)


def scan(xp, ufunc_name, a, axis):
    """Inclusive scan of a commutative, associative binary ufunc along ``axis``.

    NumPy has ``ufunc.accumulate`` for every ufunc; where the array module lacks it (CuPy, for all but add and
    multiply) a Hillis-Steele scan (log2(n) vectorized steps) keeps it on the device.
    """
    out = accumulate(xp, ufunc_name, a, axis)
    return out if out is not None else doubling_scan(xp, ufunc_name, a, axis)


def doubling_scan(xp, ufunc_name, a, axis):
    """``scan`` with elementwise calls only (Hillis-Steele): what CuPy runs."""
    fn = getattr(xp, ufunc_name)
    out = xp.moveaxis(a, axis, -1).copy()
    shift, n = 1, out.shape[-1]
    while shift < n:
        step = out.copy()
        step[..., shift:] = fn(out[..., shift:], out[..., :-shift])
        out, shift = step, shift * 2
    return xp.moveaxis(out, -1, axis)


# -- index producers (not differentiable: indices have no gradient) ------------------------------------------------
def _argsort_kernel(xp, a, dim, descending, stable=True):
    # Always stable, which torch's contract for stable=False allows: replaying ATen's std::sort to order ties as it
    # does ran in Python, 75x slower for rows with ties (16x1000 int64: 0.42 -> 32 ms).
    return stable_argsort(xp, a, dim, descending)


def _tied(xp, a, order, dim):
    """Per slice along ``dim``: whether ``a``'s values taken in ``order`` hold two equal neighbours (NaNs equal)."""
    v = take_along(xp, a, order, dim)
    lead = (slice(None),) * dim
    later, earlier = lead + (slice(1, None),), lead + (slice(None, -1),)
    equal = v[later] == v[earlier]
    if _has_nan(v.dtype):
        nan = xp.isnan(v)
        if nan.any():  # (rarely: two NaN neighbours are a tie too)
            equal |= nan[later] & nan[earlier]
    return equal.any(dim)


def _nan_equal(xp, a, b):
    if not _has_nan(a.dtype):  # (no NaNs to pair)
        return a == b
    return (a == b) | (xp.isnan(a) & xp.isnan(b))


_PARTITION_MIN = 2048  # shorter slices sort whole faster than the partition's dozen NumPy calls


def _sorted_head(a, count, dim, largest):
    """The first ``count`` entries of ``stable_argsort(a, dim, largest)`` from a partition (O(n), not a sort of
    every element: top-10 of 10^6 was 45x torch's time), or None when the value at the cut is tied with one left
    outside it (the caller sorts everything). NumPy real arrays only."""
    rows = np.moveaxis(a, dim, -1)
    n = rows.shape[-1]
    cut = n - count if largest else count - 1  # NaN partitions as the largest value, as stable_argsort sorts it
    part = np.argpartition(rows, cut, axis=-1)
    chosen = part[..., cut:] if largest else part[..., :count]
    edge = np.take_along_axis(rows, part[..., cut:cut + 1], axis=-1)
    if (_nan_equal(np, rows, edge).sum(axis=-1) != _nan_equal(np, np.take_along_axis(rows, chosen, axis=-1),
                                                              edge).sum(axis=-1)).any():
        return None
    chosen = np.sort(chosen, axis=-1)  # in input order: the stable sort below then breaks ties as the full one would
    order = stable_argsort(np, np.take_along_axis(rows, chosen, axis=-1), -1, descending=largest)
    return np.moveaxis(np.take_along_axis(chosen, order, axis=-1), -1, dim)


def _topk_kernel(xp, a, k, dim, largest, sorted=True):
    n = a.shape[dim]
    if not sorted and k * 64 > n and _replays_unsorted(xp, a, dim):
        # ATen leaves ``std::nth_element``'s order among the first k (it sorts them only for sorted=True, and
        # uses a sorting partial_sort when k * 64 <= n); routers index experts with that order.
        rows = np.ones(a.shape[:dim] + a.shape[dim + 1:], dtype=bool)
        fast = xp.take(stable_argsort(xp, a, dim, descending=largest), xp.arange(k), axis=dim)
        return _replay_tied(xp, a, dim, fast, rows, lambda v: replay_topk(v, k, largest, sorted=False))
    head_order = None
    if 0 < k and 4 * (k + 1) <= n and keyed(a, dim) and a.size >= _PARTITION_MIN:
        head_order = keyed_head(a, k + 1, dim, largest)
    elif xp is np and a.dtype.kind in "fiub" and 0 < k and 4 * (k + 1) <= n and n >= _PARTITION_MIN:
        head_order = _sorted_head(a, k + 1, dim, largest)
    native = False
    if head_order is None and dim == a.ndim - 1:
        head = topk_head(a, min(k + 1, n), largest)  # (float32 rows, a small k: one native pass)
        if head is not None:
            (head_order, tied), native = head, True
    if head_order is None:
        head_order = _sorted_prefix(xp, a, dim, largest, min(k + 1, n))
    fast = head_order[(slice(None),) * dim + (slice(0, k),)].copy()  # (C-contiguous, as the index rows' outputs)
    if xp is not np or n > REPLAY_MAX or native and tied is None:  # what _replay_tied keeps: no ties to look for
        return fast
    # The order among the first k, and which tied element makes the cut, are the algorithm's: replayed where the
    # first k + 1 sorted values hold two equal neighbours.
    if not native:
        tied = _tied(xp, a, head_order, dim)
    return _replay_tied(xp, a, dim, fast, tied, lambda v: replay_topk(v, k, largest))


# Replaying every row of an unsorted top-k costs some tens of microseconds per row: larger inputs keep the sorted
# answer (the same elements, in descending order).
UNSORTED_REPLAY_MAX = 1 << 16


def _replays_unsorted(xp, a, dim):
    # (an exact ndarray: meta arrays have no values to replay)
    return type(a) is np.ndarray and 0 < a.shape[dim] <= REPLAY_MAX and a.size <= UNSORTED_REPLAY_MAX


def _kth_kernel(xp, a, k, dim):
    if xp is np and type(a) is np.ndarray and a.dtype.kind in "fiub" and a.shape[dim] > 64:
        fast = _kth_in_stable_order(a, k - 1, dim)  # O(n): 10^6 float32 took 4x torch's time as a full sort
    else:
        fast = xp.take(stable_argsort(xp, a, dim), xp.asarray([k - 1]), axis=dim)
    tied = _nan_equal(xp, a, xp.take_along_axis(a, fast, axis=dim)).sum(axis=dim) > 1
    return _replay_tied(xp, a, dim, fast, tied, lambda v: [replay_kthvalue(v, k)])


def _kth_in_stable_order(a, k, dim):
    """``take(stable_argsort(a, dim), [k], dim)`` from a partition (NumPy): the k-th value, then which of its equal
    elements a stable sort puts at k (the one after ``k - #smaller`` equal ones, in input order)."""
    rows = np.moveaxis(a, dim, -1)
    value = np.partition(rows, k, axis=-1)[..., k:k + 1]
    nan = _isnan(np, rows)
    smaller = ((rows < value) | (~nan & _isnan(np, value))).sum(axis=-1, keepdims=True)
    seen = np.cumsum(_nan_equal(np, rows, value), axis=-1)
    return np.moveaxis(np.argmax(seen > k - smaller, axis=-1)[..., None], -1, dim)


def _median_kernel(xp, a, dim, ignore_nan):
    """Index of the lower median along ``dim`` (kept as a size-1 dim)."""
    nan = _isnan(xp, a)
    n = a.shape[dim]
    if xp is np and a.dtype.kind in "fiub" and n > 64 and not (ignore_nan and nan.any()):
        # O(n): the median of 10^6 elements took 15x torch's time as a full sort
        picked = _kth_in_stable_order(a, (n - 1) // 2, dim)
        first_nan = np.argmax(nan, axis=dim, keepdims=True)
        return np.where(nan.any(axis=dim, keepdims=True), first_nan, picked)
    order = stable_argsort(xp, a, dim)
    if ignore_nan:
        valid = n - nan.sum(axis=dim, keepdims=True)
        picked = xp.take_along_axis(order, ((valid - 1) // 2).clip(0).astype(order.dtype), axis=dim)
        # An all-NaN slice reports the NaN that ATen's nth_element leaves first (`all_nan_median`).
        return xp.where(valid == 0, all_nan_median(n), picked)
    picked = xp.take(order, xp.asarray([(n - 1) // 2]), axis=dim)
    # A slice with a NaN has a NaN median; PyTorch points at the first NaN.
    first_nan = xp.argmax(nan, axis=dim, keepdims=True)
    return xp.where(nan.any(axis=dim, keepdims=True), first_nan, picked)


def _mode_kernel(xp, a, dim):
    """Index of the most frequent value along ``dim`` (the smallest such value; its last occurrence)."""
    moved = xp.moveaxis(a, dim, -1)
    lead, n = moved.shape[:-1], moved.shape[-1]
    rows = moved.reshape(-1, n)
    order = stable_argsort(xp, rows, 1)
    ordered = xp.take_along_axis(rows, order, axis=1)
    starts = xp.ones(ordered.shape, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    flat_starts = xp.nonzero(starts.reshape(-1))[0]
    run_lengths = xp.diff(xp.concatenate([flat_starts, xp.asarray([rows.size])]))
    counts = xp.zeros(rows.shape, dtype=np.int64)
    counts.reshape(-1)[flat_starts] = run_lengths
    best_start = xp.argmax(counts, axis=1)  # first maximum: the smallest value among equally frequent ones
    best_len = xp.take_along_axis(counts, best_start[:, None], axis=1)
    # The sort is stable, so a run's last element is the value's last occurrence in the input.
    idx = xp.take_along_axis(order, best_start[:, None] + best_len - 1, axis=1)
    # torch's std::sort is a stable insertion sort up to 16 elements only, and NaNs (unordered) split runs where
    # they stay: those slices are replayed.
    tied = (best_len[:, 0] > 1) & (n > _Std.THRESHOLD) | _isnan(xp, rows).any(axis=1)
    idx = _replay_tied(xp, rows, 1, idx, tied, lambda v: [replay_mode(v)])
    return xp.moveaxis(idx.reshape(lead + (1,)), -1, dim)


def _cumextreme_kernel(xp, a, dim, largest):
    """Index of the running max (min) along ``dim``; ties and NaNs move the index forward, as in PyTorch. Row-major
    whatever the input's layout, as ATen's cummax/cummin results (the values are gathered in this layout)."""
    a = row_major(a)
    values = scan(xp, "maximum" if largest else "minimum", a, dim)
    nan = _isnan(xp, a)
    positions = xp.arange(a.shape[dim]).reshape((-1,) + (1,) * (a.ndim - dim - 1))
    # The index changes exactly where the element equals the running extreme (or is a NaN).
    hits = xp.where((a == values) | nan, positions, 0)
    return scan(xp, "maximum", hits, dim)


ARGSORT = defop("argsort", _argsort_kernel, NOT_DIFFERENTIABLE, Opaque("sort"))
TOPK_INDICES = defop("topk_indices", _topk_kernel, NOT_DIFFERENTIABLE, Opaque("sort"))
KTHVALUE_INDICES = defop("kthvalue_indices", _kth_kernel, NOT_DIFFERENTIABLE, Opaque("sort"))
MEDIAN_INDICES = defop("median_indices", _median_kernel, NOT_DIFFERENTIABLE, Opaque("sort"))
MODE_INDICES = defop("mode_indices", _mode_kernel, NOT_DIFFERENTIABLE, Opaque("sort and run lengths"))
CUMEXTREME_INDICES = defop("cumextreme_indices", _cumextreme_kernel, NOT_DIFFERENTIABLE, Opaque("scan"),
                           row_major_out=True)


# -- scans with a gradient ----------------------------------------------------------------------------------------
def _logcumsumexp_kernel(xp, a, dim):
    # ATen's CPU loop carries float32's running value in double (acc_type): float32 steps drift by ~1e-4 over 4096.
    # One kernel for both devices, so CUDA accumulates in double too.
    work = a = row_major(a)  # ATen's result is row-major whatever the input's layout
    if a.dtype.name in _HALF:
        work = a.astype(np.float32)
    elif a.dtype == np.float32:
        work = a.astype(np.float64)
    return scan(xp, "logaddexp", work, dim).astype(a.dtype, copy=False)


def _logcumsumexp_backward(ctx, g):
    # PyTorch's formula: split the gradient by sign so every term stays in log space (no overflow).
    (x,) = ctx.inputs
    out, dim = ctx.out, ctx.attrs["dim"]
    from .. import _dtype

    lowest = float(np.finfo(np.float32 if x.dtype in (_dtype.float16, _dtype.bfloat16) else x._data.dtype).min)
    log_abs = g.abs().log()
    pos = log_abs.where(g > 0, lowest)
    neg = log_abs.where(g < 0, lowest)

    def reverse_lcse(t):
        return t.flip(dim).logcumsumexp(dim).flip(dim)

    return (reverse_lcse(pos - out) + x).exp() - (reverse_lcse(neg - out) + x).exp()


LOGCUMSUMEXP = defop("logcumsumexp", _logcumsumexp_kernel, _logcumsumexp_backward, Opaque("scan"),
                     promotion="float", saves="both", row_major_out=True)
