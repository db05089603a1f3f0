"""``mse``, ``smooth_l1`` and ``huber`` elementwise losses (``reduction='none'``) as rows with their backward rows,
ATen's formulas bit for bit: one generated pass each on CPU float32 (`native_eager`), NumPy passes otherwise.

As ``where`` composites the loss took seven graph nodes and as many NumPy passes forward, more backward (1e6
floats: 1.5 ms, torch 0.16). The backward rows take the input, the target and the upstream gradient, as ATen's
``smooth_l1_loss_backward``; the target's gradient is the same row with the two swapped, as ATen's. Reductions
(mean, sum) stay outside, so the gradient of a mean is the row's of ``g / n`` (within an ulp of ATen's, which
scales by ``1/n`` in the kernel).

>>> import jitorch
>>> smooth_l1(jitorch.tensor([0.5, 3.0]), jitorch.tensor([0.0, 0.0]), 1.0)
tensor([0.1250, 2.5000])
"""
from __future__ import annotations

import numpy as np

from .._dispatch import apply
from .._dispatch_fast import fast_binary, plain_arrays, plain_tensor
from .native_eager import pointwise, pointwise_constants
from .pointwise_common import _widened
from .table import Pointwise, defop

__all__ = ["mse", "mse_backward", "smooth_l1", "smooth_l1_backward", "huber", "huber_backward"]

_D = "abs({0} - {1})"
_SMOOTH_L1 = f"{_D} < {{2}} ? 0.5 * {_D} * {_D} / {{2}} : {_D} - 0.5 * {{2}}"
_HUBER = f"{_D} < {{2}} ? 0.5 * {_D} * {_D} : {{2}} * ({_D} - 0.5 * {{2}})"
# The gradients, {0} the upstream gradient, d = {1} - {2}. ATen's vectorized blends: smooth L1's sign(d) where
# |d| >= beta, else d / beta, times g; Huber's -g * delta where d <= -delta (written -d >= delta: the same
# comparison, as y - x is -(x - y) exactly), g * delta where d >= delta, else d * g.
_SMOOTH_L1_GRAD = "(abs({1} - {2}) >= {3} ? ({1} - {2} > 0 ? 1 : -1) : ({1} - {2}) / {3}) * {0}"
_HUBER_GRAD = "{2} - {1} >= {3} ? -{0} * {3} : ({1} - {2} >= {3} ? {0} * {3} : ({1} - {2}) * {0})"
# ATen's mse kernels: diff * diff; backward norm * (x - y) * g with norm 2 (a mean's 1/n reaches the row through
# g / n: for g = 1 the same bits, as 2 * fl(1/n) is fl(2/n)).
_MSE = "({0} - {1}) * ({0} - {1})"
_MSE_GRAD = "2.0 * ({1} - {2}) * {0}"
_MSE_GRAD_OF_NUMBER = "2.0 * ({0} - {1}) * {2}"  # the same with g one number: a mean's or sum's broadcast gradient


def _smooth_l1_array(xp, x, y, beta):
    z = xp.abs(x - y)
    b = z.dtype.type(beta)
    half = z.dtype.type(0.5)
    return xp.where(z < b, half * z * z / b, z - half * b)


def _huber_array(xp, x, y, delta):
    z = xp.abs(x - y)
    d = z.dtype.type(delta)
    half = z.dtype.type(0.5)
    return xp.where(z < d, half * z * z, d * (z - half * d))


def _smooth_l1_grad_array(xp, g, x, y, beta):
    d = x - y
    b = d.dtype.type(beta)
    return xp.where(xp.abs(d) >= b, xp.where(d > 0, 1, -1).astype(d.dtype), d / b) * g


def _huber_grad_array(xp, g, x, y, delta):
    d = x - y
    t = d.dtype.type(delta)
    return xp.where(d <= -t, -g * t, xp.where(d >= t, g * t, d * g))


def _kernel(row, array_fn):
    """A row's kernel: its native pass (`native_eager.pointwise_constants`), else ``array_fn(xp, *arrays, param)``
    (half types in float32, rounded once)."""
    def kernel(xp, *arrays_and_param):
        *arrays, param = arrays_and_param
        out = pointwise_constants(row(), arrays, (param,))
        if out is not None:
            return out
        return _widened(lambda *a: array_fn(xp, *a, param), *arrays)
    return kernel


def _mse_array(x, y):
    d = x - y  # half types per op, as ATen's Half/BFloat16 vector ops round each one
    return d * d


def _mse_grad_array(g, x, y):
    d = x - y
    return d.dtype.type(2) * d * g


def _plain_kernel(row, array_fn):
    """A parameterless row's kernel: its native pass (`native_eager.pointwise`), else ``array_fn(*arrays)``."""
    def kernel(xp, *arrays):
        out = pointwise(row(), *arrays)
        return array_fn(*arrays) if out is None else out
    return kernel


def _mse_grad_kernel(xp, g, x, y):
    """The backward row's kernel; the upstream gradient of a reduced loss arrives as one number broadcast (stride
    0), which the native pass reads as a constant rather than leaving the whole gradient to NumPy."""
    out = None
    if type(g) is np.ndarray and g.size and not any(g.strides):
        out = pointwise_constants(MSE_BACKWARD, [x, y], (float(g.flat[0]),), expr=_MSE_GRAD_OF_NUMBER)
    if out is None:
        out = pointwise(MSE_BACKWARD, g, x, y)
    return _mse_grad_array(g, x, y) if out is None else out


def _mse_backward(ctx, g):
    x, y = ctx.inputs
    arrays = plain_arrays(g, x, y)
    if arrays is not None:  # nothing records: the backward row's kernel on the arrays, without its dispatch
        g, x, y = arrays
        return (plain_tensor(_mse_grad_kernel(np, g, x, y)) if ctx.needs_grad(0) else None,
                plain_tensor(_mse_grad_kernel(np, g, y, x)) if ctx.needs_grad(1) else None)
    return (mse_backward(g, x, y) if ctx.needs_grad(0) else None, mse_backward(g, y, x) if ctx.needs_grad(1) else None)


def _mse_grad_backward(ctx, gg):
    """ATen's ``mse_loss_double_backward``: the row itself in the upstream gradient, ``2 * gg * g`` in x, minus
    that in y."""
    g, x, y = ctx.inputs
    dx = 2.0 * (gg * g) if ctx.needs_grad(1) or ctx.needs_grad(2) else None
    return (mse_backward(gg, x, y) if ctx.needs_grad(0) else None, dx if ctx.needs_grad(1) else None,
            -dx if ctx.needs_grad(2) else None)


def _loss_backward(grad_fn):
    def backward(ctx, g):
        x, y, param = ctx.inputs
        return (grad_fn(g, x, y, param) if ctx.needs_grad(0) else None,
                grad_fn(g, y, x, param) if ctx.needs_grad(1) else None, None)
    return backward


def _grad_backward(grad_fn, window):
    """The backward of a gradient row ``grad_fn(g, x, y, t)``: itself in the upstream gradient; in x (and minus it
    in y), ``gg * g * window`` where ``|x - y| < t`` (ATen's ``*_loss_double_backward``), 0 elsewhere."""
    def backward(ctx, gg):
        from .. import where

        g, x, y, t = ctx.inputs
        first = grad_fn(gg, x, y, t) if ctx.needs_grad(0) else None
        dx = where((x - y).abs() < t, gg * g * window(t), 0.0) if ctx.needs_grad(1) or ctx.needs_grad(2) else None
        return (first, dx if ctx.needs_grad(1) else None, -dx if ctx.needs_grad(2) else None, None)
    return backward


MSE = defop("mse", _plain_kernel(lambda: MSE, _mse_array), _mse_backward, Pointwise(_MSE), promotion="promote",
            saves="inputs", meta=True, grad_name="MseLossBackward0")
MSE_BACKWARD = defop("mse_backward", _mse_grad_kernel, _mse_grad_backward,
                     Pointwise(_MSE_GRAD), promotion="promote", saves="inputs", meta=True,
                     grad_name="MseLossBackwardBackward0")
SMOOTH_L1 = defop("smooth_l1", _kernel(lambda: SMOOTH_L1, _smooth_l1_array),
                  _loss_backward(lambda *a: smooth_l1_backward(*a)), Pointwise(_SMOOTH_L1), promotion="promote",
                  saves="inputs", meta=True, grad_name="SmoothL1LossBackward0")
SMOOTH_L1_BACKWARD = defop("smooth_l1_backward", _kernel(lambda: SMOOTH_L1_BACKWARD, _smooth_l1_grad_array),
                           _grad_backward(lambda *a: smooth_l1_backward(*a), lambda beta: 1 / beta),
                           Pointwise(_SMOOTH_L1_GRAD), promotion="promote", saves="inputs", meta=True,
                           grad_name="SmoothL1LossBackwardBackward0")
HUBER = defop("huber", _kernel(lambda: HUBER, _huber_array), _loss_backward(lambda *a: huber_backward(*a)),
              Pointwise(_HUBER), promotion="promote", saves="inputs", meta=True, grad_name="HuberLossBackward0")
HUBER_BACKWARD = defop("huber_backward", _kernel(lambda: HUBER_BACKWARD, _huber_grad_array),
                       _grad_backward(lambda *a: huber_backward(*a), lambda delta: 1),
                       Pointwise(_HUBER_GRAD), promotion="promote", saves="inputs", meta=True,
                       grad_name="HuberLossBackwardBackward0")


def mse(x, y):
    """The elementwise squared error ``(x - y) ** 2`` of same-shape ``x`` and ``y`` as one row.

    >>> import jitorch
    >>> mse(jitorch.tensor([0.5, 3.0]), jitorch.tensor([0.0, 1.0]))
    tensor([0.2500, 4.0000])
    """
    return _mse_row(x, y)


# Same-dtype float CPU tensors straight to the kernel (`fast_binary`): the general dispatch took as long as the
# kernel on 32 x 32.
_mse_row = fast_binary(MSE)


def mse_backward(g, x, y):
    return apply(MSE_BACKWARD, g, x, y)


def smooth_l1(x, y, beta):
    """The elementwise smooth L1 loss of same-shape ``x`` and ``y`` (``beta > 0``) as one row."""
    return apply(SMOOTH_L1, x, y, float(beta))


def smooth_l1_backward(g, x, y, beta):
    return apply(SMOOTH_L1_BACKWARD, g, x, y, float(beta))


def huber(x, y, delta):
    """The elementwise Huber loss of same-shape ``x`` and ``y`` (``delta > 0``) as one row.

    >>> import jitorch
    >>> huber(jitorch.tensor([0.5, 3.0]), jitorch.tensor([0.0, 0.0]), 2.0)
    tensor([0.1250, 4.0000])
    """
    return apply(HUBER, x, y, float(delta))


def huber_backward(g, x, y, delta):
    return apply(HUBER_BACKWARD, g, x, y, float(delta))
