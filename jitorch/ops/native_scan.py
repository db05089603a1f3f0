"""Eager CPU ``cumsum`` and ``cumprod`` of float32 arrays through two small LLVM functions each (`codegen.llvm_scan`):
ATen's loop, a float64 running sum from 0 (product from 1) rounded to float32 at each output, one pass.

NumPy's ``cumsum(dtype=float64)`` casts through buffers and runs its accumulate loop an element at a time (1000x1000
along dim 1: 7.7 ms, torch 0.9 ms). Starting from ``0.0`` as ATen does makes ``-0.0`` inputs give ``0.0``, as torch's.
A scan along the last dim keeps the sum in a register; along another dim a float64 row of sums (one per inner
element) is updated a row at a time, which vectorizes.

>>> import numpy as np
>>> x = np.full((1000, 3), -0.0, np.float32)
>>> x[:, 1] = 0.5
>>> cumsum_float32(x, 0)[-2:]  # torch's zeros are positive: 0.0 + -0.0
array([[  0. , 499.5,   0. ],
       [  0. , 500. ,   0. ]], dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.llvm_scan import cumsum_function
from ..runtime.host_pointer import data_address
from .native_call import DATA_OFFSET, HELD, HELD_MAX, held_function, int64, over

__all__ = ["cumsum_float32"]

_F32 = np.dtype(np.float32)
MIN_SIZE = 256  # below this NumPy's call costs less than the kernel's (10 elements: 2.9 us against 3.9)


def cumsum_float32(a, dim, op="sum"):
    """``a.cumsum(dim)`` (or, ``op="prod"``, ``a.cumprod(dim)``: a float64 running product from 1, as ATen's) as
    torch's CPU kernel computes it, for a C-contiguous float32 NumPy array ``a`` of at least ``MIN_SIZE`` elements;
    None otherwise (the caller scans its own way)."""
    if type(a) is not np.ndarray or a.dtype != _F32 or a.size < MIN_SIZE or not a.flags.c_contiguous:
        return None
    held = _held_scans.get((a.shape, dim, op)) if HELD else None
    if held is not None:  # a small scan along the last dim (`_held_scan`)
        fn, rows, n = held
        out = np.empty(a.shape, _F32)
        fn(over(id(a) + DATA_OFFSET), over(id(out) + DATA_OFFSET), rows, n)
        return out
    given = dim
    dim = dim % a.ndim
    shape = a.shape
    n, inner = shape[dim], math.prod(shape[dim + 1:])
    rows = a.size // (n * inner)
    if inner == 1 and HELD and a.size < HELD_MAX:
        _held_scan(shape, given, op, rows, n)
        return cumsum_float32(a, given, op)  # (now kept)
    out = np.empty(shape, _F32)
    # (``data_address``: ``a.ctypes.data`` costs a microsecond each, a third of a small scan's kernel)
    x_ptr, out_ptr = data_address(a), data_address(out)
    if inner == 1:
        cumsum_function("last", op)(x_ptr, out_ptr, rows, n)
    else:
        acc = np.empty(inner, np.float64)
        cumsum_function("inner", op)(x_ptr, out_ptr, data_address(acc), rows, n, inner)
    return out


_held_scans: dict = {}  # (shape, dim as called, op) -> (held last-dim scan, rows, n) for small arrays
_HELD_SCANS_MAX = 256


def _held_scan(shape, dim, op, rows, n):
    """Keep the held call of a small last-dim scan of ``shape`` along ``dim`` as the caller spells it (`native_call`:
    the declared call's conversions and this function's shape arithmetic were a quarter of a 32x32 cumsum)."""
    if len(_held_scans) >= _HELD_SCANS_MAX:
        _held_scans.clear()
    _held_scans[shape, dim, op] = (held_function(cumsum_function("last", op)), int64(rows), int64(n))
