"""The orthogonal polynomials of ``torch.special`` (Chebyshev T/U/V/W and their shifted forms, Hermite H/He, Laguerre
L, Legendre P): one row each, ``(x, n)``, not differentiable (as ATen's).

Kernels follow ATen's ``Math.h`` branch for branch so values agree: the degree is ``n`` truncated toward zero (nan
and infinite degrees count as negative), a negative degree gives 0, the closed values at the interval's ends, a
trigonometric form for high degrees inside the interval (Chebyshev families), and otherwise the three-term recurrence
run in the input's dtype. The recurrence is vectorized over elements: step ``j`` updates every element of degree at
least ``j`` and stops once no element still needs it.

>>> import jitorch
>>> jitorch.special.chebyshev_polynomial_t(jitorch.tensor([0.5, 2.0]), 3)
tensor([-1., 26.])
"""
from __future__ import annotations

import numpy as np

from .table import NOT_DIFFERENTIABLE, Opaque, defop


def _degree(xp, n):
    """ATen's ``static_cast<int64_t>(n)``: truncation toward zero; nan and +-inf (out of range) become negative."""
    finite = xp.isfinite(n)
    return xp.where(finite, xp.trunc(xp.where(finite, n, -1.0)), -1.0).astype(np.int64)


def _recurrence(xp, k, p0, p1, step, need=None):
    """P_k for each element by ``P_j = step(j, P_{j-2}, P_{j-1})`` from ``P_0 = p0``, ``P_1 = p1``; only the elements
    in ``need`` (the others take a closed form) set how far the loop runs."""
    out = xp.where(k == 0, p0, p1)
    busy = k >= 2 if need is None else (k >= 2) & need
    top = int(k[busy].max()) if bool(busy.any()) else 0
    p, q = p0, p1
    for j in range(2, top + 1):
        r = step(j, p, q)
        out = xp.where(k == j, r, out)
        p, q = q, r
        if j % 64 == 0:
            # ATen stops an element's loop once it is nan: so can this loop once every pending element is.
            pending = busy & (k > j)
            if not bool(pending.any()) or bool(xp.isnan(q[pending]).all()):
                out = xp.where(pending, q, out)
                break
    return out


def _poly_kernel(torch_name, compute):
    def kernel(xp, x, n):
        if x.dtype.itemsize < 4:
            from .pointwise import _not_implemented

            raise _not_implemented(f"{torch_name}_cpu", x)
        x, n = xp.broadcast_arrays(x, n)
        k = _degree(xp, n)
        one = xp.ones_like(x)
        with np.errstate(all="ignore"):
            out = compute(xp, x, k, one)
        return xp.where(k < 0, 0.0, out).astype(x.dtype, copy=False)
    return kernel


def _int(k, dtype):
    return k.astype(dtype)


def _chebyshev(first, trig_min, trig, at_plus_one, at_minus_one, shifted=False):
    """A Chebyshev family: ``P_1 = first(y)``, ``P_j = 2y P_{j-1} - P_{j-2}`` with ``y = x`` or ``2x - 1``
    (shifted, spelled as ATen's); ``trig(y, k)`` for degrees above ``trig_min`` inside the interval; the values at
    ``y = +-1`` (``x = 1, 0`` for the shifted families, tested on ``x`` as ATen does)."""
    def compute(xp, x, k, one):
        if shifted:
            y = x + x - 1.0
            two_y = x + x - 1.0 + (x + x - 1.0)
            plus, minus = x == 1.0, x == 0.0
        else:
            y, two_y = x, x + x
            plus, minus = (xp.abs(x) == 1.0) & (x > 0), (xp.abs(x) == 1.0) & (x < 0)
        inside = (k > trig_min) & (xp.abs(y) < 1.0)
        out = _recurrence(xp, k, one, first(y), lambda j, p, q: two_y * q - p, need=~(inside | plus | minus))
        out = xp.where(inside, trig(xp, y, k), out)
        out = xp.where(minus, at_minus_one(xp, k, x.dtype), out)
        return xp.where(plus, at_plus_one(xp, k, x.dtype), out)
    return compute


def _alternating(value):
    """``value`` for even degrees, its negative for odd ones."""
    return lambda xp, k, dt: xp.where(k % 2 == 0, 1.0, -1.0).astype(dt) * value(xp, k, dt)


def _const(c):
    return lambda xp, k, dt: xp.full(k.shape, c, dtype=dt)


def _n_plus_1(xp, k, dt):
    return _int(k + 1, dt)


def _2n_plus_1(xp, k, dt):
    return _int(k + k + 1, dt)


def _trig_t(xp, y, k):
    return xp.cos(_int(k, y.dtype) * xp.arccos(y))


def _trig_u(xp, y, k):
    theta = xp.arccos(y)
    n1 = _int(k + 1, y.dtype)
    s = xp.sin(theta)
    return xp.where(s != 0.0, xp.sin(n1 * theta) / xp.where(s != 0.0, s, 1.0), n1 * xp.cos(n1 * theta) / y)


def _trig_v(xp, y, k):
    theta = xp.arccos(y)
    value = xp.cos((_int(k, y.dtype) + 0.5) * theta) / xp.cos(theta / 2.0)
    return xp.where(xp.sin(theta / 2.0) != 1.0, value, _alternating(_2n_plus_1)(xp, k, y.dtype))


def _trig_w(at_end):
    def trig(xp, y, k):
        theta = xp.arccos(y)
        value = xp.sin((_int(k, y.dtype) + 0.5) * theta) / xp.sin(theta / 2.0)
        return xp.where(xp.cos(theta / 2.0) != 1.0, value, at_end(xp, y, k))
    return trig


def _w_end(xp, y, k):
    # cos(acos(y)/2) == 1 only at y == 1 (never inside the interval): ATen's fallback, for completeness.
    return xp.where(y > 0, _2n_plus_1(xp, k, y.dtype), _alternating(_const(1.0))(xp, k, y.dtype))


def _shifted_w_end(xp, y, k):
    return _alternating(_const(1.0))(xp, k, y.dtype)


_FAMILIES = {
    "chebyshev_polynomial_t": _chebyshev(lambda y: y, 6, _trig_t, _const(1.0), _alternating(_const(1.0))),
    "chebyshev_polynomial_u": _chebyshev(lambda y: y + y, 8, _trig_u, _n_plus_1, _alternating(_n_plus_1)),
    "chebyshev_polynomial_v": _chebyshev(lambda y: y + y - 1.0, 8, _trig_v, _const(1.0), _alternating(_2n_plus_1)),
    "chebyshev_polynomial_w": _chebyshev(lambda y: y + y + 1.0, 8, _trig_w(_w_end), _2n_plus_1,
                                         _alternating(_const(1.0))),
    "shifted_chebyshev_polynomial_t": _chebyshev(lambda y: y, 6, _trig_t, _const(1.0), _alternating(_const(1.0)),
                                                 shifted=True),
    "shifted_chebyshev_polynomial_u": _chebyshev(lambda y: y + y, 6, _trig_u, _n_plus_1, _alternating(_n_plus_1),
                                                 shifted=True),
    "shifted_chebyshev_polynomial_v": _chebyshev(lambda y: y + y - 1.0, 6, _trig_v, _const(1.0),
                                                 _alternating(_2n_plus_1), shifted=True),
    "shifted_chebyshev_polynomial_w": _chebyshev(lambda y: y + y + 1.0, 4, _trig_w(_shifted_w_end), _2n_plus_1,
                                                 _alternating(_const(1.0)), shifted=True),
}


def _hermite_limit(dtype):
    # ATen returns nan beyond these degrees (the values overflow long before).
    return 128 if dtype == np.float32 else 512


def _hermite_h(xp, x, k, one):
    out = _recurrence(xp, k, one, x + x, lambda j, p, q: (x + x) * q - float(2 * (j - 1)) * p)
    return xp.where(k > _hermite_limit(x.dtype), np.nan, out)


def _hermite_he(xp, x, k, one):
    out = _recurrence(xp, k, one, x, lambda j, p, q: x * q - float(j - 1) * p)
    return xp.where(k > _hermite_limit(x.dtype), np.nan, out)


def _laguerre_l(xp, x, k, one):
    out = _recurrence(xp, k, one, 1.0 - x, lambda j, p, q: ((float(2 * (j - 1)) + (1.0 - x)) * q - float(j - 1) * p)
                      / float(j))
    return xp.where(xp.abs(x) == 0.0, 1.0, out)


def _legendre_p(xp, x, k, one):
    out = _recurrence(xp, k, one, x, lambda j, p, q: (float(2 * j - 1) * x * q - float(j - 1) * p) / float(j))
    ends = xp.where((x > 0) | (k % 2 == 0), 1.0, -1.0)
    return xp.where(xp.abs(x) == 1.0, ends, out)


_FAMILIES.update({"hermite_polynomial_h": _hermite_h, "hermite_polynomial_he": _hermite_he,
                  "laguerre_polynomial_l": _laguerre_l, "legendre_polynomial_p": _legendre_p})

# {torch name: OpDef}. The fusion column is Opaque: a data-dependent loop has no pointwise expression.
ROWS = {name: defop(name, _poly_kernel(name, compute), NOT_DIFFERENTIABLE, Opaque("orthogonal polynomial recurrence"),
                    promotion="float", meta=True)
        for name, compute in _FAMILIES.items()}
