"""Eager float32 sums over the trailing axes of a contiguous array (``x.sum()``, ``x.sum(-1)``, ``x.mean(-1)``,
a loss's mean) as one generated row reduction; a bfloat16 or float16 array is widened as the kernel loads it
(float32 accumulation, as ATen's: the caller rounds the result once), with no float32 copy.

NumPy's float32 pairwise sum runs at a quarter of torch's speed (2M elements: 330 us against 89). The generated
kernel adds blocks of `codegen.llvm_emit.BLOCK` elements in vectors of float32 and the blocks' totals in double
(`codegen.llvm_body.total_type`), so its error stays at the pairwise sum's or below. A whole-array sum (one row)
runs as rows of `SPLIT` elements, which threads share, whose sums are added in double.

>>> x = np.full((300, 500), 0.1, np.float32)
>>> trailing_sum(x, (1,), False).shape, round(float(trailing_sum(x, (0, 1), False)), 1)
((300,), 15000.0)
"""
from __future__ import annotations

import math

import numpy as np

import ml_dtypes

from ..codegen.ir import Buffer, Kernel, Store, load, op
from ..codegen.llvm_host import storage_dtypes
from .native_grid import GridKernel

__all__ = ["trailing_sum", "MIN_SIZE", "SPLIT"]

MIN_SIZE = 1 << 13  # elements below which NumPy's sum is as fast as a kernel call
SPLIT = 1 << 14  # a whole-array sum's row length
_F32 = np.dtype(np.float32)
_LOADS = {_F32: "f32", np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}
_kernels: dict = {}


def _row_sums(load_dtype="f32"):
    """The row-sum grid kernel reading ``load_dtype`` elements (widened to float32 as they load); False where the
    host cannot load it (float16 without F16C)."""
    kernel = _kernels.get(load_dtype)
    if kernel is None:
        def value():
            x = load(0, load_dtype)
            return x if load_dtype == "f32" else op("cast", x, dtype="f32")
        kernel = _kernels[load_dtype] = (load_dtype == "f32" or load_dtype in storage_dtypes()) and GridKernel(
            lambda rows, cols: Kernel((rows, cols), (Buffer(load_dtype, (cols, 1)), Buffer("f32", (1, 0))),
                                      (Store(1, value(), "sum"),), 1))
    return kernel


def trailing_sum(a, dims, keepdim):
    """The float32 sum of the C-contiguous float32, bfloat16 or float16 NumPy array ``a`` over ``dims`` (its trailing
    axes, ascending), or None where this path does not apply (other dtypes, layouts or axes, small arrays): the
    caller sums it its own way."""
    if type(a) is not np.ndarray or a.size < MIN_SIZE or not a.flags.c_contiguous or not a.dtype.isnative:
        return None
    sums = _row_sums(_LOADS.get(a.dtype, ""))
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
    part_sums = np.empty(parts, _F32)
    sums.run([a, part_sums], parts, SPLIT)
    tail = a.reshape(-1)[parts * SPLIT:].astype(_F32)  # (under SPLIT elements: exact, and quick in software)
    total = np.add.reduce(part_sums, dtype=np.float64) + np.add.reduce(tail, dtype=np.float64)
    return np.full(shape, total, _F32)
