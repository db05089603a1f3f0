"""Native gathers and scatter-adds for the index rows (`ops.indexing`): the key forms `codegen.llvm_indexed` runs.

Two forms of an indexing key cover most of the indexing a model does, and both are slow in NumPy:

- *along a dim*: one index array at every dim, all but one of them ``arange`` grids laid along their own dim, as
  ``gather``/``scatter_add`` (and their gradients) index: ``a[i0, idx, i2]`` with ``i0 = arange(n0)[:, None, None]``...
  NumPy's broadcast fancy indexing takes 6 ns an element to gather (1000x1000 float32: 6 ms; native 1.2 ms) and its
  ``add.at`` forms 17 ms to scatter-add (native 1.5 ms);
- *rows*: one index array after full slices, ``a[:, idx]`` (``index_select``, an embedding); only its scatter-add
  (the gradient of every such read, ``index_add_``, ``index_put_(accumulate=True)``) runs natively: NumPy's own
  row gather is as fast as the generated one. An embedding's gradient, 4096 rows of 256 float32 into 10000:
  10 ms through ``host_scatter``, 0.2 ms here.

Both take NumPy arrays and return None (the caller's NumPy path runs) for anything else: other keys, CuPy, small
updates, dtypes without a kernel, or an index out of bounds (the NumPy path then raises PyTorch's error).

>>> a = np.arange(12.0).reshape(3, 4)
>>> idx = np.array([[3, 0, 1, 2, 0, 1] * 400] * 3)
>>> grid = np.arange(3).reshape(3, 1)
>>> bool((gather((grid, idx), a, (0, 1), False) == a[grid, idx]).all())
True
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.ir import IR_DTYPES
from ..codegen.llvm_indexed import IndexedAlongDim, IndexedOutOfBounds
from ..codegen.llvm_objcache import default_cache
from ..runtime.host_scatter import is_grid

__all__ = ["IndexedOutOfBounds", "gather", "scatter_add"]

_MIN_ELEMENTS = 2048  # below this NumPy's indexing costs about what the native call's own overhead does
_NUMPY_ROW = 16  # elements per picked row from which NumPy's row copies beat the generated gather
_INDEX_DTYPES = {np.dtype(np.int64): "i64", np.dtype(np.int32): "i32"}
_ADD_DTYPES = {dtype: name for dtype, name in IR_DTYPES.items() if name != "bool"}  # sums of bools stay NumPy's
_kernels: dict = {}


def gather(indices, a, key, negative):
    """``a[key]`` (key entries: positions in ``indices``) for a key along a dim, or a rows key picking short rows,
    natively; None when not taken."""
    if a.dtype.kind in "OVSU" or a.itemsize not in (1, 2, 4, 8) or _small(a, indices):
        return None
    form = _along_dim(indices, key, a.shape)
    if form is not None:
        d, index, picked = form
        src = a[tuple(slice(None) if e == d else slice(0, n) for e, n in enumerate(picked))]
        out = np.empty(picked, a.dtype)
        shape = picked
    else:
        form = _rows(indices, key, a.shape)
        # Rows of many elements are NumPy's own fast case (a copy per row); short ones (an inner dim's
        # index_select: 1000x1000 by 500 columns took 0.72 ms, torch 0.19) are not.
        if form is None or math.prod(a.shape[form[0] + 1:]) >= _NUMPY_ROW:
            return None
        d, index, _ = form
        src, shape = a, a.shape[:d] + index.shape + a.shape[d + 1:]
        picked = a.shape[:d] + (index.size,) + a.shape[d + 1:]
        index = index.reshape((1,) * d + (index.size,) + (1,) * (a.ndim - d - 1))
        out = np.empty(picked, a.dtype)
    operands, _ = _views(d, (src, np.broadcast_to(index, picked), out))
    try:
        return out.reshape(shape) if _run("gather", f"b{a.itemsize}", *operands, negative) else None
    except IndexedOutOfBounds:
        return None


def scatter_add(out, values, indices, key, negative):
    """``out[key] += values`` with repeats accumulated (in order, in ``out``'s dtype), natively for a key along a
    dim or a rows key; False (``out`` untouched) when not taken. An index out of bounds raises
    `IndexedOutOfBounds` with ``out`` partly updated: the caller starts over from a fresh copy."""
    if out.dtype not in _ADD_DTYPES or values.dtype != out.dtype or not out.flags.writeable or _small(out, indices):
        return False
    form = _along_dim(indices, key, out.shape)
    if form is not None:
        d, index, picked = form
        target = out[tuple(slice(None) if e == d else slice(0, n) for e, n in enumerate(picked))]
        flat = picked
    else:
        form = _rows(indices, key, out.shape)
        if form is None:
            return False
        d, index, _ = form
        target = out
        picked = out.shape[:d] + index.shape + out.shape[d + 1:]
        flat = out.shape[:d] + (index.size,) + out.shape[d + 1:]
        index = index.reshape((1,) * d + (index.size,) + (1,) * (out.ndim - d - 1))
    try:
        src = np.broadcast_to(values, picked)
    except ValueError:
        return False  # the NumPy path raises PyTorch's shape error
    if flat != picked:
        src = src.reshape(flat)
        picked = flat
    operands, window = _views(d, (src, np.broadcast_to(index, picked), target))
    if not _run("scatter_add", _ADD_DTYPES[out.dtype], *operands, negative):
        return False
    if window is not None:  # the sums went to a scratch copy of a window of ``out``
        window[...] = operands[2][0]
    return True


def _small(a, indices):
    """A quick no for small calls (most of a model's indexing): the picked elements, at most ``a``'s size times the
    largest index array's, are too few."""
    return a.size * max((getattr(i, "size", 0) for i in indices), default=0) < _MIN_ELEMENTS


def _along_dim(indices, key, shape):
    """``(d, index, picked shape)`` when ``key`` indexes every dim of ``shape`` with integer arrays, each but the one
    at ``d`` an ``arange`` laid along its own dim; None otherwise."""
    nd = len(shape)
    if len(key) != nd or nd == 0 or any(type(k) is not int for k in key):
        return None
    arrays = [indices[k] for k in key]
    if any(type(a) is not np.ndarray or a.dtype not in _INDEX_DTYPES for a in arrays):
        return None
    try:
        picked = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        return None
    if len(picked) != nd or math.prod(picked) < _MIN_ELEMENTS:
        return None
    d = None
    for e, a in enumerate(arrays):
        if not (a.ndim == nd and a.shape[e] == picked[e] <= shape[e] and is_grid(a, e, nd)):
            if d is not None:
                return None
            d = e
    if d is None:
        d = nd - 1
    return d, arrays[d], picked


def _rows(indices, key, shape):
    """``(d, index, None)`` for ``key`` = full slices, one integer array at dim ``d``, full slices; None otherwise."""
    arrays = [e for e, k in enumerate(key) if type(k) is not slice]
    if len(arrays) != 1 or len(key) > len(shape) or any(k != slice(None) for k in key if type(k) is slice):
        return None
    d = arrays[0]
    index = indices[key[d]]
    if type(index) is not np.ndarray or index.dtype not in _INDEX_DTYPES:
        return None
    if index.size * math.prod(shape[:d]) * math.prod(shape[d + 1:]) < _MIN_ELEMENTS:
        return None
    return d, index, None


def _views(d, arrays):
    """Each array with its 3-D ``(before d, d, after d)`` geometry (`_geometry`); an operand whose dims do not walk as
    one there (a window of a larger array) is copied first, read-only ones as they are, the written one (last) to a
    scratch copy that the caller writes back. Returns ([(array, geometry)], the written array's original or None)."""
    out, original = [], None
    for k, a in enumerate(arrays):
        geometry = _geometry(a, d)
        if geometry is None:
            if k == len(arrays) - 1:
                original = a
            a = np.ascontiguousarray(a)
            geometry = _geometry(a, d)
        out.append((a, geometry))
    return out, original


def _geometry(a, d):
    """``((outer, n, inner), byte strides)`` of ``a`` seen as 3-D around dim ``d``, or None; no view is made."""
    outer, inner = _collapse(a.shape[:d], a.strides[:d]), _collapse(a.shape[d + 1:], a.strides[d + 1:])
    if outer is None or inner is None:
        return None
    return (outer[0], a.shape[d], inner[0]), (outer[1], a.strides[d], inner[1])


def _collapse(shape, strides):
    """(size, byte stride) of dims that walk as one, or None."""
    size, stride = 1, 0
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if size == 1:
            size, stride = n, s
        elif s == stride * size:
            size *= n
        else:
            return None
    return size, stride


def _run(kind, dtype, src, idx, out, negative):
    """The kernel over `_views`' operands (src, idx, out): True, or False when the strides are not whole elements."""
    (src, (src_shape, src_strides)), (idx, (shape, idx_strides)), (out, (out_shape, out_strides)) = src, idx, out
    item, index_item = src.itemsize, idx.itemsize
    if any(s % item for s in src_strides + out_strides) or any(s % index_item for s in idx_strides):
        return False  # (a field of a structured array: strides that are not whole elements)
    if shape[2] == 1:
        variant = "scalar"
    elif idx_strides[2] == 0 and src_strides[2] == item and out_strides[2] == item:
        variant = "rows"
    else:
        variant = "points"
    key = (kind, dtype, _INDEX_DTYPES[idx.dtype], variant, bool(negative))
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = IndexedAlongDim(*key, cache=default_cache())
    dim = src_shape[1] if kind == "gather" else out_shape[1]
    if dim == 0 and math.prod(shape):
        raise IndexedOutOfBounds(0)  # (the scalar variant would read element 0 of an empty dim)
    fn.run(src, idx, out, shape, [s // item for s in out_strides] + [s // item for s in src_strides] +
           [s // index_item for s in idx_strides], dim)
    return True
