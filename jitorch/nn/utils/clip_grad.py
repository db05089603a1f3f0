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
import math
import types
import warnings

import numpy as np

from ..._dispatch import MODES
from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ...ops.linalg import _vector_norm_kernel

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _no_grad(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with no_grad():
            return fn(*args, **kwargs)
    return wrapper


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _host_arrays(tensors):
    """The writable float32/float64 NumPy arrays behind ``tensors``, or None where the clipping must go through the
    dispatcher: another device or dtype, an inference tensor, or a mode that must see the ops (a compile trace, a CPU
    graph capture, the profiler). On the arrays a few gradients clip in a few microseconds instead of ~20 dispatches;
    the arithmetic is the same rows' (the norm's kernel, torch's ``reciprocal(total + 1e-6) * max_norm``)."""
    if MODES:
        return None
    arrays = []
    for t in tensors:
        a = getattr(t, "_data", None)
        if type(a) is not np.ndarray or a.dtype not in _HOST_FLOATS or not a.size or t._inference \
                or not a.flags.writeable:
            return None
        arrays.append(a)
    return arrays


_HOST_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# The clip ufunc itself: np.clip's wrapper costs 3 us a call (most of clipping 50 small gradients). It keeps ATen's
# zero signs (clip 0.0 keeps -0.0 and clips -1.5 to -0.0, where maximum-then-minimum gives +0.0) and NaN.
_clip = getattr(getattr(np, "_core", None) and np._core.umath, "clip", np.clip)
_SMALL = 4096


def _two_norm(a):
    """The 2-norm of an array: the norm row's kernel, except for C-contiguous arrays below ``_SMALL`` elements: a
    BLAS dot, 0.3 us where einsum's call costs 3 (most of clipping 50 small gradients); its float32 sum differs from
    einsum's in the last bits, as both differ from ATen's."""
    if a.size < _SMALL and a.flags.c_contiguous:
        flat = a.reshape(-1)
        return np.sqrt(flat.dot(flat)).astype(a.dtype)
    return np.asarray(_vector_norm_kernel(np, a, 2.0, None, False))


def _nonfinite_error(norm_type):
    return RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it "
                        "cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
                        "anyway, set `error_if_nonfinite=False`")


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
    arrays = _host_arrays(tensors)
    if arrays is not None:
        norms = np.stack([_two_norm(a) if norm_type == 2.0
                          else np.asarray(_vector_norm_kernel(np, a, norm_type, None, False)) for a in arrays])
        total = np.asarray(_vector_norm_kernel(np, norms, norm_type, None, False))
        if error_if_nonfinite and not np.isfinite(total):
            raise _nonfinite_error(norm_type)
        return Tensor._make(total)
    first_device = tensors[0].device
    norms = [linalg.vector_norm(t, norm_type).to(first_device) for t in tensors]
    total_norm = linalg.vector_norm(_movement.stack(norms), norm_type)
    if error_if_nonfinite and bool(total_norm.isnan() | total_norm.isinf()):
        raise _nonfinite_error(norm_type)
    return total_norm


@_no_grad
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the parameters' gradients in place by ``min(1, max_norm / (total_norm + 1e-6))``."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    _check_foreach(foreach, grads)
    arrays = _host_arrays(grads)
    total = getattr(total_norm, "_data", None)
    if arrays is not None and type(total) is np.ndarray and total.dtype in _HOST_FLOATS and total.ndim == 0:
        coef = np.minimum(np.reciprocal(total + 1e-6) * float(max_norm), 1.0)
        for g, a in zip(grads, arrays):
            # A 0-d coefficient takes the gradient's dtype first, as torch's ``mul_`` with a 0-d tensor computes.
            # Times 1 (nothing to clip) every value stays as it is: only the version advances, as the mul_'s would.
            if coef != 1:
                np.multiply(a, a.dtype.type(coef), out=a)
            g._bump_version()
        return
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
    arrays = _host_arrays(grads) if math.isfinite(clip_value) else None
    if arrays is not None:  # torch's clamp_ on each, in place on the arrays (NaN stays NaN in both)
        low, high = -clip_value, clip_value
        for g, a in zip(grads, arrays):
            _clip(a, low, high, out=a)
            g._bump_version()
        return
    for g in grads:
        g.clamp_(min=-clip_value, max=clip_value)
