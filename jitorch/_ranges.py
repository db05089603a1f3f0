"""Evenly spaced values: ``arange``, ``range``, ``linspace`` and ``logspace``, with ATen's arithmetic (float steps
counted as torch counts them, linspace's values bit for bit torch's in float32 and float64).

>>> linspace(0, 1, 5)
tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000])
>>> arange(1, 2, 0.25)
tensor([1.0000, 1.2500, 1.5000, 1.7500])
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import _dtype
from ._creation import _resolve, _xp_for
from ._tensor import Tensor

__all__ = ["arange", "range", "linspace", "logspace"]


def _number(x):
    return x.item() if isinstance(x, Tensor) else x


def arange(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    """``[start, end)`` in steps; int64 when all bounds are integers, else the default float dtype."""
    if end is None:
        start, end = 0, start
    start, end, step = _number(start), _number(end), _number(step)
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError(f"arange: upper bound and larger bound inconsistent with step sign (start={start}, "
                           f"end={end}, step={step})")
    is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = _dtype.to_dtype(dtype) if dtype is not None else (_dtype.int64 if is_int else _dtype.get_default_dtype())
    xp, _ = _xp_for(device)
    n = max(0, math.ceil((end - start) / step))
    if is_int or dt.category <= _dtype.INT:
        # PyTorch computes an integer range in the integer type: fractional start and step are truncated first.
        data = int(start) + xp.arange(n, dtype=np.int64) * int(step)
    else:  # computed in float64 and then cast, so float32 ranges match PyTorch's values
        data = xp.arange(n, dtype=np.float64) * step + start
    t = Tensor._make(data.astype(dt.np, copy=False))
    return t.requires_grad_(True) if requires_grad else t


def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):  # noqa: A001
    if end is None:
        start, end = 0, start
    return arange(start, end + step / 2, step,  # half a step past end: end itself is included
                  dtype=dtype or _dtype.get_default_dtype(), device=device, requires_grad=requires_grad)


def _fma(xp, a, b, c, wide):
    """``a * b + c`` rounded once to ``wide`` (float32 or float64), elementwise; ``b`` holds integers below 2^29.

    float32: the product and sum are exact or nearly so in float64, then rounded to float32. float64: the product's
    rounding error is recovered exactly (Veltkamp split, Dekker's product) and added back after the sum.
    """
    a, b, c = (xp.asarray(v, dtype=np.float64) for v in (a, b, c))
    if wide == np.float32:
        return (a * b + c).astype(np.float32)
    p = a * b
    split = 134217729.0  # 2^27 + 1
    a_hi = a * split - (a * split - a)
    b_hi = b * split - (b * split - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    err = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    total = p + c
    virtual = total - p
    sum_err = (p - (total - virtual)) + (c - virtual)
    return total + (sum_err + err)


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    start, end = _number(start), _number(end)
    xp, _ = _xp_for(device)
    dt = _resolve(dtype)
    if steps < 0:
        raise RuntimeError("linspace: number of steps must be non-negative")
    if dt.category <= _dtype.INT:  # integer ranges start from the truncated bounds, as in PyTorch
        start, end = math.trunc(start), math.trunc(end)
    # PyTorch fills the second half backwards from ``end`` so the last value is exact.
    half = steps // 2 if steps > 1 else 1  # a single step is ``start``
    if dt.category <= _dtype.INT:  # ATen steps integer ranges in double, then truncates
        step = (end - start) / (steps - 1) if steps > 1 else 0.0
        idx = xp.arange(steps, dtype=np.float64)
        vals = xp.trunc(xp.where(idx < half, start + step * idx, end - step * (steps - 1 - idx)))
    else:
        # ATen's kernel: start and end rounded to the dtype, step = (end - start) / (steps - 1) in that precision,
        # then fma(step, i, start) for the first half and fma(-step, steps - 1 - i, end) for the second, each
        # rounded once: bit for bit torch's float32 and float64 values (halves go through float32 here and may
        # differ from ATen's vectorized half loop in the last bit).
        wide = np.float64 if dt.np == np.float64 else np.float32
        lo, hi = (np.asarray(v, dtype=dt.np).astype(wide) for v in (start, end))
        step = (hi - lo) / wide(steps - 1) if steps > 1 else hi * wide(0)
        idx = xp.arange(steps)
        first = idx < half
        count = xp.where(first, idx, steps - 1 - idx).astype(np.float64)
        base = xp.where(first, lo, hi)
        vals = _fma(xp, xp.where(first, step, -step), count, base, wide)
    t = Tensor._make(xp.asarray(vals).astype(dt.np, copy=False))
    return t.requires_grad_(True) if requires_grad else t


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    lin = linspace(start, end, steps, dtype=_dtype.float64, device=device)
    out = Tensor._make((base ** lin._data).astype(_resolve(dtype).np))
    return out.requires_grad_(True) if requires_grad else out
