"""``leaky_relu``, ``hardtanh``, ``softshrink``/``hardshrink`` and ``threshold`` as rows with their backward rows (as
ATen's ``leaky_relu_backward``, ``hardtanh_backward``...). The gradient of a piecewise-linear function is a function
of its input: as a row taking the input, a gradient taken with ``create_graph=True`` stays connected to it, with
derivative zero there, as torch's. Written as ``where`` composites the gradient depended only on a boolean mask: a
gradient penalty through LeakyReLU (WGAN-GP) left parameters it does not depend on with ``None`` instead of zeros,
and ``grad`` of such a gradient raised "does not require grad".

>>> import jitorch
>>> x = jitorch.tensor([-2.0, 0.0, 3.0], requires_grad=True)
>>> (g,) = jitorch.autograd.grad(leaky_relu(x, 0.5).sum(), x, create_graph=True)
>>> g, jitorch.autograd.grad(g.sum(), x)[0]
(tensor([0.5000, 0.5000, 1.0000], grad_fn=<LeakyReluBackwardBackward0>), tensor([0., 0., 0.]))
"""
from __future__ import annotations

import numpy as np

from .._dispatch import apply
from .activation_ops import _float_input
from .native_eager import pointwise_constants
from .pointwise_unary import _HALF_BLOCK
from .pointwise_common import _widened
from .table import Pointwise, defop

__all__ = ["leaky_relu", "leaky_relu_backward", "hardtanh", "hardtanh_backward", "softshrink", "hardshrink",
           "shrink_backward", "threshold", "threshold_backward", "hardsigmoid", "hardsigmoid_backward", "hardswish",
           "hardswish_backward"]


def _zeros_for(ctx, i):
    """The derivative of a backward row in its input (piecewise constant there): zeros, when asked for."""
    return ctx.inputs[i].new_zeros(ctx.inputs[i].shape) if ctx.needs_grad(i) else None


def _backwards(grad_row, nparams):
    """``(backward, backward of the backward row)`` of a row ``f(x, *params)`` whose gradient is the row
    ``grad_row(g, x, *params)`` (looked up by name when called: the rows are defined below). ``nparams`` counts the
    forward's scalar parameters; the backward row takes all but the threshold's replacement value."""
    def backward(ctx, g):
        x, *params = ctx.inputs
        return (globals()[grad_row](g, x, *params[:nparams]),) + (None,) * len(params)

    def backward_of_backward(ctx, gg):
        _, x, *params = ctx.inputs
        first = globals()[grad_row](gg, x, *params) if ctx.needs_grad(0) else None
        return (first, _zeros_for(ctx, 1)) + (None,) * len(params)
    return backward, backward_of_backward


def _scaled(a, slope):
    """``a * slope`` rounded once to ``a``'s dtype: half precision multiplies in float32, as torch's kernels do."""
    return (a.astype("float32") * slope).astype(a.dtype) if a.dtype.itemsize < 4 else a * slope


def _leaky_kernel(xp, x, slope):
    _float_input("leaky_relu", x)
    out = pointwise_constants(LEAKY_RELU, [x], (slope,))
    if out is not None:
        return out
    return xp.where(x > 0, x, _scaled(x, slope)).astype(x.dtype, copy=False)


def _leaky_grad_kernel(xp, g, x, slope):
    out = pointwise_constants(LEAKY_RELU_BACKWARD, [g, x], (slope,))
    if out is not None:
        return out
    return xp.where(x > 0, g, _scaled(g, slope)).astype(g.dtype, copy=False)


def _hardtanh_kernel(xp, x, lo, hi):
    # Bounds as NaN-propagating selects (clip would turn NaN into a bound on some NumPy builds); strict, so x equal
    # to a bound is kept: relu6(-0.0) is -0.0, as ATen's clamp.
    out = pointwise_constants(HARDTANH, [x], (lo, hi))
    if out is not None:
        return out
    return xp.where(x < lo, lo, xp.where(x > hi, hi, x)).astype(x.dtype, copy=False)


def _scalar_lanes(out, g, x, vectors=1, scale=1.0):
    """ATen's hardtanh and shrink backward kernels pass the gradient strictly inside the bounds (outside for the
    shrinks) over whole vectors of contiguous operands: NaN's gradient is 0 there, as in ``out``.
    Its scalar code, on a block's remainder and on strided operands, tests the other way round and lets NaN's
    gradient through: ``g`` (times ``scale``: elu's) in those lanes. A block is ``vectors`` vectors (hardswish's and
    elu's backward loops take two at a time)."""
    if type(x) is not np.ndarray or x.dtype.kind not in "fV" or not x.size:
        return out
    block = vectors * 2 * _HALF_BLOCK // x.itemsize  # (one vector: 64 or 32 bytes)
    start = 0
    if x.flags.c_contiguous and (g.flags.c_contiguous or not any(g.strides)):
        start = x.size - x.size % block
        if start == x.size:
            return out
    elif x.ndim > 1:
        return _scalar_lanes_permuted(out, np.broadcast_to(g, x.shape), x, block, scale)
    lanes = (x if x.ndim == 1 else x.reshape(-1))[start:]
    top = np.maximum.reduce(lanes)  # NaN where any lane is: one reduction for the common answer
    if top == top:
        return out
    nan = lanes != lanes
    out = np.ascontiguousarray(out)
    tail = np.broadcast_to(g, x.shape).reshape(-1)[start:][nan]
    out.reshape(-1)[start:][nan] = tail if scale == 1.0 else _scaled(tail, scale)
    return out


def _iteration_order(g, x):
    """ATen's TensorIterator order of ``(g, x)``'s dims, innermost last (a dim goes inside another where the first
    operand with unequal nonzero strides has the smaller stride there), and the length of its coalesced inner run."""
    def inside(d0, d1):
        for a in (g, x):
            s0, s1 = a.strides[d0], a.strides[d1]
            if s0 and s1 and s0 != s1:
                return s0 < s1
            if s0 and s1 and x.shape[d0] > x.shape[d1]:
                return False
        return None
    fast = []  # fastest first, as ATen's perm_, from the reversed dims
    for d in reversed([d for d in range(x.ndim) if x.shape[d] > 1]):
        i = len(fast)
        fast.append(d)
        while i and inside(fast[i - 1], fast[i]) is False:
            fast[i - 1], fast[i] = fast[i], fast[i - 1]
            i -= 1
    run = x.shape[fast[0]] if fast else 1
    for inner, outer in zip(fast, fast[1:]):
        if any(a.strides[inner] * x.shape[inner] != a.strides[outer] for a in (g, x)):
            break
        run *= x.shape[outer]
    axes = [d for d in range(x.ndim) if x.shape[d] == 1] + fast[::-1]
    return axes, run, bool(fast) and x.strides[fast[0]] == x.itemsize and g.strides[fast[0]] in (0, x.itemsize)


def _scalar_lanes_permuted(out, g, x, block, scale):
    """`_scalar_lanes` of a non-contiguous ``x``: in ATen's iteration order each coalesced inner run whose inner
    strides are contiguous (``g``'s may be 0) is vectorized but for its remainder; other runs are all scalar code."""
    top = np.maximum.reduce(x, axis=None)  # NaN where any element is
    if top == top:
        return out
    axes, run, vectorized = _iteration_order(g, x)
    xv, gv = x.transpose(axes), g.transpose(axes)
    tail = np.ascontiguousarray(xv != xv).reshape(-1, run)
    if vectorized:
        tail[:, :run - run % block] = False
    tail = tail.reshape(xv.shape)
    out = np.ascontiguousarray(out)
    picked = gv[tail]
    out.transpose(axes)[tail] = picked if scale == 1.0 else _scaled(picked, scale)
    return out


def _hardtanh_grad_kernel(xp, g, x, lo, hi):
    out = pointwise_constants(HARDTANH_BACKWARD, [g, x], (lo, hi))
    if out is None:
        out = xp.where((x > lo) & (x < hi), g, 0).astype(g.dtype, copy=False)
    return _scalar_lanes(out, g, x)


_leaky_backward, _leaky_grad_backward = _backwards("leaky_relu_backward", 1)
_hardtanh_backward, _hardtanh_grad_backward = _backwards("hardtanh_backward", 2)
_shrink_backward, _shrink_grad_backward = _backwards("shrink_backward", 1)
_threshold_backward, _threshold_grad_backward = _backwards("threshold_backward", 1)

LEAKY_RELU = defop("leaky_relu", _leaky_kernel, _leaky_backward, Pointwise("{0} > 0 ? {0} : {0} * {1}"),
                   promotion="keep", saves="inputs", grad_name="LeakyReluBackward0")
LEAKY_RELU_BACKWARD = defop("leaky_relu_backward", _leaky_grad_kernel, _leaky_grad_backward,
                            Pointwise("{1} > 0 ? {0} : {0} * {2}"), promotion="keep", saves="inputs",
                            grad_name="LeakyReluBackwardBackward0")
HARDTANH = defop("hardtanh", _hardtanh_kernel, _hardtanh_backward,
                 Pointwise("{0} < {1} ? {1} : ({0} > {2} ? {2} : {0})"), promotion="keep", saves="inputs",
                 grad_name="HardtanhBackward0")
HARDTANH_BACKWARD = defop("hardtanh_backward", _hardtanh_grad_kernel, _hardtanh_grad_backward,
                          Pointwise("({1} > {2} && {1} < {3}) ? {0} : 0"), promotion="keep", saves="inputs",
                          grad_name="HardtanhBackwardBackward0")


def _softshrink_kernel(xp, x, lambd):
    _float_input("softshrink", x)
    # x * 0 between the bounds: NaN stays NaN and -0.5 gives -0.0, as torch's kernel
    out = pointwise_constants(SOFTSHRINK, [x], (lambd,))
    if out is not None:
        return out
    return xp.where(x > lambd, x - lambd, xp.where(x < -lambd, x + lambd, x * 0)).astype(x.dtype, copy=False)


def _hardshrink_kernel(xp, x, lambd):
    out = pointwise_constants(HARDSHRINK, [x], (lambd,))
    if out is not None:
        return out
    return xp.where((x >= -lambd) & (x <= lambd), 0, x).astype(x.dtype, copy=False)


def _shrink_grad_kernel(xp, g, x, lambd):
    out = pointwise_constants(SHRINK_BACKWARD, [g, x], (lambd,))
    if out is None:
        out = xp.where((x < -lambd) | (x > lambd), g, 0).astype(g.dtype, copy=False)
    return _scalar_lanes(out, g, x)


def _threshold_kernel(xp, x, threshold, value):
    out = pointwise_constants(THRESHOLD, [x], (threshold, value))
    if out is not None:
        return out
    return xp.where(x <= threshold, value, x).astype(x.dtype, copy=False)


def _threshold_grad_kernel(xp, g, x, threshold):
    out = pointwise_constants(THRESHOLD_GRAD, [g, x], (threshold,))
    if out is not None:
        return out
    return xp.where(x <= threshold, 0, g).astype(g.dtype, copy=False)


SOFTSHRINK = defop("softshrink", _softshrink_kernel, _shrink_backward,
                   Pointwise("{0} > {1} ? {0} - {1} : ({0} < -{1} ? {0} + {1} : {0} * 0)"), promotion="keep",
                   saves="inputs", grad_name="SoftshrinkBackward0")
HARDSHRINK = defop("hardshrink", _hardshrink_kernel, _shrink_backward,
                   Pointwise("({0} >= -{1} && {0} <= {1}) ? 0 : {0}"), promotion="keep", saves="inputs",
                   grad_name="HardshrinkBackward0")
SHRINK_BACKWARD = defop("shrink_backward", _shrink_grad_kernel, _shrink_grad_backward,
                        Pointwise("({1} < -{2} || {1} > {2}) ? {0} : 0"), promotion="keep", saves="inputs",
                        grad_name="SoftshrinkBackwardBackward0")
THRESHOLD = defop("threshold", _threshold_kernel, _threshold_backward, Pointwise("{0} <= {1} ? {2} : {0}"),
                  promotion="keep", saves="inputs", grad_name="ThresholdBackward0")
THRESHOLD_GRAD = defop("threshold_grad", _threshold_grad_kernel, _threshold_grad_backward,
                       Pointwise("{1} <= {2} ? 0 : {0}"), promotion="keep", saves="inputs",
                       grad_name="ThresholdBackwardBackward0")


def softshrink(x, lambd):
    return apply(SOFTSHRINK, x, lambd)


def hardshrink(x, lambd):
    return apply(HARDSHRINK, x, lambd)


def shrink_backward(g, x, lambd):
    return apply(SHRINK_BACKWARD, g, x, lambd)


def threshold(x, threshold_, value):
    return apply(THRESHOLD, x, threshold_, value)


def threshold_backward(g, x, threshold_):
    return apply(THRESHOLD_GRAD, g, x, threshold_)


def leaky_relu(x, slope):
    return apply(LEAKY_RELU, x, slope)


def leaky_relu_backward(g, x, slope):
    return apply(LEAKY_RELU_BACKWARD, g, x, slope)


def hardtanh(x, lo, hi):
    return apply(HARDTANH, x, lo, hi)


def hardtanh_backward(g, x, lo, hi):
    return apply(HARDTANH_BACKWARD, g, x, lo, hi)


# hardsigmoid as ATen's: min(max(x + 3, 0), 6) / 6 (NaN stays NaN), its gradient g * (1/6) strictly inside (-3, 3)
# and 0 elsewhere, NaN included. As a composite it took four selects and as many graph nodes (35 us for 1000 floats).
_HARDSIGMOID = "{0} <= -3 ? 0 : ({0} >= 3 ? 1 : ({0} + 3) / 6)"
_SIXTH = float(np.float32(1) / np.float32(6))  # ATen's one_sixth, a float32


def _hardsigmoid_numpy(x):
    return np.where(x <= -3, 0, np.where(x >= 3, 1, (x + 3) / 6)).astype(x.dtype, copy=False)


def _hardsigmoid_grad_numpy(g, x):
    return np.where((x > -3) & (x < 3), g * g.dtype.type(_SIXTH), 0).astype(g.dtype, copy=False)


def _hardsigmoid_kernel(xp, x):
    _float_input("hardsigmoid", x)
    out = pointwise_constants(HARDSIGMOID, [x], ())
    if out is not None:
        return out
    if xp is not np:
        return xp.minimum(xp.maximum(x + 3, 0), 6) / 6
    return _widened(_hardsigmoid_numpy, x)  # half types in float32, rounded once (ATen's opmath)


def _hardsigmoid_grad_kernel(xp, g, x):
    out = pointwise_constants(HARDSIGMOID_BACKWARD, [g, x], ())
    if out is not None:
        return out
    if xp is not np:
        return xp.where((x > -3) & (x < 3), g * _SIXTH, 0).astype(g.dtype, copy=False)
    return _widened(_hardsigmoid_grad_numpy, g, x)


_hardsigmoid_backward, _hardsigmoid_grad_backward = _backwards("hardsigmoid_backward", 0)
HARDSIGMOID = defop("hardsigmoid", _hardsigmoid_kernel, _hardsigmoid_backward, Pointwise(_HARDSIGMOID),
                    promotion="keep", saves="inputs", grad_name="HardsigmoidBackward0")
HARDSIGMOID_BACKWARD = defop("hardsigmoid_backward", _hardsigmoid_grad_kernel, _hardsigmoid_grad_backward,
                             Pointwise(f"({{1}} > -3 && {{1}} < 3) ? {{0}} * {_SIXTH!r} : 0"), promotion="keep",
                             saves="inputs", grad_name="HardsigmoidBackwardBackward0")


def hardsigmoid(x):
    """``relu6(x + 3) / 6`` as a row (ATen's ``hardsigmoid``), its gradient a row of ``x`` too.

    >>> import jitorch
    >>> hardsigmoid(jitorch.tensor([-4.0, 0.0, 1.5]))
    tensor([0.0000, 0.5000, 0.7500])
    """
    return apply(HARDSIGMOID, x)


def hardsigmoid_backward(g, x):
    return apply(HARDSIGMOID_BACKWARD, g, x)


# hardswish as ATen's: x * min(max(x + 3, 0), 6) / 6 (NaN stays NaN; x <= -3 gives x * 0, -0.0), its gradient ATen's
# vectorized blend: 0 up to -3, g from 3 on, g * (x / 3 + 0.5) between (and for NaN). As a composite it took two
# selects and five graph nodes forward (1e6 floats: 0.79 ms, torch 0.13), eight NumPy passes backward.
_HARDSWISH = "{0} * min(max({0} + 3, 0), 6) / 6"
_HARDSWISH_GRAD = "{1} <= -3 ? 0 : ({1} >= 3 ? {0} : {0} * ({1} / 3 + 0.5))"


def _hardswish_numpy(x):
    return x * np.minimum(np.maximum(x + 3, 0), 6) / 6


def _hardswish_grad_numpy(g, x):
    return np.where(x <= -3, 0, np.where(x >= 3, g, g * (x / 3 + 0.5))).astype(g.dtype, copy=False)


def _hardswish_kernel(xp, x):
    _float_input("hardswish", x)
    out = pointwise_constants(HARDSWISH, [x], ())
    if out is not None:
        return out
    if xp is not np:
        return x * xp.minimum(xp.maximum(x + 3, 0), 6) / 6
    return _widened(_hardswish_numpy, x)


def _hardswish_grad_kernel(xp, g, x):
    out = pointwise_constants(HARDSWISH_BACKWARD, [g, x], ())
    if out is not None:
        return _scalar_lanes(out, g, x, 2)
    if xp is not np:
        return xp.where(x <= -3, 0, xp.where(x >= 3, g, g * (x / 3 + 0.5))).astype(g.dtype, copy=False)
    # ATen's scalar tail (a block's remainder, strided operands) tests x <= 3 then passes g on: NaN's gradient is g
    return _scalar_lanes(_widened(_hardswish_grad_numpy, g, x), g, x, 2)


def _hardswish_grad_backward(ctx, gg):
    # ATen's: hardswish_backward(gg, x) for g; gg * g / 3 strictly inside (-3, 3) for x, 0 elsewhere.
    from .. import where

    g, x = ctx.inputs
    first = hardswish_backward(gg, x) if ctx.needs_grad(0) else None
    second = where((x > -3) & (x < 3), gg * g / 3, 0.0) if ctx.needs_grad(1) else None
    return first, second


HARDSWISH = defop("hardswish", _hardswish_kernel, lambda ctx, g: (hardswish_backward(g, ctx.inputs[0]),),
                  Pointwise(_HARDSWISH), promotion="keep", saves="inputs", grad_name="HardswishBackward0")
HARDSWISH_BACKWARD = defop("hardswish_backward", _hardswish_grad_kernel, _hardswish_grad_backward,
                           Pointwise(_HARDSWISH_GRAD), promotion="keep", saves="inputs",
                           grad_name="HardswishBackwardBackward0")


def hardswish(x):
    """``x * relu6(x + 3) / 6`` as a row (ATen's ``hardswish``), its gradient a row of ``x`` too.

    >>> import jitorch
    >>> hardswish(jitorch.tensor([-4.0, 0.0, 1.5]))
    tensor([-0.0000, 0.0000, 1.1250])
    """
    return apply(HARDSWISH, x)


def hardswish_backward(g, x):
    return apply(HARDSWISH_BACKWARD, g, x)
