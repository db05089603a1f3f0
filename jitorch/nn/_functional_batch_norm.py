"""Batch and instance normalization: ``batch_norm`` and ``instance_norm``, the norms that keep running statistics.

Split from ``_functional_norm.py`` (for size), which re-exports them. In training the batch's statistics normalize
and the running ones, if given, are updated in place (without recording autograd) with ``running = (1 - momentum) *
running + momentum * batch_stat``, the running variance taking the unbiased batch variance; in evaluation the running
statistics normalize. Half inputs give PyTorch's CPU output, one fused multiply-add in float32 (`_half_transform`).

>>> import jitorch
>>> from jitorch.nn._functional_batch_norm import instance_norm
>>> instance_norm(jitorch.tensor([[[1.0, 3.0], [2.0, 6.0]]]), eps=0.0)
tensor([[[-1.,  1.],
         [-1.,  1.]]])
"""
from __future__ import annotations

import math
import struct

import numpy as np

from .. import _dtype
from .._dispatch_modes import MODES
from ..autograd import grad as autograd_grad
from ..autograd.grad_mode import enable_grad, is_grad_enabled, no_grad
from ..autograd.saved_hooks import one_op
from .._dispatch import apply
from .._vmap import unmapped_in_vmap
from ..ops.half_batch_norm import HALF_BATCH_NORM
from ..ops.nn_batch_norm import BATCH_NORM
from ..ops.nn_fused import FUSED_DTYPES
# (``_functional_norm`` is loaded first and imports this module at its end, once these are defined)
from ._functional_norm import (_HALF, _affine, _channel_view, _in_suggested_layout, _normalize_over, _refuse_mixed,
                               _refuse_non_float, _upcast, _verify_batch_size)

__all__ = ["batch_norm", "instance_norm"]


def _half_transform(input, x, mean, var, eps, weight, bias, half_params, view):
    """PyTorch's CPU batch-norm output for a half ``input`` (``x`` is it in float32): ``x * alpha + beta`` with
    ``alpha = invstd * weight`` and ``beta = bias - mean * alpha``, one fused multiply-add rounded once (emulated in
    float64, whose product is exact). In training native_batch_norm keeps the batch statistics in the parameters'
    dtype (``half_params``: the input's, unless one of weight, bias and the running statistics is float32).
    Evaluation (``half_params=None``) uses the running statistics as they are. Returns the output and the ``(mean,
    invstd)`` its backward reads (float32 tensors holding the saved statistics' values)."""
    if half_params:
        if input.dtype == _dtype.bfloat16:
            # Its kernel keeps the sum of squared deviations in bfloat16 and divides it by the count in bfloat16
            # arithmetic (c10's BFloat16 / int64_t rounds the count, then the quotient).
            n = input.numel() // mean.numel()
            var = _bf16(_bf16(var * n) / _bf16_number(n))
        mean, invstd = mean.to(input.dtype).float(), (1 / (var + eps).sqrt()).to(input.dtype).float()
    else:
        invstd = 1 / (var + eps).sqrt()
    alpha = invstd if weight is None else invstd * view(weight).float()
    beta = -mean * alpha if bias is None else view(bias).float() - mean * alpha
    return (x.double() * alpha.double() + beta.double()).float().to(input.dtype), mean, invstd


def _half_batch_norm(input, weight, bias, running_mean, running_var, training, eps, update=None):
    """A half ``input``'s batch norm as ATen's CPU kernels round it: the float32 composite forward; where a gradient
    is recorded, wrapped in the `HALF_BATCH_NORM` row so that the backward rounds as ATen's too (the composite's own
    gradient, one half step off on about one element in ten, stays the create_graph and transforms' gradient).
    ``update(mean, var)`` updates the running statistics from the batch's (training)."""
    # ATen's parameters' type (its is_mixed_type): the input's, or float32 where one of them is
    half_params = all(t is None or t.dtype == input.dtype for t in (weight, bias, running_mean, running_var))
    stats = (running_mean, running_var, half_params if training else None)
    if not (is_grad_enabled() and type(input._data) is np.ndarray and input._data.size and not MODES and
            any(t is not None and t.requires_grad for t in (input, weight, bias))):
        return _half_composite(input, weight, bias, stats, eps, update)[0]
    with no_grad():
        out, mean, invstd = _half_composite(input, weight, bias, stats, eps, update)
    if training:
        running_mean = running_var = None  # not read by the backward; updated in place by later steps
    else:  # ATen's backward takes 1 / sqrt(running_var + eps) in double
        mean, invstd = running_mean.float(), 1 / (running_var.double() + eps).sqrt()

    def recompute(input, weight, bias, running_mean, running_var, g, needs):
        # The composite forward again, from the tensors themselves: its gradients depend on them (double backward).
        wrt = [t for t, need in zip((input, weight, bias), needs) if need]
        if not wrt:
            return None, None, None
        with enable_grad():
            out = _half_composite(input, weight, bias, (running_mean, running_var, stats[2]), eps)[0]
            got = iter(autograd_grad(out, wrt, g, create_graph=True, allow_unused=True))
        return tuple(next(got) if need else None for need in needs)

    return apply(HALF_BATCH_NORM, input, weight, bias, running_mean, running_var, out.detach(), mean.reshape(-1),
                 invstd.reshape(-1), train=training, half_params=half_params, recompute=recompute)


def _half_composite(input, weight, bias, stats, eps, update=None):
    """The float32 composite forward of a half batch norm: (output, saved mean, saved invstd). ``stats``: the
    running mean and variance, and in training whether the parameters are half (None in evaluation)."""
    running_mean, running_var, half_params = stats
    x = input.float()
    ndim = x.dim()
    view = lambda t: _channel_view(t, ndim)  # noqa: E731 - a one-line closure over ndim
    if half_params is not None:
        with one_op():
            _, mean, var = _normalize_over(x, (0,) + tuple(range(2, ndim)), eps)
            if update is not None:
                update(mean, var)
        return _half_transform(input, x, mean, var, eps, weight, bias, half_params, view)
    rm, rv = view(running_mean).float(), view(running_var).float()
    return _half_transform(input, x, rm, rv, eps, weight, bias, None, view)


def _check_channels(name, t, channels):
    if t is not None and t.numel() != channels:
        raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")


def _check_stats_no_grad(op, running_mean, running_var):
    # PyTorch's kernels are not differentiable in the running statistics, and say so.
    if is_grad_enabled():
        for name, t in (("running_mean", running_mean), ("running_var", running_var)):
            if t is not None and t.requires_grad:
                raise RuntimeError(f"The function '{op}' is not differentiable with respect to argument '{name}'. "
                                   "This input cannot have requires_grad True.")


def _update_running(running, stat, momentum):
    # float16 running statistics are updated in float32 from the float32 batch statistic and rounded once, as
    # PyTorch; bfloat16 ones take `_update_bfloat16_stats`.
    wide = _dtype.float32 if running.dtype in _HALF else running.dtype
    with no_grad():
        running.copy_(stat.detach().to(wide) * momentum + running.to(wide) * (1 - momentum))


def _bf16(t):
    """``t`` (float32) rounded to bfloat16 and back: one c10 ``BFloat16`` operation's result."""
    return t.to(_dtype.bfloat16).float()


def _bf16_number(value):
    """A Python number as c10 converts it to ``BFloat16`` (to float32, then round to nearest even), as a float."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _update_bfloat16_stats(running_mean, running_var, mean, var, n, momentum):
    """ATen's update of bfloat16 running statistics from a bfloat16 batch, every step in c10 ``BFloat16`` arithmetic.

    Its kernel rounds the momentum, the batch mean and the sum of squared deviations to bfloat16; each
    ``BFloat16 * BFloat16`` product and sum rounds again, the unbiased variance is ``BFloat16 / int64_t`` (the count
    rounded too), and only the variance's ``momentum * unbiased`` term stays float32. A float32 update rounded once
    lands one bfloat16 step away on about one channel in ten.
    """
    m = _bf16_number(momentum)
    keep = _bf16_number(1 - m)
    mean_b, var_sum_b = _bf16(mean.detach()), _bf16(var.detach() * n)
    unbiased = _bf16(var_sum_b / _bf16_number(n - 1))
    with no_grad():
        running_mean.copy_(_bf16(_bf16(mean_b * m) + _bf16(running_mean.float() * keep)))
        running_var.copy_(unbiased * m + _bf16(running_var.float() * keep))


def _update_batch_stats(running_mean, running_var, mean, var, n, momentum):
    # An empty batch has no statistics (its mean is nan): PyTorch leaves the running ones as they were.
    if running_mean is None or n <= 0:
        return
    if running_mean.dtype == running_var.dtype == _dtype.bfloat16 and running_mean.device.type == "cpu":
        _update_bfloat16_stats(running_mean, running_var, mean.reshape(-1), var.reshape(-1), n, momentum)
        return
    _update_running(running_mean, mean.reshape(-1), momentum)
    _update_running(running_var, var.reshape(-1) * (n / (n - 1)), momentum)


_VMAP_STATS_ERROR = (
    "Batch norm got a batched tensor as input while the running_mean or running_var, which will be updated in place, "
    "were not batched.\nIf you are using a module and do not need eval mode, please set `track_running_stats` to be "
    "False.If you are using a prebuilt module and do not need eval mode, please see the functorch website for "
    "resources on how to patch your module to work with vmap")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalize each channel (dim 1) over the batch and spatial dims, then scale by ``weight``, shift by ``bias``.

    In training (or without running statistics) the batch's statistics are used and the running ones, if given,
    updated in place; in evaluation the running statistics are used.
    """
    out = _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    return _in_suggested_layout(out, input)


def _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps):
    if training:
        _verify_batch_size(input.size())
    if training and eps <= 0.0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    if eps < 0.0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    channels = input.shape[1] if input.dim() > 1 else 0
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_channels(name, t, channels)
    if not training and running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    _check_stats_no_grad("batch_norm", running_mean, running_var)
    _refuse_non_float("batch_norm", input)
    _refuse_mixed(input, weight, bias, running_mean, running_var)
    if training and running_mean is not None and unmapped_in_vmap(running_mean, running_var):
        raise RuntimeError(_VMAP_STATS_ERROR)
    x = _upcast(input)
    ndim = x.dim()
    view = lambda t: _channel_view(t, ndim)  # noqa: E731 - a one-line closure over ndim
    if training:
        dims = (0,) + tuple(range(2, ndim))
        if ndim > 1 and x is input and x._data.dtype in FUSED_DTYPES and x._data.size and \
                all(t is None or t._data.dtype == x._data.dtype for t in (weight, bias)):
            # One row (PyTorch's native_batch_norm) and one for its backward: a third of the composite's passes.
            with one_op():  # torch's native op updates the statistics before it saves (checkpoint's early stop)
                out, mean, var = apply(BATCH_NORM, x, weight, bias, eps=eps)
                _update_batch_stats(running_mean, running_var, mean, var, x.numel() // channels, momentum)
            return out.to(input.dtype)
        if x is not input:
            def update(mean, var):
                _update_batch_stats(running_mean, running_var, mean, var, x.numel() // max(channels, 1), momentum)

            return _half_batch_norm(input, weight, bias, running_mean, running_var, True, eps, update)
        with one_op():
            out, mean, var = _normalize_over(x, dims, eps)
            _update_batch_stats(running_mean, running_var, mean, var, x.numel() // max(channels, 1), momentum)
    elif x is not input:
        return _half_batch_norm(input, weight, bias, running_mean, running_var, False, eps)
    else:
        out = (x - view(running_mean)) * view(running_var + eps).rsqrt()
    return _affine(out, weight, bias, view).to(input.dtype)


def _verify_spatial_size(size):
    prod = 1
    for s in size[2:]:
        prod *= s
    if prod == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {size}")


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalize each channel of each sample over its spatial dims (``(N, C, *)`` input).

    Running statistics, if given, are updated with the batch average of the per-instance statistics.
    """
    out = _instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    return out.contiguous()  # ATen's is a batch norm of a row-major (1, N*C, *) view, channels-last inputs included


def _instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps):
    if use_input_stats:
        _verify_spatial_size(input.size())
    if input.dim() < 2:
        raise RuntimeError(f"instance_norm: expected an input of shape (N, C, *), but got {list(input.shape)}")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_channels(name, t, channels)
    _check_stats_no_grad("instance_norm", running_mean, running_var)
    _refuse_non_float("batch_norm", input)  # ATen's instance norm is a batch norm of the (1, N*C, *) view
    _refuse_mixed(input, weight, bias)  # (of running statistics, torch's repeats take any float dtype)
    x = _upcast(input)
    ndim = x.dim()
    view = lambda t: _channel_view(t, ndim)  # noqa: E731
    if use_input_stats:
        dims = tuple(range(2, ndim))
        out, mean, var = _normalize_over(x, dims, eps)
        n = math.prod(x.shape[2:])
        # As in PyTorch (batch norm of the (1, N*C, *) view, then a mean over N): empty instances leave the running
        # statistics as they were; an empty batch of instances makes them nan.
        if running_mean is not None and n > 0:
            _update_running(running_mean, mean.reshape(x.shape[0], channels).mean(0), momentum)
            _update_running(running_var, var.reshape(x.shape[0], channels).mean(0) * (n / (n - 1)), momentum)
        if x is not input:  # PyTorch's is a batch norm of the (1, N*C, *) view: its half output
            half_params = all(t is None or t.dtype == input.dtype for t in (weight, bias, running_mean, running_var))
            return _half_transform(input, x, mean, var, eps, weight, bias, half_params, view)[0]
    else:
        if running_mean is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        if x is not input:
            rm, rv = view(running_mean).float(), view(running_var).float()
            return _half_transform(input, x, rm, rv, eps, weight, bias, None, view)[0]
        out = (x - view(running_mean)) * view(running_var + eps).rsqrt()
    return _affine(out, weight, bias, view).to(input.dtype)
