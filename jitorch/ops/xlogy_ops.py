"""``xlogy`` and ``special.xlog1py`` as rows: ATen's value (``x * log(y)``, 0 where ``x == 0`` unless ``y`` is
NaN) as one generated kernel on CPU float32/float64 arrays (`special_formula`), and torch's gradient formulas written
in jitorch ops, so double backward works:

- ``d/dx = xlogy(g, y)``, set to 0 where ``x == 0 and y <= 0`` (``y > 0`` for a Python number ``y``: then no mask;
  otherwise every ``x == 0`` is masked); ``d/dy = g * x / y``;
- for ``xlog1py`` the same with ``log1p``, ``y <= -1`` and ``g * x / (y + 1)``.

A composite of ``where``/``log`` gave 0 for d/dx at ``x == 0, y == inf`` (torch: inf) and 0 for d/dy at
``x == 0, y == 0`` (torch: nan), and ran six kernels forward.

>>> import jitorch
>>> x = jitorch.tensor([0.0, 2.0], dtype=jitorch.float64, requires_grad=True)
>>> y = jitorch.tensor([0.0, 3.0], dtype=jitorch.float64, requires_grad=True)
>>> out = xlogy(x, y)
>>> out.tolist(), [g.tolist() for g in jitorch.autograd.grad(out, (x, y), jitorch.ones(2, dtype=jitorch.float64))]
([0.0, 2.1972245773362196], [[0.0, 1.0986122886681098], [nan, 0.6666666666666666]])
"""
from __future__ import annotations

import numpy as np

from .._dispatch import apply
from .._dispatch_fast import fast_binary
from .special_formula import evaluate
from .table import Opaque, Pointwise, defop

__all__ = ["XLOGY", "XLOG1PY", "xlogy", "xlog1py"]

_HALVES = ("float16", "bfloat16")


def _xlogy_formula(m, x, y):
    return m.where(y != y, y, m.where(x == 0.0, 0.0, x * m.log(y)))


def _xlog1py_formula(m, x, y):
    return m.where(y != y, y, m.where(x == 0.0, 0.0, x * m.log1p(y)))


def _kernel(name, torch_name, formula, wide):
    def kernel(xp, x, y):
        # One operand may be a Python number (torch's Scalar overloads): it takes the other's dtype, as a wrapped
        # number in TensorIterator; half types compute in float32 and round once, as ATen's scalar loop.
        if not hasattr(y, "dtype"):
            y = xp.full(x.shape, y, x.dtype)
        elif not hasattr(x, "dtype"):
            x = xp.full(y.shape, x, y.dtype)
        dtype = x.dtype
        if dtype.itemsize == 2 and dtype.name in _HALVES:
            x, y = x.astype(np.float32), y.astype(np.float32)
            return evaluate(name, formula, xp, x, y, wide=wide).astype(dtype)
        if dtype.kind != "f":
            from .pointwise import _not_implemented

            raise _not_implemented(torch_name, x)
        return evaluate(name, formula, xp, x, y, wide=wide)
    return kernel


def _backward(row, edge):
    """The backward of ``x * log(y - edge)`` (xlogy: edge 0, xlog1py: -1) written with ``row`` itself: ATen's
    formulas, the x gradient masked to 0 where x == 0 and y is at or below the edge."""

    def backward(ctx, g):
        from .. import where

        x, y = ctx.inputs
        gx = gy = None
        if ctx.needs_grad(0):
            gx = apply(row(), g, y)
            if hasattr(y, "_data"):
                gx = where((x == 0) & (y <= edge), 0.0, gx)
            elif not y > edge:  # a Python number: ATen's Scalar_Other formula masks every x == 0 (a NaN y too)
                gx = where(x == 0, 0.0, gx)
        if ctx.needs_grad(1):
            gy = g * x / (y - edge if edge else y)
        return gx, gy
    return backward


_xlogy_backward = _backward(lambda: XLOGY, 0)
_xlog1py_backward = _backward(lambda: XLOG1PY, -1)


XLOGY = defop("xlogy", _kernel("xlogy", "xlogy_cpu", _xlogy_formula, False), _xlogy_backward,
              Pointwise("{1} != {1} ? {1} : ({0} == 0 ? 0 : {0} * log({1}))"), promotion="float", saves="inputs",
              meta=True)
# float32 computes in float64 (the log1p from log loses a few ulp) and rounds once: within 2 ulp of torch's.
XLOG1PY = defop("special_xlog1py", _kernel("xlog1py", "xlog1py_cpu", _xlog1py_formula, True), _xlog1py_backward,
                Opaque("log1p has no fused primitive"), promotion="float", saves="inputs", meta=True,
                grad_name="SpecialXlog1PyBackward0")


# The rows on (tensor, tensor or Python number), through the dispatcher's float CPU shortcut.
xlogy = fast_binary(XLOGY)
xlog1py = fast_binary(XLOG1PY)
