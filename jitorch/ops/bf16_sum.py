"""Eager bfloat16 (and float16) sums over the trailing axes of a contiguous array (``x.sum()``, ``x.sum(-1)``,
``x.mean(-1)``) as one generated row reduction that widens as it loads, accumulating in float32 as ATen does (the
caller rounds the result to the half type, once): no float32 copy of the input (widening it first took more time
than the sum itself).

The kernel is `native_sum`'s row sum with a half-type load (blocks of float32 vectors, the blocks' totals in
double), so its float32 sums are `native_sum`'s sums of the widened array, bit for bit; a whole-array sum runs as
rows of `native_sum.SPLIT` elements added in double.

>>> import ml_dtypes
>>> x = np.full((300, 500), 0.5, ml_dtypes.bfloat16)
>>> trailing_sum(x, (1,), False).shape, float(trailing_sum(x, (0, 1), False))
((300,), 75000.0)
"""
from __future__ import annotations

import math

import numpy as np

from .bf16_cast import BF16
from .native_sum import MIN_SIZE, SPLIT

__all__ = ["trailing_sum"]

_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
_kernels: dict = {}


def _row_sums(storage):
    kernel = _kernels.get(storage)
    if kernel is None:
        from ..codegen.ir import Buffer, Kernel, Store, load, op
        from ..codegen.llvm_host import storage_dtypes
        from .native_grid import GridKernel

        kernel = _kernels[storage] = storage in storage_dtypes() and GridKernel(lambda rows, cols: Kernel(
            (rows, cols), (Buffer(storage, (cols, 1)), Buffer("f32", (1, 0))),
            (Store(1, op("cast", load(0, storage), dtype="f32"), "sum"),), 1))
    return kernel


def trailing_sum(a, dims, keepdim):
    """The float32 sum of the C-contiguous bfloat16 (or float16) NumPy array ``a`` over ``dims`` (its trailing axes,
    ascending), or None where this path does not apply (other dtypes, layouts or axes, small arrays)."""
    if type(a) is not np.ndarray or a.size < MIN_SIZE or not a.flags.c_contiguous or not a.dtype.isnative:
        return None
    sums = _row_sums("bf16" if a.dtype == BF16 else "f16" if a.dtype == _F16 else "")
    if not sums:  # (another dtype, or float16 on a host without F16C)
        return None
    nd, k = a.ndim, len(dims)
    if not k or tuple(dims) != tuple(range(nd - k, nd)):
        return None
    cols = math.prod(a.shape[nd - k:])
    rows = a.size // cols
    shape = a.shape[:nd - k] + ((1,) * k if keepdim else ())
    if rows >= 2 and cols >= 2:
        out = np.empty(rows, _F32)
        sums.run([a, out], rows, cols)
        return out.reshape(shape)
    if rows != 1:
        return None
    parts = a.size // SPLIT
    if parts < 2:
        return None
    parts_sums = np.empty(parts, _F32)
    sums.run([a, parts_sums], parts, SPLIT)
    tail = a.reshape(-1)[parts * SPLIT:].astype(_F32)  # (under SPLIT elements: a software loop is quick enough)
    total = np.add.reduce(parts_sums, dtype=np.float64) + np.add.reduce(tail, dtype=np.float64)
    return np.full(shape, total, _F32)
