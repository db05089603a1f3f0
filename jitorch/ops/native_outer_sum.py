"""Eager sums over an outer axis (``x.sum(0)``, a middle axis of a 3-d tensor, ``x.T.sum(1)``) of a bfloat16,
float16 or float32 array whose kept inner axis is contiguous, in ATen's float32 order bit for bit, as one generated
pass that widens half types as it loads (`codegen/llvm_outer_sum.py`). The float32 sum of widened copies with
NumPy's blocks took 3x torch's time (1000x1000 bfloat16: 178 us against 60) and only agreed with torch after the
bfloat16 rounding hid its other order.

ATen's ``cascade_sum`` (one thread) sums a (rows, cols) block one of three ways per column: the columns of whole
groups of four vectors of floats (``4 * FLOAT_LANES``) by ``multi_row_sum`` (the generated function), the rest by
``row_sum`` (four interleaved streams of rows, each a cascade, the leftover rows added to the first, then the four
added); an input narrower than one vector of its own dtype goes by ``scalar_outer_sum``: whole groups of four
columns by ``multi_row_sum``, the rest by ``row_sum``.

>>> x = np.arange(600, dtype=np.float32).reshape(40, 15)
>>> outer_sum(x, (0,), False).tolist() == x.sum(0).tolist()
True
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..codegen.llvm_outer_sum import level_power, outer_sum_function

__all__ = ["outer_sum", "FLOAT_LANES"]

_F32 = np.dtype(np.float32)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_LOADS = {_F32: "f32", np.dtype(np.float16): "f16", _BF16: "bf16"}


# Floats in one vector of ATen's sum kernel: 8 on every x86 host (``sum_stub`` is not dispatched to AVX-512, and
# the default build's vectors are 32 bytes too).
FLOAT_LANES = 8


def _geometry(a, dims):
    """``(batches, batch_stride, rows, row_stride, cols, col_stride)`` (strides in elements) where ``a`` is, in
    memory order, kept outer axes, the reduced axes, then kept axes, each group coalescing into one axis and the
    kept axes in their logical order; else None."""
    first, end = dims[0], dims[-1] + 1
    if a.flags.c_contiguous and end - first == len(dims):  # (the common case, quickly: consecutive dims)
        cols, rows = math.prod(a.shape[end:]), math.prod(a.shape[first:end])
        return (math.prod(a.shape[:first]), rows * cols, rows, cols, cols, 1) if cols > 1 else None
    item = a.itemsize
    axes = [d for d in range(a.ndim) if a.shape[d] > 1]
    if any(a.strides[d] % item or a.strides[d] <= 0 for d in axes):
        return None
    axes.sort(key=lambda d: -a.strides[d])
    groups = []  # runs of reduced / kept axes in memory order: [reduced?, [axes]]
    for d in axes:
        reduced = d in dims
        if groups and groups[-1][0] == reduced:
            groups[-1][1].append(d)
        else:
            groups.append([reduced, [d]])
    kinds = [g[0] for g in groups]
    if kinds not in ([True, False], [False, True, False]):
        return None
    sizes = []
    for _, run in groups:
        for outer, inner in zip(run, run[1:]):
            if a.strides[outer] != a.strides[inner] * a.shape[inner]:
                return None
        sizes.append((math.prod(a.shape[d] for d in run), a.strides[run[-1]] // item))
    kept = [d for reduced, run in groups if not reduced for d in run]
    if kept != sorted(kept):
        return None
    (batches, batch_stride), (rows, row_stride), (cols, col_stride) = ([(1, 0)] + sizes)[-3:]
    return batches, batch_stride, rows, row_stride, cols, col_stride


def _cascade_cut(cols, itemsize, unit_stride):
    """How many leading columns ATen sums by ``multi_row_sum`` for a result of ``itemsize`` bytes (the dtype it
    computes in), its kept axis of unit stride or not; the rest go by ``row_sum``."""
    vector = FLOAT_LANES * 4 // itemsize  # elements of that dtype in one vector
    group = 4 * FLOAT_LANES if unit_stride and cols >= vector else 4
    return cols // group * group


def outer_sum(a, dims, keepdim, dtype=None):
    """The float32 sum of the NumPy array ``a`` (bfloat16, float16 or float32) over ``dims`` (wrapped, ascending)
    in ATen's order for a result of ``dtype`` (default ``a``'s: ATen sums a bfloat16 tensor into float32 as float32
    copies, whose vectors hold fewer elements), or None where this path does not apply (other dtypes or layouts,
    empty arrays, sums over the contiguous axis: `native_sum` and the cascade take those)."""
    load = _LOADS.get(a.dtype)
    if load is None or type(a) is not np.ndarray or not a.size or not dims or not a.dtype.isnative:
        return None
    geometry = _geometry(a, dims)
    function = geometry and outer_sum_function(load)
    if not function:
        return None
    dtype = np.dtype(dtype or a.dtype)
    # ATen sums strided columns in its scalar loop (unless it sums a dense cast copy): the same order on a dense
    # copy's columns
    unit_stride = geometry[-1] == 1 or dtype != a.dtype
    if geometry[-1] != 1:
        a = np.ascontiguousarray(a)
        geometry = _geometry(a, dims)
    batches, batch_stride, rows, row_stride, cols, _ = geometry
    out = np.empty((batches, cols), _F32)
    base = a.ctypes.data
    cut = _cascade_cut(cols, dtype.itemsize, unit_stride)
    if cut:
        function(base, out.ctypes.data, rows, cut, row_stride, level_power(rows), batches, batch_stride, cols)
    if cut < cols:
        _row_sums(function, a.itemsize, base, out, rows, row_stride, cut, batches, batch_stride)
    if dtype == _BF16 and np.isnan(out).any():
        out[np.isnan(out)] = np.nan  # (c10's scalar rounding of ATen's output makes every NaN 0x7fc0)
    out_shape = tuple(1 if d in dims else n for d, n in enumerate(a.shape) if keepdim or d not in dims)
    return out.reshape(out_shape)


def _row_sums(function, itemsize, base, out, rows, row_stride, cut, batches, batch_stride):
    """ATen's ``row_sum`` of columns ``cut..`` of each batch: four interleaved streams of rows (row ``4i + k`` in
    stream ``k``), each a cascade over ``rows // 4``; the leftover rows added to stream 0, then streams 1..3. One
    call per stream and per leftover row, each over every batch (at most seven calls, whatever the batch count)."""
    width = out.shape[1] - cut
    quarter = rows // 4
    streams = np.zeros((4, batches, width), _F32)
    left = np.empty((rows - 4 * quarter, batches, width), _F32)
    start = base + cut * itemsize
    if quarter:
        for k in range(4):
            function(start + k * row_stride * itemsize, streams[k].ctypes.data, quarter, width, 4 * row_stride,
                     level_power(quarter), batches, batch_stride, width)
    for r in range(left.shape[0]):  # (each leftover row a one-row sum: its widened values)
        function(start + (4 * quarter + r) * row_stride * itemsize, left[r].ctypes.data, 1, width, row_stride, 4,
                 batches, batch_stride, width)
    total = streams[0]
    for r in range(left.shape[0]):
        total += left[r]
    for k in range(1, 4):
        total += streams[k]
    out[:, cut:] = total
