"""The ``var`` row: a two-pass variance around a float32 shift, with float64 accumulators as ATen's CPU variance,
and its backward (which the ``std`` row ends in too, `std_row`).

Split from ``reduction.py`` (which re-exports ``VAR``).

>>> import numpy as np
>>> float(_var_kernel(np, np.array([1.0, 2.0, 4.0], np.float32), (0,), False, 1))
2.3333334922790527
"""
from __future__ import annotations

import math

import numpy as np

from .cascade_sum import NAIVE_ROWS, cascade_sum
from .native_sum import MIN_SIZE as SUM_MIN_SIZE
from .reduction import _keep, _sum_kernel, defop
from .table import Opaque

__all__ = ["VAR", "var_backward_of"]


def _var_kernel(xp, a, dims, keepdim, correction):
    """Two passes around a float32 shift ``m``: ``(S2 - S1**2 / n) / (n - c)`` with ``S1 = sum(a - m)`` and
    ``S2 = sum((a - m)**2)`` accumulated in float64, as ATen's CPU variance (float64 Welford or two-pass) is. The
    shift's own error (m off by 1e-4 near 1000) would add (m - mean)**2 to every square: S1 takes it back out, and its
    float32 sum is accurate enough for that. A float32 sum of the squares leaves 1e-7 to 2e-6 where torch has 4e-8."""
    n = 1
    for d in dims:
        n *= a.shape[d]
    if type(a) is np.ndarray and a.size < SUM_MIN_SIZE and a.dtype in _REAL_FLOATS and a.flags.c_contiguous and \
            0 < n and n > correction and dims == tuple(range(a.ndim - len(dims), a.ndim)):
        # A small row-major array over trailing dims: each sum below is NumPy's, called directly (the sums' layout
        # checks and the error state were a third of a 32x32 var), and a positive divisor needs no error state.
        m = (np.add.reduce(a, axis=dims, dtype=a.dtype, keepdims=True) / n).astype(a.dtype, copy=False)
        d = np.subtract(a, m, out=np.empty_like(a))
        s1 = np.add.reduce(d, axis=dims, dtype=a.dtype, keepdims=keepdim).astype(np.float64)
        np.multiply(d, d, out=d)
        s2 = np.add.reduce(d, axis=dims, dtype=np.float64, keepdims=keepdim)
        out = (s2 - s1 * s1 / n) / (n - correction)
        return np.maximum(out, 0).astype(a.dtype, copy=False) if type(out) is not np.float64 else \
            a.dtype.type(out if out > 0 or out != out else 0)
    m = (_sum_kernel(xp, a, dims, True, a.dtype) / max(n, 1)).astype(a.dtype, copy=False)
    d = np.subtract(a, m, out=np.empty_like(a))  # (an array even for a 0-d input: squared in place below)
    s1 = _sum_kernel(xp, d, dims, keepdim, a.dtype).astype(np.float64)
    np.multiply(d, d, out=d)
    s2 = _sum_f64(d, dims, keepdim) if a.dtype == np.float32 else _sum_kernel(xp, d, dims, keepdim, a.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):  # no degrees of freedom: inf or nan, as torch (it warns)
        out = (s2 - s1 * s1 / n) / max(n - correction, 0) if n else s2 * np.nan
    # Rounding may leave a constant's variance at -1e-20: clamped at 0 (NaN kept). A whole-array variance is a NumPy
    # scalar, clamped and cast in Python: the two ufunc calls took a tenth of a small ``var()``.
    if type(out) is np.float64:
        return a.dtype.type(out if out > 0 or out != out else 0)
    return np.maximum(out, 0).astype(a.dtype, copy=False)


_REAL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _sum_f64(a, dims, keepdim, block=256):
    """A float32 array's sum in float64. Over leading axes, blocks of 32 rows are summed in float32 and only their
    sums cast (about a float32 sum's cost; error 2e-8 over 4096 rows of squares). Over trailing axes, float32 blocks
    of ``block`` elements (NumPy's pairwise leaves) are summed in float64 where there are many: a row of a few such
    blocks keeps their 1e-7 errors, so shorter rows take NumPy's casting sum (twice a float32 sum's time)."""
    f64 = np.dtype(np.float64)
    k = a.ndim - len(dims)
    if a.flags.c_contiguous and dims and dims == tuple(range(k, a.ndim)):
        length = math.prod(a.shape[k:])
        if length % block or length < block * block:
            return np.add.reduce(a, axis=dims, dtype=f64, keepdims=keepdim)
        part = np.add.reduce(a.reshape(a.shape[:k] + (length // block, block)), axis=-1)
        out = np.add.reduce(part, axis=-1, dtype=f64)
        return out.reshape(a.shape[:k] + (1,) * len(dims)) if keepdim else out
    out = cascade_sum(a, dims, keepdim, f64, first=a.dtype) if a.size > NAIVE_ROWS else None
    return out if out is not None else np.add.reduce(a, axis=dims, dtype=f64, keepdims=keepdim)


def _var_backward(ctx, g):
    return var_backward_of(ctx.inputs[0], g, ctx.attrs["dims"], ctx.attrs["keepdim"], ctx.attrs["correction"])


def var_backward_of(x, g, dims, keepdim, c):
    """ATen's var_backward: 2 / (n - c) * g * (x - mean), n - c unclamped (the forward clamps it at 0); the std row's
    backward ends in it too (`std_row`)."""
    n = 1
    for d in dims:
        n *= x.shape[d]
    scale = 2 / (n - c) if n != c else float("inf")
    return _keep(g, x.shape, dims, keepdim) * (x - x.mean(dims, keepdim=True)) * scale


# Real float CPU arrays only; jitorch.var keeps its composite for the others and while compiling (which fuses it).
VAR = defop("var", _var_kernel, _var_backward, Opaque("float64 accumulators"), saves="inputs")
