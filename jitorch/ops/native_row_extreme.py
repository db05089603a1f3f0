"""Eager float32 ``amax``/``amin`` over the last dim of a small C-contiguous array as one generated row reduction,
called through `native_eager.launch_arrays`' held call.

NumPy reduces a short last axis one row at a time: ``np.maximum.reduce`` of a 32x32 float32 array took 2.7 us, more
than torch's whole ``amax(-1)``; the kernel and its call take 1.6. The kernel is the compiled path's float max/min
(`codegen.llvm_body`: vector ``maxnum`` per block; a NaN anywhere in the row makes it the default quiet NaN, as
torch's result, where NumPy's kept the element's sign), compiled once for
sentinel sizes (`native_grid.GridKernel`) and given each shape's sizes in a copy kept per shape. Which of -0.0 and
0.0 a tie gives is unspecified, as in torch, whose vector lanes decide it (NumPy's order agreed with torch on a
quarter of rows mixing zeros of both signs).

>>> x = np.float32([[1, 5, -2], [np.nan, 0, 1]])
>>> row_extreme(x, "max").tolist()[0], bool(np.isnan(row_extreme(x, "max")[1]))
(5.0, True)
"""
from __future__ import annotations

import copy

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, load
from .native_eager import HELD_MAX, launch_arrays
from .native_grid import GridKernel

__all__ = ["row_extreme"]

_F32 = np.dtype(np.float32)
_grids: dict = {}  # "max"/"min" -> the GridKernel
_shaped: dict = {}  # (reduction, rows, columns) -> the compiled kernel with those sizes as its run-time values
_SHAPED_MAX = 256


def _shaped_kernel(reduce, rows, cols):
    grid = _grids.get(reduce)
    if grid is None:
        grid = _grids[reduce] = GridKernel(lambda r, c: Kernel(
            (r, c), (Buffer("f32", (c, 1)), Buffer("f32", (1, 0))), (Store(1, load(0, "f32"), reduce),), 1))
    kernel = copy.copy(grid.compiled)
    for cached in ("_held_calls", "_pool_call"):  # (call contexts hold the values)
        kernel.__dict__.pop(cached, None)
    sizes = (rows, cols)
    kernel.values = tuple(v if role is None else sizes[role] for role, v in zip(grid.roles, grid.compiled.values))
    if len(_shaped) >= _SHAPED_MAX:
        _shaped.clear()
    _shaped[reduce, rows, cols] = kernel
    return kernel


def row_extreme(a, reduce):
    """The ``reduce`` (``"max"`` or ``"min"``) of NumPy array ``a`` over its last dim, shaped ``a.shape[:-1]``, for a
    C-contiguous float32 ``a`` of at least 2 rows of 2 and fewer than `HELD_MAX` elements; None otherwise (the caller
    reduces its own way)."""
    if type(a) is not np.ndarray or a.dtype is not _F32 or a.ndim < 2 or a.size >= HELD_MAX or \
            not a.flags.c_contiguous:
        return None
    cols = a.shape[-1]
    rows = a.size // cols if cols else 0
    if rows < 2 or cols < 2:  # (a size of 1 collapses a grid dimension: another template)
        return None
    kernel = _shaped.get((reduce, rows, cols)) or _shaped_kernel(reduce, rows, cols)
    out = np.empty(a.shape[:-1], _F32)
    launch_arrays(kernel, [a, out], a.size, a.size, rows)
    return out
