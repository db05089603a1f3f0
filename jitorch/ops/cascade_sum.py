"""Float sums over outer axes with an error that grows as log n, as ATen's cascade sum's.

NumPy sums pairwise only along the innermost loop of its iterator. A reduced axis outside a kept one (``x.sum(0)`` of
a (N, C) array, statistics over N*H*W of channels-last images, the outer axes of a strided view) is added row after
row into one accumulator: the relative error grows as n * eps, 1e-2 for a million float32 rows near 1000, where
PyTorch's cascade sum keeps 1e-7. Here the reduced axes that NumPy's inner loop covers are summed by NumPy; the rest,
brought to the front and flattened into K rows, are summed as a tree of row blocks:

* wide rows (and small inputs): blocks of ``BLOCK`` rows added by NumPy (a streaming pass, one accumulator row in
  cache), then the block sums the same way, level by level;
* narrow rows (NumPy's inner loop would be a few elements a row): halving, ``rows[:h] + rows[h:2h]`` over
  contiguous halves of ``CHUNK`` elements, which runs faster than NumPy's row loop as well.

>>> import numpy as np
>>> x = np.full((10**6, 2), 1000.1, np.float32)
>>> [round(float(s[0]) / 1e9, 6) for s in (np.add.reduce(x, 0), cascade_sum(x, (0,), False, np.dtype(np.float32)))]
[1.009989, 1.0001]
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

__all__ = ["cascade_sum", "sum_rows"]

BLOCK = 32  # rows NumPy adds into one accumulator: one level's error is BLOCK * eps (ATen's levels are 16 rows or more)
# Outer rows NumPy may add one after another. Up to a few hundred rows the naive order's error (about sqrt(n) eps
# for ordinary data) is torch's too, and the tree's extra calls would cost more than the sum (a (64, 32) bias
# gradient: 6 us against 12).
NAIVE_ROWS = 256
WIDE_BYTES = 1024  # rows this long keep NumPy's row loop fast; narrower ones are halved instead
SMALL = 1 << 14  # elements below which a halving's many calls cost more than NumPy's row loop
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
CHUNK = 1 << 18  # elements halved at a time: the temporary stays in cache and is a bounded fraction of the input


def _coalesces(a, outer, inner):
    return a.strides[outer] == a.strides[inner] * a.shape[inner]


def _plan(a, dims):
    """``(inner, outer_groups)``: the reduced axes NumPy's inner loop sums pairwise, and the other reduced axes as
    groups that flatten into one row index each (outermost first); None where NumPy's own order is accurate."""
    order = [d for d in range(a.ndim) if a.shape[d] > 1]
    if not a.flags.c_contiguous:
        order.sort(key=lambda d: -abs(a.strides[d]))
    inner = []
    for d in reversed(order):  # the innermost run of reduced axes that NumPy's iterator coalesces into one loop
        if d not in dims or (inner and not _coalesces(a, d, inner[-1])):
            break
        inner.append(d)
    groups, rows = [], 1
    for d in order:
        if d in dims and d not in inner:
            if groups and groups[-1][-1] == d - 1 and _coalesces(a, d - 1, d):
                groups[-1].append(d)
            else:
                groups.append([d])
            rows *= a.shape[d]
    return (tuple(inner), groups) if rows > NAIVE_ROWS else None


def cascade_sum(a, dims, keepdim, acc, first=None):
    """``a.sum(dims, dtype=acc, keepdims=keepdim)`` for a NumPy array and an inexact ``acc``, summed as a tree where
    NumPy's order would add many rows into one accumulator; None where it would not (the caller sums with NumPy).
    ``first``: the dtype of the first level's blocks of wide rows (float32 blocks under float64 levels cost about a
    float32 sum, the casts being on block sums only)."""
    out_shape = tuple(1 if d in dims else n for d, n in enumerate(a.shape) if keepdim or d not in dims)
    if a.flags.c_contiguous and dims == tuple(range(len(dims))):  # x.sum(0) and the like: the leading axes are rows
        k = math.prod(a.shape[:len(dims)])
        return _sum_rows(a.reshape((k,) + a.shape[len(dims):]), acc, first).reshape(out_shape) if k > NAIVE_ROWS \
            else None
    plan = _plan(a, dims)
    if plan is None:
        return None
    inner, groups = plan
    part = np.add.reduce(a, axis=inner, dtype=first or acc, keepdims=True) if inner else a
    first = None if inner else first
    # Last axes first: removing a group leaves the axis numbers of those before it, and the kept axes keep their
    # order, so the result reshapes to out_shape.
    for group in sorted(groups, reverse=True):
        if group[0]:
            part = part.transpose(group + [d for d in range(part.ndim) if d not in group])
        part = _sum_rows(part.reshape((-1,) + part.shape[len(group):]), acc, first)
        first = None
    return part.reshape(out_shape)


def sum_rows(xp, a):
    """``a.sum(axis=0)`` (bias gradients, per-channel sums over a batch), as a tree over a NumPy array's rows, halves
    accumulated in float32."""
    inexact = a.dtype.kind in "fc" or a.dtype in _HALF
    if type(a) is not np.ndarray or not inexact or not a.ndim or a.shape[0] <= NAIVE_ROWS:
        return a.sum(axis=0)
    acc = np.dtype(np.float32) if a.dtype in _HALF else a.dtype
    return _sum_rows(a, acc).astype(a.dtype, copy=False)


def _sum_rows(rows, acc, first=None):
    """The sum over axis 0 of ``rows`` (K rows of any layout), in ``acc``."""
    k = rows.shape[0]
    if k <= NAIVE_ROWS:
        return np.add.reduce(rows, axis=0, dtype=acc)
    width = math.prod(rows.shape[1:])
    if width * np.dtype(acc).itemsize >= WIDE_BYTES or k * width <= SMALL:
        return _blocked(rows, acc, first or acc)
    return _halved(rows, acc, width)


def _blocked(rows, acc, first):
    k = rows.shape[0] // BLOCK
    blocks = np.add.reduce(rows[:k * BLOCK].reshape((k, BLOCK) + rows.shape[1:]), axis=1, dtype=first)
    blocks = blocks.astype(acc, copy=False)
    total = _sum_rows(blocks, acc)
    if rows.shape[0] > k * BLOCK:
        total += np.add.reduce(rows[k * BLOCK:], axis=0, dtype=acc)
    return total


def _halved(rows, acc, width):
    step = 1 << max(1, (CHUNK // max(width, 1)).bit_length() - 1)  # rows per chunk, a power of two
    if rows.shape[0] <= step:
        return _halve(rows, acc)
    chunks = range(0, rows.shape[0], step)
    partial = np.empty((len(chunks),) + rows.shape[1:], acc)
    for i, start in enumerate(chunks):
        partial[i] = _halve(rows[start:start + step], acc)
    return _sum_rows(partial, acc)


def _halve(rows, acc):
    """Pairwise over axis 0: the first halving writes a temporary in ``acc`` (half inputs are added in float32),
    the later ones halve it in place; an odd row moves down to be added at a later level."""
    k = rows.shape[0]
    h = k // 2
    buf = np.empty((k - h,) + rows.shape[1:], acc)
    np.add(rows[:h], rows[h:2 * h], out=buf[:h], dtype=acc)
    if k & 1:
        buf[h] = rows[2 * h]
    k -= h
    while k > 1:
        h = k // 2
        np.add(buf[:h], buf[h:2 * h], out=buf[:h])
        if k & 1:
            buf[h] = buf[2 * h]
        k -= h
    return buf[0]
