"""The gradient of a float16/bfloat16 batch norm as PyTorch's CPU kernels round it, as a row around the forward.

``half_batch_norm(input, weight, bias, running_mean, running_var, out, mean, invstd)`` returns ``out`` (the forward
the caller already computed, `_functional_batch_norm._half_transform`, bit for bit ATen's) and records a backward
that replays ATen's arithmetic from the statistics it saved (``mean``, ``invstd``: float32 arrays holding the values
of the parameters' dtype; in evaluation the running mean and ``1 / sqrt(running_var + eps)`` in float64). Which of
ATen's two loops runs depends on the layouts (Normalization.cpp ``batch_norm_backward_cpu_template``):

- input and upstream gradient in one dense layout (row-major or channels-last): batch_norm_kernel.cpp's loop in
  float32, each result rounded once:
  ``dx = ((dy - sum/N) - (x - mean) * k) * invstd * w`` with ``k = dotp * invstd^2 / N``, ``dotp = sum((x - mean) *
  dy)``; ``dw = dotp * invstd``, ``db = sum(dy)``.
- otherwise: the generic loop, every step in c10 ``BFloat16``/``Half`` arithmetic (each product and difference
  rounded to the parameters' dtype, ``sum(dy)`` and ``k`` kept in the input's, a count divided by rounded first).

The composite gradient through the float32 forward lands one half step away on about one element in ten; the row's
backward is used only for a first-order gradient: with ``create_graph`` it differentiates the composite forward
(``recompute``), so double backward and forward-mode AD keep their graph.
"""
from __future__ import annotations

import numpy as np

from .._grad_state import GradState
from .._memory_format import channels_last, channels_last_3d, is_contiguous_as, suggest_memory_format
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["HALF_BATCH_NORM", "HALF_BATCH_NORM_BACKWARD", "half_batch_norm_grads"]

_F32 = np.dtype(np.float32)


def _round(a, dtype):
    """``a`` (float32) rounded to ``dtype`` and back: one c10 operation's result (float32 keeps ``a``)."""
    return a if dtype == _F32 else a.astype(dtype).astype(_F32)


def _dense(arr):
    # Normalization.cpp's is_contiguous: row-major or a channels-last layout.
    return is_contiguous_as(arr, None) or is_contiguous_as(arr, channels_last) or \
        is_contiguous_as(arr, channels_last_3d)


def _channel_sum(a, dims):
    # float32 accumulation in ATen; summed in float64 here and rounded once (the order of a float32 sum is not ours)
    return a.sum(dims, dtype=np.float64).astype(_F32)


def half_batch_norm_grads(g, x, weight, mean, invstd, train, half_params):
    """(dx, dw, db) arrays as ATen's CPU backward computes them for a half ``x`` (see the module notes), in
    ``half_params``: whether ATen's parameters' type is the input's (else float32)."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    dims = (0,) + tuple(range(2, x.ndim))
    n = x.size // x.shape[1]
    param = x.dtype if half_params else _F32
    w = np.ones(x.shape[1], _F32) if weight is None else weight.astype(_F32)
    xf, gf = x.astype(_F32), g.astype(_F32)
    fast = _dense(x) and _dense(g) and suggest_memory_format(x) is suggest_memory_format(g)
    if fast:
        mean, invstd = mean.astype(_F32), invstd.astype(_F32)  # the loop's opmath values
        centered = xf - mean.reshape(shape)
    else:
        mean, invstd = _round(mean.astype(_F32), param), _round(invstd.astype(_F32), param)
        centered = _round(xf - mean.reshape(shape), param)
    s = _channel_sum(gf, dims)
    dotp = _channel_sum(_round(centered * gf, param) if not fast else centered * gf, dims)
    dx = _input_grad(fast, gf, centered, s, dotp, mean, invstd, w, n, train, x.dtype, param, shape)
    dw = (dotp * invstd).astype(param)
    db = (s if fast else _round(s, x.dtype)).astype(param)  # the generic loop's sum is a half tensor
    return dx, dw, db


def _input_grad(fast, gf, centered, s, dotp, mean, invstd, w, n, train, dtype, param, shape):
    view = lambda t: t.reshape(shape)  # noqa: E731 - a per-channel vector against the input
    count = np.float32(n)
    if fast:
        if not train:
            return (gf * view(invstd) * view(w)).astype(dtype)
        k = dotp * invstd * invstd / count
        return (((gf - view(s / count)) - centered * view(k)) * view(invstd) * view(w)).astype(dtype)
    # The generic loop: each c10 operation rounds to its operands' type (the parameters' for a product with one).
    r = lambda a: _round(a, param)  # noqa: E731
    if not train:
        return r(r(gf * view(invstd)) * view(w)).astype(dtype)
    # at::sum of the gradient: its bfloat16 result rounded; a float16 one reads as the float32 sum (measured on
    # torch 2.13's CPU kernels: rounding it moves about one float16 gradient in twenty)
    s_in = s if dtype == np.float16 else _round(s, dtype)
    count_p, count_in = _round(count, param), _round(count, dtype)
    k = _round(r(r(r(_round(dotp, dtype) * invstd) * invstd) / count_p), dtype)
    gi = _round(centered * view(k), dtype)
    grad_mean = _round(s_in / count_in, dtype)
    diff = _round(_round(gf - view(grad_mean), dtype) - gi, dtype)
    return r(r(diff * view(invstd)) * view(w)).astype(dtype)


def _forward_kernel(xp, input, weight, bias, running_mean, running_var, out, mean, invstd, **attrs):
    return out


def _forward_backward(ctx, g):
    input, weight, bias, running_mean, running_var, _out, mean, invstd = ctx.inputs
    needs = (ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2))
    if GradState.enabled:  # create_graph: the composite's gradient, which has a graph of its own
        return ctx.attrs["recompute"](input, weight, bias, running_mean, running_var, g, needs) + (None,) * 5
    from .._dispatch import apply

    grads = apply(HALF_BATCH_NORM_BACKWARD, g, input, weight, mean, invstd, train=ctx.attrs["train"],
                  half_params=ctx.attrs["half_params"])
    return tuple(t if need else None for t, need in zip(grads, needs)) + (None,) * 5


def _backward_kernel(xp, g, x, weight, mean, invstd, *, train, half_params):
    return half_batch_norm_grads(g, x, weight, mean, invstd, train, half_params)


HALF_BATCH_NORM = defop("half_batch_norm", _forward_kernel, _forward_backward,
                        Opaque("the forward's values, ATen's half backward"), saves="inputs",
                        grad_name="NativeBatchNormBackward0")
# Run only without create_graph (see `_forward_backward`): never differentiated.
HALF_BATCH_NORM_BACKWARD = defop("half_batch_norm_backward", _backward_kernel, NOT_DIFFERENTIABLE,
                                 Opaque("channel sums and a pointwise pass"), nout=3,
                                 grad_name="NativeBatchNormBackwardBackward0")
