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

__all__ = ["cumsum_float32"]

_F32 = np.dtype(np.float32)
MIN_SIZE = 256  # below this NumPy's call costs less than the kernel's (10 elements: 2.9 us against 3.9)


def cumsum_float32(a, dim, op="sum"):
    """``a.cumsum(dim)`` (or, ``op="prod"``, ``a.cumprod(dim)``: a float64 running product from 1, as ATen's) as
    torch's CPU kernel computes it, for a C-contiguous float32 NumPy array ``a`` of at least ``MIN_SIZE`` elements;
    None otherwise (the caller scans its own way)."""
    if type(a) is not np.ndarray or a.dtype != _F32 or a.size < MIN_SIZE or not a.flags.c_contiguous:
        return None
    dim = dim % a.ndim
    shape = a.shape
    n, inner = shape[dim], math.prod(shape[dim + 1:])
    rows = a.size // (n * inner)
    out = np.empty(shape, _F32)
    # (``data_address``: ``a.ctypes.data`` costs a microsecond each, a third of a small scan's kernel)
    x_ptr, out_ptr = data_address(a), data_address(out)
    if inner == 1:
        cumsum_function("last", op)(x_ptr, out_ptr, rows, n)
    else:
        acc = np.empty(inner, np.float64)
        cumsum_function("inner", op)(x_ptr, out_ptr, data_address(acc), rows, n, inner)
    return out
