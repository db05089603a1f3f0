"""Gradient clipping: ``clip_grad_norm_``, ``clip_grad_value_``, ``get_total_norm``, ``clip_grads_with_norm_``.

>>> import jitorch
>>> from jitorch import nn
>>> p = nn.Parameter(jitorch.zeros(2)); p.grad = jitorch.tensor([3.0, 4.0])
>>> nn.utils.clip_grad_norm_([p], max_norm=1.0)
tensor(5.)
>>> p.grad
tensor([0.6000, 0.8000])
"""
from __future__ import annotations

import functools
import types
import warnings

from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _no_grad(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with no_grad():
            return fn(*args, **kwargs)
    return wrapper


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _check_foreach(foreach, tensors):
    # jitorch has no fused multi-tensor kernels; foreach=True is honoured on devices where PyTorch has them.
    if foreach and any(t.device.type not in ("cpu", "cuda") for t in tensors):
        raise RuntimeError("foreach=True was passed, but can't use the foreach API on this device's tensors")


@_no_grad
def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type`` norm of all ``tensors`` together (as if concatenated into one vector)."""
    from ... import _creation, _movement, linalg

    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return _creation.tensor(0.0)
    _check_foreach(foreach, tensors)
    first_device = tensors[0].device
    norms = [linalg.vector_norm(t, norm_type).to(first_device) for t in tensors]
    total_norm = linalg.vector_norm(_movement.stack(norms), norm_type)
    if error_if_nonfinite and bool(total_norm.isnan() | total_norm.isinf()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it "
                           "cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
                           "anyway, set `error_if_nonfinite=False`")
    return total_norm


@_no_grad
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the parameters' gradients in place by ``min(1, max_norm / (total_norm + 1e-6))``."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    _check_foreach(foreach, grads)
    clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(clip_coef.to(g.device))


@_no_grad
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Rescale the gradients so that their total ``norm_type`` norm is at most ``max_norm``; returns the total norm
    before clipping (a 0-d tensor). ``parameters``: a tensor or an iterable of tensors."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and not parameters:
            warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=3)
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Deprecated alias of ``clip_grad_norm_``."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


@_no_grad
def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    _check_foreach(foreach, grads)
    for g in grads:
        g.clamp_(min=-clip_value, max=clip_value)
