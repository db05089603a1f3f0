"""``elu`` (with ``selu`` and ``celu``, its scaled forms) as a row with its backward row, as ATen's ``elu`` and
``elu_backward``: ``scale * x`` above 0, ``alpha * scale * expm1(input_scale * x)`` elsewhere, and the gradient
``g * scale`` or ``g * input_scale * alpha * scale * exp(input_scale * x)``.

As a composite (clamp, expm1, two products and a select) the gradient of NaN was 0 (clamp's); ATen's backward
kernel tests ``x > 0`` over whole vectors (NaN takes the exponential branch: NaN) and ``x <= 0`` in its scalar tail
(NaN takes ``g * scale``), as `activation_piecewise._scalar_lanes` reproduces.

>>> import jitorch
>>> x = jitorch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
>>> y = elu(x, 1.0, 1.0, 1.0)
>>> y, jitorch.autograd.grad(y.sum(), x)[0]
(tensor([-0.6321,  0.0000,  2.0000], grad_fn=<EluBackward0>), tensor([0.3679, 1.0000, 1.0000]))
"""
from __future__ import annotations

import numpy as np

from .._dispatch import apply
from .activation_piecewise import _scaled, _scalar_lanes
from .native_eager import pointwise_constants
from .pointwise_common import _widened
from .table import Pointwise, defop

__all__ = ["elu", "elu_backward"]

# Beyond 0 the exponential branch is not taken: its overflow there is no answer, so not warned about.
_ELU = "{0} > 0 ? {0} * {2} : expm1({0} * {3}) * {1}"
_ELU_SELECT = "{0} > 0 ? {0} * {2} : {1} * {3}"  # of x and its expm1 (the code generator has no expm1)
_ELU_GRAD = "{1} > 0 ? {0} * {3} : {0} * {4} * {2} * exp({1} * {4})"


def _elu_kernel(xp, x, negcoef, poscoef, input_scale):
    # NumPy's expm1, as the composite this was: its bits
    with np.errstate(over="ignore", invalid="ignore"):
        if x.dtype.itemsize < 4:  # each product and expm1 rounded to the half type, as the composite this was
            inner = _scaled(x, input_scale) if input_scale != 1.0 else x
            negative = _scaled(xp.expm1(inner).astype(x.dtype, copy=False), negcoef)
            positive = _scaled(x, poscoef) if poscoef != 1.0 else x
        else:
            negative = xp.expm1(x * input_scale if input_scale != 1.0 else x)
            out = pointwise_constants(ELU, [x, negative], (poscoef, negcoef), expr=_ELU_SELECT)
            if out is not None:  # the select and products in one native pass (NumPy's where: 3 ms on 1e6 floats)
                return out
            negative = negative * negcoef
            positive = x * poscoef if poscoef != 1.0 else x
        return xp.where(x > 0, positive, negative).astype(x.dtype, copy=False)


def _elu_grad_numpy(g, x, negcoef, poscoef, input_scale):
    t = x.dtype.type  # ATen's coefficients in the (opmath) type
    with np.errstate(over="ignore", invalid="ignore"):
        negative = g * t(input_scale) * t(negcoef) * np.exp(x * t(input_scale))
    return np.where(x > 0, g * t(poscoef), negative).astype(g.dtype, copy=False)


def _elu_grad_kernel(xp, g, x, negcoef, poscoef, input_scale):
    out = pointwise_constants(ELU_BACKWARD, [g, x], (negcoef, poscoef, input_scale))
    if out is None:
        if xp is not np:
            return xp.where(x > 0, g * poscoef, g * input_scale * negcoef * xp.exp(x * input_scale)).astype(
                g.dtype, copy=False)
        out = _widened(lambda g, x: _elu_grad_numpy(g, x, negcoef, poscoef, input_scale), g, x)
    return _scalar_lanes(out, g, x, 2, poscoef)


def _elu_backward(ctx, g):
    x, *params = ctx.inputs
    return (elu_backward(g, x, *params),) + (None,) * len(params)


def _elu_grad_backward(ctx, gg):
    # ATen's elu_double_backward: elu_backward(gg, x) for g; gg * g * input_scale^2 * alpha * scale * exp(...) for x
    # where x <= 0, 0 elsewhere.
    from .. import where

    g, x, negcoef, poscoef, input_scale = ctx.inputs
    first = elu_backward(gg, x, negcoef, poscoef, input_scale) if ctx.needs_grad(0) else None
    second = None
    if ctx.needs_grad(1):
        second = where(x <= 0, gg * g * (input_scale * input_scale * negcoef) * (x * input_scale).exp(), 0.0)
    return first, second, None, None, None


ELU = defop("elu", _elu_kernel, _elu_backward, Pointwise(_ELU), promotion="keep", saves="inputs",
            grad_name="EluBackward0")
ELU_BACKWARD = defop("elu_backward", _elu_grad_kernel, _elu_grad_backward, Pointwise(_ELU_GRAD), promotion="keep",
                     saves="inputs", grad_name="EluBackwardBackward0")


def elu(x, alpha, scale, input_scale):
    """``scale * x`` above 0, ``alpha * scale * expm1(input_scale * x)`` elsewhere (ATen's ``elu``)."""
    return apply(ELU, x, alpha * scale, scale, input_scale)


def elu_backward(g, x, negcoef, poscoef, input_scale):
    return apply(ELU_BACKWARD, g, x, negcoef, poscoef, input_scale)
