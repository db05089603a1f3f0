"""The differentiable gather/scatter pair of the sorting family, split from ``sorting.py`` (which re-exports it):
``take_along`` gathers the values an index row picked, ``put_along_add`` scatter-adds a gradient back (cummax/cummin
repeat indices); each row is the other's backward, so double backward works. Also the flat-position gathers
(``take_along``, ``take_checked``) that the sorting and reduction kernels share, with their cached offsets.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import scatter_add
from ..runtime.host_scatter import _MIN_UPDATE as SMALL_UPDATE
from .table import Opaque, defop


def _open_grid(xp, index, dim):
    """Index tuple that addresses ``out[..., index, ...]`` along ``dim`` with every other dim ranging fully."""
    grid = []
    for d, n in enumerate(index.shape):
        if d == dim:
            grid.append(index)
        else:
            shape = [1] * index.ndim
            shape[d] = n
            grid.append(xp.arange(n).reshape(shape))
    return tuple(grid)


def take_along(xp, a, index, dim):
    """``xp.take_along_axis(a, index, axis=dim)`` for an ``index`` of in-range positions shaped as ``a`` but along
    ``dim``. For C-contiguous NumPy arrays, one flat ``take`` (NumPy's take_along_axis builds its grid of aranges in
    Python: 32x32, 7 us; this 3)."""
    flat = _flat_positions(a, index, dim)
    if flat is None:
        return xp.take_along_axis(a, index, axis=dim)
    return a.reshape(-1).take(flat)


def _flat_positions(a, index, dim):
    """The positions in ``a.reshape(-1)`` that int64 ``index`` (in range, shaped as ``a`` but along ``dim``) picks
    along ``dim``, shaped as ``index``; None unless both are NumPy arrays and ``a`` is C-contiguous."""
    if (type(a) is not np.ndarray or type(index) is not np.ndarray or not a.flags.c_contiguous
            or index.dtype != _INT64 or not a.ndim or not a.size):
        return None
    dim %= a.ndim
    shape, index_shape = a.shape, index.shape
    if len(shape) != len(index_shape) or shape[:dim] != index_shape[:dim] or shape[dim + 1:] != index_shape[dim + 1:]:
        return None
    return flat_positions_checked(a, index, dim)


def take_checked(a, index, dim):
    """`take_along` for a caller that checked what `_flat_positions` does (a C-contiguous NumPy ``a`` with elements,
    an int64 NumPy ``index`` of ``a``'s shape but along ``dim``, ``dim`` in ``[0, a.ndim)``): its checks were a
    third of a small gather's time."""
    if dim == 1 == a.ndim - 1:  # rows of a matrix (top-k's values, a class gather)
        if index.size < _FEW:  # NumPy's indexing by row numbers and the index beats its add and take here
            return a[_offsets(a.shape[0], 1, column=True), index]
        return a.reshape(-1).take(index + _offsets(a.shape[0], a.shape[1], column=True))
    return a.reshape(-1).take(flat_positions_checked(a, index, dim))


def flat_positions_checked(a, index, dim):
    """`_flat_positions` of arguments already checked (`take_checked`)."""
    shape, index_shape = a.shape, index.shape
    inner = math.prod(shape[dim + 1:])
    outer = a.size // (shape[dim] * inner)
    flat = index.reshape(outer, index_shape[dim], inner)
    if inner > 1:
        flat = flat * inner + _offsets(inner, 1, last=True)
    if outer > 1:
        flat = flat + _offsets(outer, shape[dim] * inner)
    return flat.reshape(index_shape)


_INT64 = np.dtype(np.int64)
_FEW = 256  # picks from which a flat take (and its offsets' add) is quicker than NumPy's two-array indexing
_offset_cache: dict = {}


def _offsets(count, step, last=False, column=False):
    """``arange(0, count * step, step)`` shaped to broadcast along the first (``last``: the last) axis of a 3-d
    array (``column``: the first of a matrix), cached (read-only): small gathers pay more for building it than for
    the gather."""
    key = (count, step, last, column)
    out = _offset_cache.get(key)
    if out is None:
        if len(_offset_cache) >= 64:
            _offset_cache.clear()
        out = np.arange(0, count * step, step).reshape(count if last else (count, 1) if column else (count, 1, 1))
        out.flags.writeable = False
        _offset_cache[key] = out
    return out


# -- the differentiable gather / scatter pair ---------------------------------------------------------------------
def _take_kernel(xp, a, index, dim):
    return take_along(xp, a, index, dim)


def _take_backward(ctx, g):
    from .._dispatch import apply

    index = ctx.inputs[1]
    shape = ctx.in_meta[0][0]
    return apply(PUT_ALONG_ADD, g, index, dim=ctx.attrs["dim"], size=shape[ctx.attrs["dim"]]), None


def _put_add_kernel(xp, src, index, dim, size):
    shape = list(src.shape)
    shape[dim] = size
    out = xp.zeros(tuple(shape), dtype=src.dtype)
    if src.size < SMALL_UPDATE and src.shape == index.shape:
        flat = _flat_positions(out, index, dim)
        if flat is not None:  # what scatter_add runs for a small update, on the flat positions (no grid to build)
            np.add.at(out.reshape(-1), flat, src)
            return out
    scatter_add(xp, out, _open_grid(xp, index, dim), src)
    return out


def _put_add_backward(ctx, g):
    from .._dispatch import apply

    index = ctx.inputs[1]
    return apply(TAKE_ALONG, g, index, dim=ctx.attrs["dim"]), None


TAKE_ALONG = defop("take_along", _take_kernel, _take_backward, Opaque("gather"), saves="inputs", meta=True,
                   grad_name="GatherBackward0")
PUT_ALONG_ADD = defop("put_along_add", _put_add_kernel, _put_add_backward, Opaque("scatter-add"), saves="inputs",
                      grad_name="ScatterAddBackward0")
