"""``logaddexp`` and ``logaddexp2`` as rows: the value as torch computes it (``max + log1p(exp(-|a - b|))``), the
gradient as torch's formula (``g / (1 + exp(b - a))`` for ``a``), written in jitorch ops.

Differentiating the value's composite instead gives the right first derivative but a zero second derivative where
``a == b`` (the kink of ``|a - b|`` and of ``max`` cancel in the first derivative only): a Hessian of a softplus
written ``logaddexp(x, 0)`` was 0 at x = 0 instead of 1/4.

>>> import jitorch
>>> x = jitorch.tensor([0.0, 1.0], dtype=jitorch.float64, requires_grad=True)
>>> (g,) = jitorch.autograd.grad(logaddexp(x, 0.0).sum(), x, create_graph=True)
>>> jitorch.autograd.grad(g.sum(), x)[0]
tensor([0.2500, 0.1966], dtype=jitorch.float64)
"""
from __future__ import annotations

import math

import numpy as np

from .._dispatch import apply
from .table import Opaque, defop

__all__ = ["logaddexp", "LOGADDEXP", "LOGADDEXP2"]


def _kernel(base2):
    def kernel(xp, a, b):
        dt = np.result_type(a, b)
        a, b = xp.asarray(a, dtype=dt), xp.asarray(b, dtype=dt)
        with np.errstate(invalid="ignore"):
            tail = -xp.abs(a - b)
            tail = xp.log1p(xp.exp2(tail)) * dt.type(1 / math.log(2)) if base2 else xp.log1p(xp.exp(tail))
            # inf - inf is nan where both are the same infinity: the result is that infinity
            return xp.where(xp.isinf(a) & (a == b), a, xp.maximum(a, b) + tail).astype(dt, copy=False)
    return kernel


def _backward(base2):
    def backward(ctx, g):
        a, b = ctx.inputs
        grow = (lambda t: t.exp2()) if base2 else (lambda t: t.exp())
        ga = g / (1 + grow(b - a)) if ctx.needs_grad(0) else None
        gb = g / (1 + grow(a - b)) if ctx.needs_grad(1) else None
        return ga, gb
    return backward


LOGADDEXP = defop("logaddexp", _kernel(False), _backward(False), Opaque("log1p has no fused primitive"),
                  promotion="float", saves="inputs", meta=True, grad_name="LogaddexpBackward0")
LOGADDEXP2 = defop("logaddexp2", _kernel(True), _backward(True), Opaque("log1p has no fused primitive"),
                   promotion="float", saves="inputs", meta=True, grad_name="Logaddexp2Backward0")


def logaddexp(a, b, base2=False):
    return apply(LOGADDEXP2 if base2 else LOGADDEXP, a, b)
