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

from .table import NOT_DIFFERENTIABLE, Opaque, Pointwise, defop

__all__ = ["BINARY_CROSS_ENTROPY", "CHECK_RANGE"]

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
