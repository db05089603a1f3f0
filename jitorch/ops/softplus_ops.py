"""Softplus and Mish as rows with their backward rows, as ATen's ``softplus``/``softplus_backward`` and
``mish``/``mish_backward``.

As composites (``log1p(exp(clamp(x * beta)))`` under a ``where``; ``x * tanh(softplus(x))``) each direction cost
five to ten NumPy passes and as many graph nodes: softplus forward and backward took 2.6x torch's time on 2^20
float32. As rows each direction is one expression, run on eager CPU float32 as one generated kernel
(`native_eager.pointwise_constants`: ``beta``/``threshold`` its run-time arguments, a new pair costs no compile) and
as a few NumPy passes otherwise.

>>> import jitorch
>>> softplus(jitorch.tensor([-1.0, 0.0, 30.0]), 1.0, 20.0)
tensor([ 0.3133,  0.6931, 30.0000])
>>> mish(jitorch.tensor([-1.0, 0.0, 2.0]))
tensor([-0.3034,  0.0000,  1.9440])
"""
from __future__ import annotations

import numpy as np

from .._dispatch import apply
from .._grad_state import GradState
from . import native_eager
from .activation_ops import _float_input
from .pointwise_common import _widened
from .table import Pointwise, defop

__all__ = ["softplus", "softplus_backward", "mish", "mish_backward"]


def _log1p(u):
    """``log1p(u)`` for ``u >= 0`` from ``log`` (the expressions have no ``log1p``): Goldberg's correction
    ``log(w) * u / (w - 1)`` with ``w = 1 + u`` is within a few ulps, ``u`` itself where ``w`` rounds to 1, and
    ``log(w)`` where ``w - 1`` is ``u`` (so ``u = inf`` gives inf, not inf / inf)."""
    w = f"(1 + {u})"
    return f"({w} == 1 ? {u} : ({w} == {u} ? log({w}) : log({w}) * ({u} / ({w} - 1))))"


# ATen's formulas: softplus is ``x`` where ``x * beta > threshold``, else ``log1p(exp(x * beta)) / beta``; its
# gradient ``g`` there, else ``g * z / (z + 1)`` with ``z = exp(x * beta)`` (inf / inf = nan past threshold 88, as
# ATen's).
_SOFTPLUS = f"{{0}} * {{1}} > {{2}} ? {{0}} : {_log1p('exp({0} * {1})')} / {{1}}"
_SOFTPLUS_GRAD = "{1} * {2} > {3} ? {0} : {0} * exp({1} * {2}) / (exp({1} * {2}) + 1)"
# Mish from one exp: with e = exp(x) and n = e (e + 2), tanh(log1p(e)) = n / (n + 2), 1 - tanh^2 = 4 (n + 1) /
# (n + 2)^2 (no cancellation where tanh rounds to 1) and sigmoid(x) = e / (e + 1). From x > 20 tanh(softplus(x)) is 1
# in float32 and float64 (ATen's value: x, gradient g; nan at x = inf, from inf * 0), and n would overflow.
_N = "(exp({0}) * (exp({0}) + 2))"
_MISH = f"{{0}} > 20 ? {{0}} : {{0}} * {_N} / ({_N} + 2)"
_NX = _N.replace("{0}", "{1}")
_MISH_GRAD = (f"{{1}} > 20 ? {{0}} * (1 + ({{1}} - {{1}})) : "
              f"{{0}} * ({_NX} / ({_NX} + 2) + {{1}} * (exp({{1}}) / (exp({{1}}) + 1)) * "
              f"(4 * ({_NX} + 1) / (({_NX} + 2) * ({_NX} + 2))))")

def _native(row, arrays, constants=()):
    """The row's expression with ``constants`` (as doubles, rounded to float32 in the kernel) as one native kernel
    over contiguous float32 arrays of one shape, or None (`native_eager.pointwise_constants`' cases). At every size:
    the NumPy code is five to ten passes (softplus on 16 elements: 6 us, the kernel call 1.7), and every size gets
    one answer."""
    if not constants:
        return native_eager.pointwise(row, *arrays, min_size=1)
    if getattr(arrays[0], "dtype", None) != np.float32:  # (before reading the constants: they may be arrays then)
        return None
    return native_eager.pointwise_constants(row, arrays, tuple(map(float, constants)), min_size=1)


def _softplus_numpy(x, beta, threshold):
    s = x * beta
    with np.errstate(over="ignore"):
        out = np.log1p(np.exp(s)) / beta
    return np.where(s > threshold, x, out)


def _softplus_grad_numpy(g, x, beta, threshold):
    s = x * beta
    with np.errstate(over="ignore", invalid="ignore"):
        z = np.exp(s)
        out = g * z / (z + 1)
    return np.where(s > threshold, g, out)


def _mish_numpy(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return x * np.tanh(np.log1p(np.exp(x)))


def _mish_grad_numpy(g, x):
    with np.errstate(over="ignore", invalid="ignore"):
        sig = 1 / (1 + np.exp(-x))
        t = np.tanh(np.log1p(np.exp(x)))
        return g * (t + x * sig * (1 - t * t))


def _softplus_kernel(xp, x, beta, threshold):
    _float_input("softplus", x)
    out = _native(SOFTPLUS, (x,), (beta, threshold))
    return _widened(lambda a: _softplus_numpy(a, beta, threshold), x) if out is None else out


def _softplus_grad_kernel(xp, g, x, beta, threshold):
    out = _native(SOFTPLUS_BACKWARD, (g, x), (beta, threshold))
    return _widened(lambda a, b: _softplus_grad_numpy(a, b, beta, threshold), g, x) if out is None else out


def _mish_kernel(xp, x):
    _float_input("mish", x)
    out = _native(MISH, (x,))
    return _widened(_mish_numpy, x) if out is None else out


def _mish_grad_kernel(xp, g, x):
    out = _native(MISH_BACKWARD, (g, x))
    return _widened(_mish_grad_numpy, g, x) if out is None else out


def _softplus_backward(ctx, g):
    x, beta, threshold = ctx.inputs
    return softplus_backward(g, x, beta, threshold), None, None


def _softplus_double_backward(ctx, gg):
    # ATen's softplus_double_backward: sigmoid's derivative at x * beta, times beta, where x * beta < threshold.
    g, x, beta, threshold = ctx.inputs
    dg = softplus_backward(gg, x, beta, threshold) if ctx.needs_grad(0) else None
    dx = None
    if ctx.needs_grad(1):
        s = x * beta
        sig = s.sigmoid()
        dx = (gg * g * sig * (1 - sig) * beta).where(s < threshold, 0.0)
    return dg, dx, None, None


def _mish_differentiable_grad(g, x):
    """ATen's ``infinitely_differentiable_mish_backward``: the gradient as ops, so it has a graph of its own."""
    t = x.exp().log1p().tanh()
    return g * (t + x * x.sigmoid() * (1 - t * t))


def _mish_backward(ctx, g):
    # create_graph: the composite formula, as torch's derivatives.yaml picks under grad mode
    return _mish_differentiable_grad(g, ctx.inputs[0]) if GradState.enabled else mish_backward(g, ctx.inputs[0])


def _mish_grad_backward(ctx, gg):
    g, x = ctx.inputs
    gx = x.detach().requires_grad_(True)
    import jitorch  # the graph of the composite gradient, differentiated (double backward of the row itself)

    with jitorch.enable_grad():
        first = _mish_differentiable_grad(g.detach(), gx)
        (dx,) = jitorch.autograd.grad(first, gx, gg, create_graph=GradState.enabled)
    return (mish_backward(gg, x) if ctx.needs_grad(0) else None), (dx if ctx.needs_grad(1) else None)


SOFTPLUS = defop("softplus", _softplus_kernel, _softplus_backward, Pointwise(_SOFTPLUS), promotion="keep",
                 saves="inputs", grad_name="SoftplusBackward0")
SOFTPLUS_BACKWARD = defop("softplus_backward", _softplus_grad_kernel, _softplus_double_backward,
                          Pointwise(_SOFTPLUS_GRAD), promotion="keep", saves="inputs", meta=True,
                          grad_name="SoftplusBackwardBackward0")
MISH = defop("mish", _mish_kernel, _mish_backward, Pointwise(_MISH), promotion="keep", saves="inputs",
             grad_name="MishBackward0")
MISH_BACKWARD = defop("mish_backward", _mish_grad_kernel, _mish_grad_backward, Pointwise(_MISH_GRAD),
                      promotion="keep", saves="inputs", meta=True, grad_name="MishBackwardBackward0")


def softplus(x, beta, threshold):
    """``log1p(exp(x * beta)) / beta``, and ``x`` where ``x * beta > threshold`` (``F.softplus``)."""
    return apply(SOFTPLUS, x, beta, threshold)


def softplus_backward(g, x, beta, threshold):
    return apply(SOFTPLUS_BACKWARD, g, x, beta, threshold)


def mish(x):
    """``x * tanh(softplus(x))`` (``F.mish``)."""
    return apply(MISH, x)


def mish_backward(g, x):
    return apply(MISH_BACKWARD, g, x)
