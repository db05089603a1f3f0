"""Bessel, Airy, scaled-Bessel, log-ndtr and Hurwitz zeta rows of ``torch.special`` (one row per function).

Kernels come from ``scipy.special`` / ``cupyx.scipy.special`` (both Cephes ports, as ATen's), with ATen's values where
the libraries disagree at the edges. ATen gives most of these functions no derivative (their results do not require
grad): those rows are ``NOT_DIFFERENTIABLE``. ``i0e``, ``i1e``, ``log_ndtr`` and ``zeta`` (in its second argument)
have backward rules written in jitorch ops, as ATen's.

>>> import jitorch
>>> jitorch.special.bessel_j0(jitorch.tensor([0.0, 1.0]))
tensor([1.0000, 0.7652])
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import is_cupy, special_module
from .special_bessel_i import bessel_i
from .table import NOT_DIFFERENTIABLE, Opaque, defop

_LIB = Opaque("special function from scipy.special / cupyx.scipy.special")


def _narrow_float_error(torch_name, a):
    from .pointwise import _not_implemented

    return _not_implemented(f"{torch_name}_cpu", a)


def _float_only(torch_name, compute):
    """A kernel for ATen's float/double-only loops: half and bfloat16 raise ATen's dtype error naming the kernel."""
    def kernel(xp, *arrays):
        if arrays[0].dtype.itemsize < 4:
            raise _narrow_float_error(torch_name, arrays[0])
        with np.errstate(all="ignore"):
            return compute(xp, *arrays).astype(arrays[0].dtype, copy=False)
    return kernel


def _lib(name):
    return lambda xp, a: getattr(special_module(xp), name)(a)


def _airy_ai(xp, a):
    # cupyx.scipy.special has no airy: on CuPy arrays the values are computed on the host (rare in training loops).
    import scipy.special

    host = xp.asnumpy(a) if is_cupy(xp) else a
    out = scipy.special.airy(host)[0]
    # Ai decays like exp(-x^1.5): ATen's is 0 for every large finite x, where Cephes (SciPy) gives nan, and nan at
    # +inf itself.
    out = np.where(np.isfinite(host) & (host > 0) & np.isnan(out), 0.0, out)
    out = np.where(host == np.inf, np.nan, out)
    return xp.asarray(out) if is_cupy(xp) else out


def _bessel_y(name):
    def compute(xp, a):
        out = getattr(special_module(xp), name)(a)
        # ATen: -inf at 0, nan for negative x (Cephes gives -inf at 0 too, and nan below).
        return xp.where(a == 0, -np.inf, xp.where(a < 0, np.nan, out))
    return compute


def _bessel_k(name, at_zero=np.inf):
    def compute(xp, a):
        out = getattr(special_module(xp), name)(a)
        return xp.where(a == 0, at_zero, xp.where(a < 0, np.nan, out))
    return compute


def _spherical_j0(xp, a):
    # ATen's: a Taylor series for |x| < 0.5 (sin(x)/x loses digits there), sin(x)/x beyond, 0 at +-inf.
    x2 = a * a
    series = 1.0 + x2 * (-1.0 / 6.0 + x2 * (1.0 / 120.0 + x2 * (-1.0 / 5040.0 + x2 * (
        1.0 / 362880.0 + x2 * (-1.0 / 39916800.0 + x2 * (1.0 / 6227020800.0))))))
    far = xp.sin(a) / xp.where(a == 0, 1.0, a)
    out = xp.where(xp.abs(a) < 0.5, series, far)
    return xp.where(xp.isinf(a), 0.0, out).astype(a.dtype, copy=False)


def _rows():
    """(row name as ATen's kernel, compute) for the non-differentiable one-argument functions."""
    return (("airy_ai", _airy_ai), ("bessel_j0", _lib("j0")), ("bessel_j1", _lib("j1")),
            ("bessel_y0", _bessel_y("y0")), ("bessel_y1", _bessel_y("y1")), ("modified_bessel_i0", _lib("i0")),
            ("modified_bessel_i1", _lib("i1")), ("modified_bessel_k0", _bessel_k("k0")),
            ("modified_bessel_k1", _bessel_k("k1")), ("scaled_modified_bessel_k0", _bessel_k("k0e")),
            ("scaled_modified_bessel_k1", _bessel_k("k1e")), ("spherical_bessel_j0", _spherical_j0))


# The value of each: {name: OpDef}, as ``special_bessel.ROWS["bessel_j0"]``.
ROWS = {name: defop(name, _float_only(name, compute), NOT_DIFFERENTIABLE, _LIB, promotion="float")
        for name, compute in _rows()}


def _apply(op, *args, **attrs):
    from .._dispatch import apply  # the dispatcher imports the op table, so it is imported at call time

    return apply(op, *args, **attrs)


def _i0e_backward(ctx, g):
    # d/dx [exp(-|x|) I0(x)] = i1e(x) - sign(x) i0e(x).
    x = ctx.inputs[0]
    return g * (_apply(I1E, x) - x.sign() * ctx.out)


def _i1e_backward(ctx, g):
    # d/dx [exp(-|x|) I1(x)] = i0e(x) - i1e(x) (sign(x) + 1/x), whose limit at 0 is 1/2.
    x = ctx.inputs[0]
    safe = x.where(x != 0, 1.0)
    return g * (_apply(I0E, x) - ctx.out * (x.sign() + safe.reciprocal())).where(x != 0, 0.5)


I0E = defop("special_i0e", lambda xp, a: bessel_i(xp, "i0e", a), _i0e_backward, _LIB, promotion="float",
            saves="both")
I1E = defop("special_i1e", lambda xp, a: bessel_i(xp, "i1e", a), _i1e_backward, _LIB, promotion="float",
            saves="both")


def _log_ndtr_backward(ctx, g):
    # The normal density over its cdf, exp(-x^2/2 - log_ndtr(x)) / sqrt(2 pi): finite far in the lower tail.
    x = ctx.inputs[0]
    return g * ((x * x / 2 + ctx.out).neg().exp() * (1 / math.sqrt(2 * math.pi)))


LOG_NDTR = defop("special_log_ndtr", _float_only("log_ndtr", _lib("log_ndtr")), _log_ndtr_backward, _LIB,
                 promotion="float", saves="both")


def _zeta_compute(xp, x, q):
    # ATen's zeta(x, +inf) is nan (its series meets inf/inf; x == 1, the pole, stays inf), SciPy's the limit 0.
    return xp.where((q == np.inf) & (x != 1), np.nan, special_module(xp).zeta(x, q))


def _zeta_backward(ctx, g):
    # ATen: d/dq zeta(x, q) = -x zeta(x + 1, q); no derivative in x.
    x, q = ctx.inputs
    if ctx.needs_grad(0):
        raise NotImplementedError("the derivative for 'zeta' is not implemented.")
    return None, g * -x * _apply(ZETA, x + 1, q)


ZETA = defop("special_zeta", _float_only("zeta", _zeta_compute), _zeta_backward, _LIB, promotion="float",
             saves="inputs", meta=True)
