"""GELU and SiLU as rows with their backward rows, as ATen's ``gelu``/``gelu_backward`` and ``silu``/``silu_backward``.

As composites they cost a NumPy pass per primitive: exact GELU's forward and backward took 3.1 ms on 2^19 float32
where torch takes 1.3. As rows, each direction is one expression: the fuser reads it as any pointwise op, and
eager CPU float32 runs it as one generated kernel (`native_eager.pointwise`). Each backward row has its own backward
(written in jitorch ops), so double backward works.

>>> import jitorch
>>> from jitorch.ops.activation_ops import gelu, gelu_backward
>>> gelu(jitorch.tensor([-1.0, 0.0, 2.0]))
tensor([-0.1587,  0.0000,  1.9545])
>>> gelu_backward(jitorch.ones(2), jitorch.tensor([0.0, 1.0]))
tensor([0.5000, 1.0833])
"""
from __future__ import annotations

import math

import numpy as np

from .._dispatch import fast_binary, fast_unary
from ..runtime import special_module
from . import half_gelu, native_eager, pointwise
from .pointwise_common import _widened
from .table import Pointwise, defop

_SQRT1_2 = math.sqrt(0.5)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_BETA = math.sqrt(2 / math.pi)  # the tanh form's sqrt(2/pi)
_KAPPA = 0.044715

# Each string is a row's fusion rule and its eager CPU kernel; the NumPy functions below are the same formulas.
_GELU = f"{{0}} * (0.5 + 0.5 * erf({{0}} * {_SQRT1_2!r}))"
_GELU_GRAD = f"{{0}} * (0.5 + 0.5 * erf({{1}} * {_SQRT1_2!r}) + {{1}} * {_INV_SQRT_2PI!r} * exp(-0.5 * {{1}} * {{1}}))"
# 0.5 x (1 + tanh u) = x sigmoid(2u) = x / (1 + exp(-2u)), u = beta (x + kappa x^3): one exp, one division.
_GELU_TANH = f"{{0}} / (1 + exp({{0}} * ({-2 * _BETA!r} + {-2 * _BETA * _KAPPA!r} * {{0}} * {{0}})))"
# The derivative is s + x s (1 - s) 2u' with s = (1 + tanh u) / 2 = sigmoid(2u): with e = exp(-2|u|) and
# r = 1 / (1 + e), s is r (u >= 0) or e r (u < 0) and s (1 - s) = e r^2 on both sides. One exp and one division
# an element, and no 1 - t^2 (where t rounds near 1 that difference is mostly rounding: torch's kernel loses up to
# 1e-3 relative there). 24 vector operations an element against 50 for the tanh form's own derivative.
_U = f"{{1}} * ({_BETA!r} + {_BETA * _KAPPA!r} * {{1}} * {{1}})"
_E = f"exp(-2 * abs({_U}))"
_R = f"(1 / (1 + {_E}))"
_GELU_TANH_GRAD = (f"{{0}} * (({_U} < 0 ? {_E} * {_R} : {_R}) + {{1}} * {_E} * {_R} * {_R} * "
                   f"({2 * _BETA!r} + {6 * _BETA * _KAPPA!r} * {{1}} * {{1}}))")
_SILU = "{0} * sigmoid({0})"
_SILU_GRAD = "{0} * sigmoid({1}) * (1 + {1} * (1 - sigmoid({1})))"


def _float_input(name, x):
    if x.dtype.kind != "f" and str(x.dtype) != "bfloat16":
        # torch raises NotImplementedError (a RuntimeError) for these dtypes
        raise NotImplementedError(f"{name}: expected a floating-point tensor, got {x.dtype}; convert it with .float() "
                                  "first")


def _native_or(row, numpy_fn, xp, *arrays):
    _float_input(row.name, arrays[0])
    out = native_eager.pointwise(row, *arrays)
    return _widened(numpy_fn, *arrays) if out is None else out


def _cdf(xp, x):
    return 0.5 + 0.5 * special_module(xp).erf(x * _SQRT1_2).astype(x.dtype, copy=False)


def _pdf(xp, x):
    return xp.exp(-0.5 * x * x) * _INV_SQRT_2PI


def _tanh_inner(xp, x):
    return xp.tanh(_BETA * (x + _KAPPA * x * x * x))


def _aten_float16(*arrays):
    # float16 CPU arrays in one row-major layout: ATen's vector loop runs over them in order (half_gelu)
    return all(type(a) is np.ndarray and a.dtype == np.float16 and a.flags.c_contiguous and a.shape == arrays[0].shape
               for a in arrays)


def _gelu_kernel(xp, x):
    if _aten_float16(x):  # ATen's vectorized erf, not a correctly rounded one (half_gelu)
        return half_gelu.gelu_float16(x, lambda a: a * _cdf(xp, a))
    return _native_or(GELU, lambda a: a * _cdf(xp, a), xp, x)


def _gelu_backward_kernel(xp, g, x):
    if _aten_float16(g, x):
        return half_gelu.gelu_backward_float16(g, x, lambda g, a: g * (_cdf(xp, a) + a * _pdf(xp, a)))
    return _native_or(GELU_BACKWARD, lambda g, a: g * (_cdf(xp, a) + a * _pdf(xp, a)), xp, g, x)


def _gelu_tanh_kernel(xp, x):
    return _native_or(GELU_TANH, lambda a: 0.5 * a * (1 + _tanh_inner(xp, a)), xp, x)


def _gelu_tanh_grad(xp, g, a):
    u = a * (_BETA + _BETA * _KAPPA * a * a)
    e = xp.exp(-2 * xp.abs(u))
    r = 1 / (1 + e)
    return g * (xp.where(u < 0, e * r, r) + a * e * r * r * (2 * _BETA + 6 * _BETA * _KAPPA * a * a))


def _gelu_tanh_backward_kernel(xp, g, x):
    return _native_or(GELU_TANH_BACKWARD, lambda g, a: _gelu_tanh_grad(xp, g, a), xp, g, x)


def _silu_kernel(xp, x):
    return _native_or(SILU, lambda a: a * pointwise.SIGMOID.kernel(xp, a), xp, x)


def _silu_backward_kernel(xp, g, x):
    def grad(g, a):
        s = pointwise.SIGMOID.kernel(xp, a)
        return g * s * (1 + a * (1 - s))
    return _native_or(SILU_BACKWARD, grad, xp, g, x)


# Second derivatives, in jitorch ops (for the backward rows' own backward):
# gelu'' = pdf(x) * (2 - x^2); silu'' = s(1 - s)(2 + x(1 - 2s));
# the tanh form's, with u' = beta(1 + 3 kappa x^2) and u'' = 6 beta kappa x: (1 - t^2)(u' - x t u'^2 + x u''/2).
def _gelu_second(x):
    return (x * x * -0.5).exp() * _INV_SQRT_2PI * (2 - x * x)


def _gelu_tanh_second(x):
    # Beyond |x| = 100 sech(u) underflows to 0 in both float types, and x t du^2 would overflow to inf (0 * inf is
    # nan): the clamp keeps every factor finite there, where the value (and its derivative) is 0 anyway.
    x = x.clamp(-100.0, 100.0)
    u = _BETA * (x + _KAPPA * x * x * x)
    t, sech = u.tanh(), 1 / u.cosh()  # sech^2, not 1 - t^2 (see _E)
    du = _BETA * (1 + 3 * _KAPPA * x * x)
    return sech * sech * (du - x * t * du * du + x * (3 * _BETA * _KAPPA * x))


def _silu_second(x):
    s = x.sigmoid()
    return s * (1 - s) * (2 + x * (1 - 2 * s))


def _gelu_backward(ctx, g):
    return gelu_backward(g, ctx.inputs[0])


def _gelu_tanh_backward(ctx, g):
    return gelu_tanh_backward(g, ctx.inputs[0])


def _silu_backward(ctx, g):
    return silu_backward(g, ctx.inputs[0])


def _second_backward(first, second):
    """The backward of a backward row ``g * f'(x)``: ``first(gg, x)`` for g and ``gg * g * f''(x)`` for x; ``first``
    is looked up when called (the row functions are made below)."""
    def backward(ctx, gg):
        g, x = ctx.inputs
        return (globals()[first](gg, x) if ctx.needs_grad(0) else None), \
            (gg * g * second(x) if ctx.needs_grad(1) else None)
    return backward


def _rows(name, kernel, backward, grad_kernel, expr, grad_expr, second, grad_name):
    # Native at every float32 size: one kernel call beats NumPy/SciPy's passes from a single element (GELU on 16:
    # 1.7 us against 4.3), and every size gets the same bits.
    backward_row = native_eager.native_from(defop(
        f"{name}_backward", grad_kernel, _second_backward(f"{name}_backward", second), Pointwise(grad_expr),
        promotion="keep", saves="inputs", meta=True, grad_name=grad_name.replace("Backward0", "BackwardBackward0")), 1)
    row = native_eager.native_from(defop(name, kernel, backward, Pointwise(expr), promotion="keep", saves="inputs",
                                         grad_name=grad_name), 1)
    return row, backward_row, fast_unary(row), fast_binary(backward_row)


GELU, GELU_BACKWARD, gelu, gelu_backward = _rows("gelu", _gelu_kernel, _gelu_backward, _gelu_backward_kernel, _GELU,
                                                 _GELU_GRAD, _gelu_second, "GeluBackward0")
GELU_TANH, GELU_TANH_BACKWARD, gelu_tanh, gelu_tanh_backward = _rows(
    "gelu_tanh", _gelu_tanh_kernel, _gelu_tanh_backward, _gelu_tanh_backward_kernel, _GELU_TANH, _GELU_TANH_GRAD,
    _gelu_tanh_second, "GeluBackward0")
SILU, SILU_BACKWARD, silu, silu_backward = _rows("silu", _silu_kernel, _silu_backward, _silu_backward_kernel, _SILU,
                                                 _SILU_GRAD, _silu_second, "SiluBackward0")
