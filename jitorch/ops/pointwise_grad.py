"""Fused backward rows of pointwise ops (as ATen's ``tanh_backward``): one dispatch instead of three in backward.

Each is a row like any other, so its own backward gives double backward, and it fuses like any pointwise op. In a
first-order backward (nothing records) the formulas call the row's kernel on the arrays directly (`plain_arrays`).

>>> import jitorch
>>> from jitorch.ops.pointwise_grad import tanh_backward
>>> tanh_backward(jitorch.ones(2), jitorch.tensor([0.0, 0.5]))
tensor([1.0000, 0.7500])
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .._dispatch import fast_binary
from .._dispatch_fast import plain_arrays, plain_tensor
from ..runtime import is_cupy
from . import native_eager
from .table import Pointwise, defop
from .half_cast import converted

_F32 = np.dtype(np.float32)


_HALVES = _dtype.HALF_NP


def _widened(formula, g, y):
    """``formula`` of half-precision arrays computed in float32 and rounded once, as ATen's backward kernels do
    (the formula's own half-precision steps are an ulp off for about a third of the elements); None otherwise."""
    if g.dtype in _HALVES and y.dtype == g.dtype:
        return converted(formula(converted(g, _F32), converted(y, _F32)), g.dtype)
    return None


def _tanh_backward_kernel(xp, g, y):
    widened = _widened(lambda g, y: g * (1 - y * y), g, y)
    if widened is not None:
        return widened
    out = native_eager.pointwise(TANH_BACKWARD, g, y, min_size=4096)  # one pass instead of three (NumPy's three
    # passes are as fast below 4096 elements)
    return g * (1 - y * y) if out is None else out


def _tanh_backward_backward(ctx, gg):
    g, y = ctx.inputs
    return (tanh_backward(gg, y) if ctx.needs_grad(0) else None), (-2 * gg * g * y if ctx.needs_grad(1) else None)


def _sigmoid_backward_kernel(xp, g, y):
    if g.dtype == np.float16 and y.dtype == g.dtype:  # ATen's float16 kernel rounds after each step, in this order
        return g * (1 - y) * y
    widened = _widened(lambda g, y: g * (1 - y) * y, g, y)
    if widened is not None:
        return widened
    out = native_eager.pointwise(SIGMOID_BACKWARD, g, y, min_size=4096)
    return g * y * (1 - y) if out is None else out


def _sigmoid_backward_backward(ctx, gg):
    g, y = ctx.inputs
    return (sigmoid_backward(gg, y) if ctx.needs_grad(0) else None), \
        (gg * g * (1 - 2 * y) if ctx.needs_grad(1) else None)


def _threshold_backward_kernel(xp, g, y):
    # One pass for the mask, product and inf check below (four passes and a fix-up): a win from one element on.
    out = native_eager.pointwise(THRESHOLD_BACKWARD, g, y, min_size=1)
    if out is not None:
        return out
    mask = ~(y <= 0)  # ATen's ``y <= 0 ? 0 : g``: a NaN output passes its gradient through
    if is_cupy(xp):
        return xp.where(mask, g, 0).astype(g.dtype, copy=False)
    # NumPy's masked where/copyto are ~12x slower than a multiply here, and a multiply gives -0.0 for a negative
    # gradient (torch: +0.0) and NaN for an infinite one: the gradient's bits ANDed with all-ones or zero instead.
    bits = _SAME_WIDTH_INTS.get(g.dtype.itemsize)
    if bits is not None and g.shape == mask.shape and g.dtype.kind in "fV":
        keep = xp.array(mask, dtype=bits)  # (an array also for a 0-d mask, whose astype is a NumPy scalar)
        xp.negative(keep, out=keep)  # 0 or -1: every bit set
        return xp.bitwise_and(g.view(bits), keep, out=keep).view(g.dtype)
    out = g * mask
    if not xp.isfinite(g).all():
        out[~mask] = 0
    return out


_SAME_WIDTH_INTS = {2: np.int16, 4: np.int32, 8: np.int64}


def _threshold_backward_backward(ctx, gg):
    g, y = ctx.inputs
    return (threshold_backward(gg, y) if ctx.needs_grad(0) else None), (gg * 0 if ctx.needs_grad(1) else None)


TANH_BACKWARD = defop("tanh_backward", _tanh_backward_kernel, _tanh_backward_backward,
                      Pointwise("{0} * (1 - {1} * {1})"), promotion="promote", saves="inputs", meta=True)
SIGMOID_BACKWARD = defop("sigmoid_backward", _sigmoid_backward_kernel, _sigmoid_backward_backward,
                         Pointwise("{0} * {1} * (1 - {1})"), promotion="promote", saves="inputs", meta=True)
THRESHOLD_BACKWARD = defop("threshold_backward", _threshold_backward_kernel, _threshold_backward_backward,
                           Pointwise("{1} <= 0 ? 0 : {0}"), promotion="promote", saves="inputs", meta=True)


def _first_order(row):
    """``row`` as a ``(g, y) -> Tensor`` that runs the row's kernel straight on the arrays when nothing records."""
    kernel, dispatched = row.kernel, fast_binary(row)

    def run(g, y):
        arrays = plain_arrays(g, y)
        if arrays is None:
            return dispatched(g, y)
        out = kernel(np, *arrays)
        return plain_tensor(out if type(out) is np.ndarray else np.asarray(out))
    run.__name__ = row.name
    return run


tanh_backward = _first_order(TANH_BACKWARD)
sigmoid_backward = _first_order(SIGMOID_BACKWARD)
threshold_backward = _first_order(THRESHOLD_BACKWARD)
