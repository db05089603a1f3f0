"""Special-function primitives (log-gamma, digamma, polygamma, Bessel I0/I1, the regularized incomplete gamma
functions, gcd/lcm, nextafter): one row each.

Kernels come from ``scipy.special`` on the CPU and ``cupyx.scipy.special`` on CUDA; backward rules are written in
jitorch ops, so each derivative is itself differentiable (digamma' is polygamma(1), polygamma(n)' is polygamma(n+1)).

>>> import jitorch
>>> x = jitorch.tensor([0.5, 3.0], requires_grad=True)
>>> jitorch.lgamma(x).backward(jitorch.ones(2))
>>> x.grad
tensor([-1.9635,  0.9228])
"""
from __future__ import annotations

import numpy as np

from ..runtime import special_module
from .special_bessel_i import bessel_i
from .special_trigamma import trigamma
from .table import NOT_DIFFERENTIABLE, Opaque, defop


def _scipy(name):
    # scipy.special has no half-precision loops: compute in float32 and cast back to the input's dtype.
    def kernel(xp, a):
        wide = a.astype(np.float32) if a.dtype.itemsize < 4 else a
        return getattr(special_module(xp), name)(wide).astype(a.dtype, copy=False)
    return kernel


def _polygamma_kernel(xp, a, n=0):
    if n == 1:  # ATen's own formula (SciPy's goes through the Hurwitz zeta, 20 times slower)
        return trigamma(xp, a)
    wide = a.astype(np.float32) if a.dtype.itemsize < 4 else a
    out = special_module(xp).polygamma(n, wide).astype(a.dtype, copy=False)
    # torch's value at +inf, where SciPy's differs: for n >= 2 (zeta(n + 1, x) times n!) polygamma(n, inf) is nan,
    # not 0.
    if n >= 2:
        out = xp.where(a == np.inf, np.nan, out).astype(a.dtype, copy=False)
    return out


def _lgamma_kernel(xp, a):
    # log|Gamma| grows without bound towards -inf between its poles: torch's lgamma(-inf) is inf, SciPy's -inf.
    return xp.where(a == -np.inf, np.inf, _scipy("gammaln")(xp, a)).astype(a.dtype, copy=False)


def _apply(op, *args, **attrs):
    from .._dispatch import apply  # the dispatcher imports the op table, so it is imported at call time

    return apply(op, *args, **attrs)


def _i1_backward(ctx, g):
    # I1'(x) = I0(x) - I1(x) / x, whose limit at 0 is 1/2.
    x = ctx.inputs[0]
    safe = x.where(x != 0, 1.0)
    return g * (_apply(I0, x) - ctx.out / safe).where(x != 0, 0.5)


# The fusion column is Opaque: the code generator has no polynomial expansions for these functions, so a fused group
# ends at them and they run as library kernels.
_LIB = Opaque("special function from scipy.special / cupyx.scipy.special")

LGAMMA = defop("lgamma", _lgamma_kernel, lambda ctx, g: g * _apply(DIGAMMA, ctx.inputs[0]), _LIB,
               promotion="float", saves="inputs")
DIGAMMA = defop("digamma", _scipy("digamma"), lambda ctx, g: g * _apply(POLYGAMMA, ctx.inputs[0], n=1), _LIB,
                promotion="float", saves="inputs")
POLYGAMMA = defop("polygamma", _polygamma_kernel,
                  lambda ctx, g: g * _apply(POLYGAMMA, ctx.inputs[0], n=ctx.attrs["n"] + 1), _LIB,
                  promotion="float", saves="inputs")
I0 = defop("i0", lambda xp, a: bessel_i(xp, "i0", a), lambda ctx, g: g * _apply(I1, ctx.inputs[0]), _LIB,
           promotion="float", saves="inputs")
I1 = defop("i1", lambda xp, a: bessel_i(xp, "i1", a), _i1_backward, _LIB, promotion="float", saves="both")
# erfcx and ndtri from scipy.special (cupyx's on the GPU): the composites exp(x^2) * erfc(x) and
# sqrt(2) * erfinv(2p - 1) overflowed to nan from x = 20 (float32) and lost the tail below p = 1e-8 (-inf).
ERFCX = defop("erfcx", _scipy("erfcx"),
              lambda ctx, g: g * (2 * ctx.inputs[0] * ctx.out - 2 / np.sqrt(np.pi)), _LIB, promotion="float",
              saves="both")
NDTRI = defop("ndtri", _scipy("ndtri"), lambda ctx, g: g * np.sqrt(2 * np.pi) * (ctx.out * ctx.out / 2).exp(), _LIB,
              promotion="float", saves="outputs")
GCD = defop("gcd", lambda xp, a, b: xp.gcd(a, b), NOT_DIFFERENTIABLE, _LIB, promotion="integral")
LCM = defop("lcm", lambda xp, a, b: xp.lcm(a, b), NOT_DIFFERENTIABLE, _LIB, promotion="integral")


def _nextafter_kernel(xp, a, b):
    if a.dtype.kind in "biuc":  # bfloat16 has kind "V": test for the integer (and complex) kinds
        from .pointwise import _not_implemented

        raise _not_implemented("nextafter_cpu", a)
    return xp.nextafter(a, b)


def _nextafter_backward(ctx, g):
    # torch's: the identity to input (the result is within one ulp of it) except where the result is other, none
    # to other
    from .. import where

    a, b = ctx.inputs
    return where(a != b, g, 0.0), None


NEXTAFTER = defop("nextafter", _nextafter_kernel, _nextafter_backward, Opaque("libm nextafter"), promotion="promote",
                  saves="inputs", meta=True)


def _gammainc_kernel(name, torch_name):
    def kernel(xp, a, x):
        if a.dtype.kind in "biu":  # ATen has no integer loop (bfloat16's kind is "V")
            from .pointwise import _not_implemented

            raise _not_implemented(f"{torch_name}_cpu", a)
        wide = a.dtype.itemsize < 4
        out = getattr(special_module(xp), name)(a.astype(np.float32) if wide else a,
                                                x.astype(np.float32) if wide else x)
        return out.astype(a.dtype, copy=False)
    return kernel


def _gammainc_backward(sign, name):
    def backward(ctx, g):
        # d/dx P(a, x) = x^(a-1) e^(-x) / Gamma(a) (and minus that for Q); ATen has no derivative in a.
        a, x = ctx.inputs
        if ctx.needs_grad(0):
            raise NotImplementedError(f"the derivative for '{name}: input' is not implemented.")
        density = ((a - 1) * x.log() - x - _apply(LGAMMA, a)).exp()
        return None, g * density * sign
    return backward


GAMMAINC = defop("igamma", _gammainc_kernel("gammainc", "igamma"), _gammainc_backward(1, "igamma"), _LIB,
                 promotion="promote", saves="inputs")
GAMMAINCC = defop("igammac", _gammainc_kernel("gammaincc", "igammac"), _gammainc_backward(-1, "igammac"), _LIB,
                  promotion="promote", saves="inputs")
