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

from . import _device, _dtype
from ._creation import _resolve, _xp_for
from ._creation_watchers import WATCHERS, noted
from ._tensor import Tensor

__all__ = ["arange", "range", "linspace", "logspace"]


_INT_SAFE = 1 << 62  # bounds whose range and products stay within int64 (the general path's arithmetic wraps there)


def _number(x):
    return x.item() if isinstance(x, Tensor) else x


def arange(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    """``[start, end)`` in steps; int64 when all bounds are integers, else the default float dtype."""
    if type(start) is int and type(step) is int and (end is None or type(end) is int) and (
            dtype is None or dtype is _dtype.int64) and device is None and not requires_grad and not WATCHERS and \
            _device._default_device.type == "cpu":
        # An int64 range of plain ints on the CPU (``arange(n)``): the general path's values without its checks of
        # number types (ABC isinstance tests) or its temporaries.
        lo, hi = (0, start) if end is None else (start, end)
        if step and (hi - lo) / step >= 0 and -_INT_SAFE < min(lo, hi, step) and max(lo, hi, step) < _INT_SAFE:
            data = np.arange(max(0, math.ceil((hi - lo) / step)), dtype=np.int64)
            if step != 1:
                data *= step
            if lo:
                data += lo
            return Tensor._make(data)
    given = start, end, step
    if end is None:
        start, end = 0, start
    start, end, step = _number(start), _number(end), _number(step)
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError(f"arange: upper bound and lower bound inconsistent with step sign (start={start}, "
                           f"end={end}, step={step})")
    if not all(math.isfinite(v) for v in (start, end)):
        raise RuntimeError(f"arange: unsupported range: {start} -> {end}")
    is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = _dtype.to_dtype(dtype) if dtype is not None else (_dtype.int64 if is_int else _dtype.get_default_dtype())
    if dt is _dtype.int64 and not is_int:
        # ATen counts an int64 range from the truncated bounds and step: arange(0.5, 5, 1.5) has 5 elements there.
        start, end, step = math.trunc(start), math.trunc(end), math.trunc(step)
        if step == 0:
            raise ValueError("arange: step must be nonzero (it truncates to 0 for dtype int64)")
    xp, _ = _xp_for(device)
    n = max(0, math.ceil((end - start) / step))
    if is_int or dt.category <= _dtype.INT:
        # PyTorch computes an integer range in the integer type: fractional start and step are truncated first.
        data = int(start) + xp.arange(n, dtype=np.int64) * int(step)
    else:  # computed in float64 and then cast, so float32 ranges match PyTorch's values
        data = xp.arange(n, dtype=np.float64) * step + start
    t = Tensor._make(data.astype(dt.np, copy=False))
    if requires_grad:
        t.requires_grad_(True)
    if WATCHERS:  # the arguments as the call wrote them: ``arange(n)``, not ``arange(n, None, 1)``
        given = given if type(given[2]) is not int or given[2] != 1 else given[:1] if given[1] is None else given[:2]
        noted("arange", t, given, dtype=dtype, device=device, requires_grad=requires_grad)
    return t


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


def _checked_bounds(op, start, end, dt, steps):
    """The bounds as ATen's kernel reads them into ``dt``: range-checked (c10's checked_convert), truncated for
    integers. Only a range of two or more steps runs the kernel (one step fills ``start``, zero do nothing)."""
    if steps < 2 or dt.category == _dtype.COMPLEX:
        return (_dtype.checked_scalar(start, dt) if steps == 1 else start), end
    if dt is _dtype.bool:
        raise NotImplementedError(f'"{op}_cpu" not implemented for \'Bool\'')
    return tuple(_dtype.checked_scalar(v, dt) for v in (start, end))


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    given = start, end, steps
    start, end = _number(start), _number(end)
    xp, _ = _xp_for(device)
    complex_bounds = isinstance(start, complex) or isinstance(end, complex)
    dt = _resolve(dtype, _dtype.default_complex() if complex_bounds else None)
    if isinstance(steps, (float, bool)):  # torch's argument parser: a fractional count would be truncated silently
        raise TypeError(f"linspace(): argument 'steps' must be int, not {type(steps).__name__}")
    if steps < 0:
        raise RuntimeError("linspace: number of steps must be non-negative")
    if complex_bounds and dt.category != _dtype.COMPLEX:
        raise RuntimeError(f"linspace(): complex bounds {start!r}, {end!r} can't be safely cast to passed dtype {dt}")
    if dt.category == _dtype.COMPLEX:  # real and imaginary parts spaced independently, as ATen's complex kernel
        start, end = complex(start), complex(end)
        re = linspace(start.real, end.real, steps, dtype=dt.to_real(), device=device)._data
        im = linspace(start.imag, end.imag, steps, dtype=dt.to_real(), device=device)._data
        t = Tensor._make((re + 1j * im).astype(dt.np))
    else:
        t = _real_linspace(xp, start, end, steps, dt)
    if requires_grad:
        t.requires_grad_(True)
    return noted("linspace", t, given, dtype=dtype, device=device, requires_grad=requires_grad) if WATCHERS else t


def _real_linspace(xp, start, end, steps, dt):
    start, end = _checked_bounds("linspace", start, end, dt, steps)
    if dt.category <= _dtype.INT:  # integer ranges start from the truncated bounds, as in PyTorch
        start, end = math.trunc(start), math.trunc(end)
    # PyTorch fills the second half backwards from ``end`` so the last value is exact.
    half = steps // 2 if steps > 1 else 1  # a single step is ``start``
    if dt.category <= _dtype.INT:  # ATen steps integer ranges in double (fused multiply-adds), then truncates
        step = (end - start) / (steps - 1) if steps > 1 else 0.0
        idx = xp.arange(steps, dtype=np.float64)
        first = idx < half
        vals = xp.trunc(_fma(xp, xp.where(first, step, -step), xp.where(first, idx, steps - 1 - idx),
                             xp.where(first, float(start), float(end)), np.float64))
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
    return Tensor._make(xp.asarray(vals).astype(dt.np, copy=False))


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    start, end = _number(start), _number(end)
    complex_bounds = isinstance(start, complex) or isinstance(end, complex)
    dt = _resolve(dtype, _dtype.default_complex() if complex_bounds else None)
    wide = _dtype.complex128 if dt.category == _dtype.COMPLEX else _dtype.float64
    if steps == 1 and not complex_bounds:  # ATen fills base ** start, computed in double
        value = _dtype.checked_scalar(float(base) ** start, dt)
        out = Tensor._make(_xp_for(device)[0].full((1,), value, dtype=dt.np))
        return out.requires_grad_(True) if requires_grad else out
    if not complex_bounds:  # integer exponents start from the truncated bounds, as in PyTorch
        start, end = _checked_bounds("logspace", start, end, dt, steps)
    if dt.category <= _dtype.INT and steps > 1:
        # ATen's integer kernel steps the exponents in double without linspace's fused multiply-adds
        xp = _xp_for(device)[0]
        step, idx = (end - start) / (steps - 1), xp.arange(steps, dtype=np.float64)
        exps = xp.where(idx < steps // 2, start + step * idx, end - step * (steps - 1 - idx))
    else:  # exponents in double precision; complex bounds with a real dtype go to linspace's error
        exps = linspace(start, end, steps, dtype=dt if complex_bounds and wide is _dtype.float64 else wide,
                        device=device)._data
    out = Tensor._make((base ** exps).astype(dt.np))
    return out.requires_grad_(True) if requires_grad else out
