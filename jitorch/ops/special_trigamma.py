"""Trigamma (``polygamma(1, x)``, digamma's derivative) as ATen computes it: reflection below 1/2, six recurrence
steps and a short asymptotic series, in the input's dtype.

SciPy has no trigamma of its own: ``scipy.special.polygamma(1, x)`` goes through the Hurwitz zeta, about 200 ns an
element (torch: about 10). ATen's formula has no data-dependent loop, so it is one `special_formula` formula: on CPU
float32/float64 NumPy arrays one generated kernel, elsewhere (CuPy, half types through float32) the same steps in
array-module ops. Both round step by
step as ATen's scalar code does, so values agree with torch's to the last bits for x >= 1/2 and within a few ulp
below, where the reflection's ``pi^2 / sin^2(pi x)`` cancels against the recurrence. Like ATen, negative integers
give large finite values (``sin(pi x)`` is not exactly 0 there), 0 gives inf and -inf gives nan.

>>> import numpy as np
>>> trigamma(np, np.array([0.5, 1.0, -0.5], dtype=np.float64)).round(6).tolist()
[4.934802, 1.644934, 8.934802]
"""
from __future__ import annotations

import math

import numpy as np

from .special_formula import evaluate

__all__ = ["trigamma"]


def _formula(m, x):
    """ATen's trigamma steps in ``m``'s dtype (numbers are constants of it: float32 rounds each step in float)."""
    pi = m.const(math.pi)
    reflect = x < 0.5
    s = m.sin(pi * x)
    result = m.where(reflect, -(pi * pi) / (s * s), 0.0)
    y = m.where(reflect, 1.0 - x, x)
    for _ in range(6):
        result = result + 1.0 / (y * y)
        y = y + 1.0
    ixx = 1.0 / (y * y)
    result = result + (1.0 + 1.0 / (2.0 * y) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / y
    return m.where(reflect, -result, result)


def trigamma(xp, a, native=True):
    """``polygamma(1, a)`` as ATen's; half types computed in float32 and rounded once. ``native=False`` runs the
    array-module steps on NumPy too (what CuPy arrays run)."""
    wide = a.astype(np.float32) if a.dtype.itemsize < 4 else a
    return evaluate("trigamma", _formula, xp, wide, native=native).astype(a.dtype, copy=False)
