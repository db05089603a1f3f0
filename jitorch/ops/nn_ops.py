"""Primitive rows for ``nn.functional`` where a composite falls short.

``binary_cross_entropy`` is a row because PyTorch's gradient, ``(x - y) / max(x * (1 - x), 1e-12)``, stays finite
when ``x`` saturates at exactly 0 or 1 (a ``sigmoid`` in float32 does), while the gradient of the composite
``-(y * max(log x, -100) + (1 - y) * max(log1p(-x), -100))`` is ``0 * inf = NaN`` there. The backward is written in
jitorch ops, so double backward works.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> from jitorch.ops.nn_ops import BINARY_CROSS_ENTROPY
>>> x = jitorch.tensor([0.5, 1.0], requires_grad=True)
>>> loss = apply(BINARY_CROSS_ENTROPY, x, jitorch.tensor([1.0, 0.0]))
>>> loss
tensor([  0.6931, 100.0000], grad_fn=<BinaryCrossEntropyBackward0>)
>>> loss.sum().backward()
>>> x.grad
tensor([-2.0000e+00,  1.0000e+12])
"""
from __future__ import annotations

import numpy as np

from .table import NOT_DIFFERENTIABLE, Opaque, Pointwise, defop
from .half_cast import converted
_F32 = np.dtype(np.float32)

__all__ = ["BCE_LOGITS", "BCE_LOGITS_BACKWARD", "BINARY_CROSS_ENTROPY", "CHECK_RANGE"]

_EPSILON = 1e-12  # PyTorch's floor of x * (1 - x) in the gradient


def _bce_kernel(xp, x, y):
    if x.size and not bool(((x >= 0) & (x <= 1)).all()):  # NaN fails the test too, as in PyTorch
        raise RuntimeError("all elements of input should be between 0 and 1")
    if y.size and not bool(((y >= 0) & (y <= 1)).all()):
        raise RuntimeError("all elements of target should be between 0 and 1")
    # Logs are floored at -100 so that x == 0 or 1 gives a finite loss.
    log_x = xp.maximum(xp.log(x), -100)
    log_1mx = xp.maximum(xp.log1p(-x), -100)
    return ((y - 1) * log_1mx - y * log_x).astype(x.dtype, copy=False)


def _bce_backward(ctx, g):
    x, y = ctx.inputs
    gx = g * (x - y) / ((1 - x) * x).clamp_min(_EPSILON) if ctx.needs_grad(0) else None
    gy = g * ((-x).log1p() - x.log()) if ctx.needs_grad(1) else None  # -logit(x), PyTorch's target gradient
    return gx, gy


BINARY_CROSS_ENTROPY = defop(
    "binary_cross_entropy", _bce_kernel, _bce_backward,
    Pointwise("({1} - 1) * max(log1p(-{0}), -100) - {1} * max(log({0}), -100)"),
    promotion="float", saves="inputs", meta=True)

# binary_cross_entropy_with_logits's elementwise loss ``(1 - y) x - log_sigmoid(x)`` and its gradient
# ``g (sigmoid(x) - y)`` as one expression each: as a composite, the forward and backward took 12 ms on 10^6 float32
# (torch 3.8); eager float32 runs each row as one generated kernel (`native_eager.pointwise`).
# log1p(e) for e = exp(-|x|) in (0, 1] is Goldberg's ``log(1 + e) * e / ((1 + e) - 1)``, exact to a few ulps where
# the plain log(1 + e) would round e below 1e-8 away: the IR has log, not log1p.
_E = "exp(-abs({0}))"
_LOG1P_E = f"((1 + {_E}) == 1 ? {_E} : log(1 + {_E}) * {_E} / ((1 + {_E}) - 1))"
_BCE_LOGITS = f"(1 - {{1}}) * {{0}} - min({{0}}, 0) + {_LOG1P_E}"
_BCE_LOGITS_GRAD = "{0} * (sigmoid({1}) - {2})"


def _bce_logits_kernel(xp, x, y):
    from . import native_eager

    out = native_eager.pointwise(BCE_LOGITS, x, y)
    if out is not None:
        return out
    wide = x.dtype.itemsize < 4  # half types in float32, as ATen's CPU kernels compute them
    a, b = (converted(x, _F32), converted(y, _F32)) if wide else (x, y)
    loss = (1 - b) * a - xp.minimum(a, 0) + xp.log1p(xp.exp(-xp.abs(a)))
    return loss.astype(x.dtype, copy=False)


def _bce_logits_grad_kernel(xp, g, x, y):
    from . import native_eager

    out = native_eager.pointwise(BCE_LOGITS_BACKWARD, g, x, y)
    if out is not None:
        return out
    wide = x.dtype.itemsize < 4
    gg, a, b = (converted(v, _F32) for v in (g, x, y)) if wide else (g, x, y)
    return (gg * (1 / (1 + xp.exp(-a)) - b)).astype(x.dtype, copy=False)


def _bce_logits_backward(ctx, g):
    from .._dispatch import apply

    x, y = ctx.inputs
    gx = apply(BCE_LOGITS_BACKWARD, g, x, y) if ctx.needs_grad(0) else None
    return gx, (-(g * x) if ctx.needs_grad(1) else None)  # PyTorch's target gradient, -x g


def _bce_logits_grad_backward(ctx, gg):
    g, x, y = ctx.inputs
    s = x.sigmoid()
    return (gg * (s - y) if ctx.needs_grad(0) else None), (gg * g * s * (1 - s) if ctx.needs_grad(1) else None), \
        (-(gg * g) if ctx.needs_grad(2) else None)


BCE_LOGITS = defop("binary_cross_entropy_with_logits", _bce_logits_kernel, _bce_logits_backward,
                   Pointwise(_BCE_LOGITS), promotion="keep", saves="inputs", meta=True,
                   grad_name="BinaryCrossEntropyWithLogitsBackward0")
BCE_LOGITS_BACKWARD = defop("binary_cross_entropy_with_logits_backward", _bce_logits_grad_kernel,
                            _bce_logits_grad_backward, Pointwise(_BCE_LOGITS_GRAD), promotion="keep",
                            saves="inputs", meta=True)

from . import nn_fused  # noqa: F401,E402 - registers the fused softmax, layer_norm and nll_loss rows


_ERRORS = {"RuntimeError": RuntimeError, "IndexError": IndexError}


def _check_range_kernel(xp, t, low, high, below, above, error="RuntimeError"):
    """A copy of the integer tensor ``t`` when every value is in ``[low, high)``; else eager's ``error``: the
    ``below`` or ``above`` message, formatted with the first offending flat ``index`` and ``value``."""
    if t.size:
        flat = t.reshape(-1)
        for bad, message in ((flat < low, below), (flat >= high, above)):
            if bool(bad.any()):
                i = int(bad.argmax())
                raise _ERRORS[error](message.format(index=i, value=int(flat[i]), low=low, high=high))
    return t.copy()


# An index check as a row rather than a Python ``if``: a compiled graph keeps it (run on the host where it stands)
# instead of breaking at the value read, and the op reading the checked copy cannot run before it.
CHECK_RANGE = defop("check_range", _check_range_kernel, NOT_DIFFERENTIABLE, Opaque("a range check read on the host"))
