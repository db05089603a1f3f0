"""``out[key] += values`` with repeated positions accumulated, for NumPy arrays: faster exact forms of ``np.add.at``.

``np.add.at`` takes 50 to 80 ns an element when ``out`` has more than one dimension (``index_add_`` of 50000 rows of
16 floats: 40 ms, torch 2 ms). Two forms do the same sums with whole-array calls:

- *dense* (floating ``out`` no more than 4 times larger than the update): ``np.bincount`` of the flat positions
  weighted by the values. It sums in float64 in the updates' order and rounds once into ``out``: as close to the exact
  sum as torch's float32 running sum, or closer;
- *rows* (everything else with rows of at least 8 elements, integers included): a stable sort of the row positions,
  ``np.add.reduceat`` over each run of equal positions (in the updates' order, as ``add.at``), and one ``+=`` on the
  distinct rows. Integer sums wrap exactly as ``add.at``'s.

Both are deterministic. Keys are tuples of integer arrays (broadcast together) and full slices, with the arrays
adjacent (NumPy then puts the broadcast index dims where the arrays are); any other key, dtype or a small update
takes ``np.add.at``.

>>> out = np.zeros((3, 4), np.float32)
>>> add_at(out, (np.array([0, 2, 0] * 1000),), np.ones((3000, 4), np.float32))
>>> out[:, 0].tolist()
[2000.0, 0.0, 1000.0]
"""
from __future__ import annotations

import math

import numpy as np

from .key_runs import run_starts

__all__ = ["add_at", "is_grid"]

_MIN_UPDATE = 2048  # elements: below this add.at's loop is as fast as the whole-array forms' fixed cost
_DENSE_RATIO = 4  # bincount's output is all of ``out``: worth it while out is at most this many times the update
_MIN_ROW = 8  # the rows form sorts the positions once for a row's worth of elements


def add_at(out, key, values):
    """``np.add.at(out, key, values)``, through `_dense` or `_rows` where they apply."""
    if not _fast(out, key if isinstance(key, tuple) else (key,), values):
        np.add.at(out, key, values)


def _fast(out, key, values):
    values = np.asarray(values)
    # float16 keeps add.at: its running sum rounds to half at every step, as torch's does, and a float64 sum would
    # differ from both by more than half precision's tolerance over many updates.
    if out.dtype.kind not in "fiu" or (out.dtype.kind == "f" and out.dtype.itemsize < 4) or \
            values.dtype != out.dtype or len(key) > out.ndim:
        return False
    rows = _grid_rows(out, key)
    if rows is not None:
        out, key = rows
    arrays = [i for i, k in enumerate(key) if not isinstance(k, slice)]
    if not arrays or arrays != list(range(arrays[0], arrays[-1] + 1)):
        return False
    if any(k != slice(None) for k in key if isinstance(k, slice)):
        return False
    if any(not isinstance(key[i], np.ndarray) or key[i].dtype.kind not in "iu" for i in arrays):
        return False
    first, count = arrays[0], len(arrays)
    try:
        index = np.broadcast_arrays(*(key[i] for i in arrays))
        shape = out.shape[:first] + index[0].shape + out.shape[first + count:]
        values = np.broadcast_to(values, shape)
    except ValueError:
        return False  # add.at raises the same mismatch
    dims = out.shape[first:first + count]
    rest = out.shape[:first] + out.shape[first + count:]
    inner, updates = math.prod(rest), index[0].size
    if updates * inner == 0:
        return True
    if updates * inner < _MIN_UPDATE:
        return False
    # The indexed dims first, in ``out`` and in the values: then each update is a row of ``inner`` elements.
    target = np.moveaxis(out, tuple(range(first, first + count)), tuple(range(count))) if first else out
    rows = np.moveaxis(values, tuple(range(first, first + index[0].ndim)), tuple(range(index[0].ndim))) \
        if first else values
    rows = rows.reshape(updates, inner)
    flat = np.ravel_multi_index(tuple(i.reshape(-1) for i in index), dims, mode="wrap")  # negatives wrap
    size = math.prod(dims)
    if out.dtype.kind == "f" and size <= _DENSE_RATIO * updates:
        _dense(target, flat, rows, size, inner)
        return True
    if inner >= _MIN_ROW:
        _rows(target, flat, rows, dims)
        return True
    return False


def is_grid(k, axis, ndim):
    """Whether ``k`` is ``arange(n)`` laid along ``axis`` of ``ndim`` dims (scatter's position along a dim)."""
    return (k.ndim == ndim and k.size == k.shape[axis] and k.size > 0
            and bool((k.reshape(-1) == np.arange(k.size)).all()))


def _grid_rows(out, key):
    """A scatter's key (the index array along one dim ``d``, ``arange`` along every other) whose index array is
    constant along the other dims (an expanded ``index``, as ``scatter_add_(0, i.view(-1, 1).expand(-1, n), src)``)
    is a row update: ``(out[:n0, ..., :, ..., :nk], (:, ..., i, ..., :))``. None when the key is not of that form."""
    nd = out.ndim
    if len(key) != nd or nd < 2 or not all(isinstance(k, np.ndarray) for k in key):
        return None
    rest = [e for e, k in enumerate(key) if not is_grid(k, e, nd)]
    if len(rest) != 1:
        return None
    d = rest[0]
    index = key[d]
    if index.ndim != nd or any(index.shape[e] not in (1, key[e].size) or (index.shape[e] > 1 and index.strides[e])
                               for e in range(nd) if e != d):
        return None
    line = index[tuple(slice(None) if e == d else 0 for e in range(nd))]
    view = out[tuple(slice(None) if e == d else slice(0, key[e].size) for e in range(nd))]
    return view, tuple(line if e == d else slice(None) for e in range(nd))


def _dense(target, flat, rows, size, inner):
    positions = flat if inner == 1 else (flat[:, None] * inner + np.arange(inner)).reshape(-1)
    sums = np.bincount(positions, weights=rows.reshape(-1), minlength=size * inner).reshape(target.shape)
    # Only where something was added: an untouched -0.0 stays -0.0 (adding +0.0 would flip it).
    np.add(target, sums, out=target, where=sums != 0, casting="same_kind")


def _rows(target, flat, rows, dims):
    # NumPy's stable sort is a radix sort for 16-bit keys, a merge sort for wider ones.
    order = np.argsort(flat.astype(np.uint16) if flat.size and math.prod(dims) <= 1 << 16 else flat, kind="stable")
    ordered = flat[order]
    starts = np.flatnonzero(run_starts(np, ordered))
    sums = np.add.reduceat(rows[order], starts, axis=0)
    # Distinct positions now: a plain fancy-index += is exact.
    target[np.unravel_index(ordered[starts], dims)] += sums.reshape((len(starts),) + target.shape[len(dims):])
