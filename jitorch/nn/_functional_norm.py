"""Normalization in ``nn.functional``: ``batch_norm``, ``instance_norm``, ``layer_norm``, ``group_norm``,
``rms_norm``, ``local_response_norm`` and ``normalize``.

Statistics use the biased variance, as PyTorch; ``batch_norm`` and ``instance_norm`` update running statistics in
place (without recording autograd) with ``running = (1 - momentum) * running + momentum * batch_stat``, the running
variance taking the unbiased batch variance; they live in ``_functional_batch_norm.py`` (split for size), re-exported
here. Half-precision inputs are normalized in float32 and cast back, as PyTorch's kernels accumulate in float32.

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> x = jitorch.tensor([[1.0, 3.0], [3.0, 5.0]])
>>> F.layer_norm(x, [2], eps=0.0)
tensor([[-1.,  1.],
        [-1.,  1.]])
>>> rm, rv = jitorch.zeros(2), jitorch.ones(2)
>>> _ = F.batch_norm(x, rm, rv, training=True)
>>> rm, rv
(tensor([0.2000, 0.4000]), tensor([1.1000, 1.1000]))
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype, _movement
from .._tensor import Tensor
from .._memory_format import contiguous_format, suggested_format
from .._dispatch import TORCH_TYPE_NAMES, apply
from ..ops.group_norm import GROUP_NORM
from ..ops.nn_fused import FUSED_DTYPES, LAYER_NORM, layer_norm_output

__all__ = ["batch_norm", "instance_norm", "layer_norm", "group_norm", "rms_norm", "local_response_norm", "normalize"]

_HALF = (_dtype.float16, _dtype.bfloat16)


def _upcast(input):
    return input.float() if input.dtype in _HALF else input


def _channel_view(t, ndim):
    """A per-channel vector shaped to broadcast against an ``(N, C, *)`` input."""
    return t.reshape((1, -1) + (1,) * (ndim - 2)) if ndim > 1 else t


def _affine(out, weight, bias, view):
    if weight is not None:
        out = out * view(weight)
    if bias is not None:
        out = out + view(bias)
    return out


def _normalize_over(x, dims, eps):
    """(x - mean) / sqrt(var + eps) over ``dims``; returns (normalized, mean, biased var), stats with kept dims."""
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(dims, keepdim=True)
    return centered * (var + eps).rsqrt(), mean, var


def _verify_batch_size(size):
    prod = size[0]
    for s in size[2:]:
        prod *= s
    if prod == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _in_suggested_layout(out, input, fmt=None):
    """``out`` laid out as ATen's normalization kernels write their results: in ``input``'s suggested memory format
    ``fmt`` (channels-last for a channels-last input, else row-major, whatever other strides ``input`` has); ``out``
    itself when it has that layout."""
    return out.contiguous(memory_format=suggested_format(input) if fmt is None else fmt)


def _normalized_shape(input, normalized_shape, op):
    if type(normalized_shape) is tuple and len(normalized_shape) == 1 and type(normalized_shape[0]) is int:
        shape = normalized_shape  # ``(features,)``, nearly every call: nothing to convert
    else:
        if isinstance(normalized_shape, int) or not hasattr(normalized_shape, "__iter__"):
            raise TypeError(f"{op}(): argument 'normalized_shape' (position 2) must be tuple of ints, not "
                            f"{type(normalized_shape).__name__}")
        shape = tuple(map(int, normalized_shape))
    k = len(shape)
    full = input._data.shape
    if len(full) < k or full[len(full) - k:] != shape:
        raise RuntimeError(f"{op}: Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    return shape


def _normalized_dims(input, normalized_shape, op):
    shape = _normalized_shape(input, normalized_shape, op)
    return shape, tuple(range(-len(shape), 0))


def _refuse_non_float(kernel, input, complex_ok=False):
    """ATen's norm kernels are real floating only (``rms_norm``, a composite, takes complex too); the composites here
    would fail inside a mean or finfo instead, or normalize a complex input torch refuses."""
    if not (input.dtype.is_floating_point or complex_ok and input.dtype.is_complex):
        raise NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES[input.dtype.name]}\'')


def _refuse_mixed(input, *params):
    """ATen's CPU norm kernels take parameters (weight, bias, running statistics) of another dtype than the input only
    when the input is a half type and they are all float32; anything else is refused, not promoted."""
    dt = input.dtype
    for p in params:  # (a loop, not all() over a generator: this runs on every training batch norm)
        if p is not None and p.dtype is not dt:
            break
    else:
        return
    if input.device.type != "cpu":
        return
    if any(p is not None and p.dtype is not _dtype.float32 for p in params):
        raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
    if dt not in (_dtype.float16, _dtype.bfloat16):
        raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")


def _check_like(name, t, shape):
    if t is not None and t._data.shape != shape:
        raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                           f"{list(t.shape)} and normalized_shape = {list(shape)}")


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims, then apply elementwise ``weight`` and ``bias``."""
    data, shape = input._data, normalized_shape
    # ``(features,)`` matching the input, nearly every call (nn.LayerNorm's): `_normalized_shape`'s checks inline
    if type(shape) is not tuple or len(shape) != 1 or type(shape[0]) is not int or data.shape[-1:] != shape:
        shape = _normalized_shape(input, normalized_shape, "layer_norm")
    if weight is not None and weight._data.shape != shape or bias is not None and bias._data.shape != shape:
        _check_like("weight", weight, shape)
        _check_like("bias", bias, shape)
    dt = data.dtype
    if (dt in FUSED_DTYPES and (weight is None or weight._data.dtype == dt)
            and (bias is None or bias._data.dtype == dt) and data.size):
        # One row (PyTorch's native_layer_norm): one node instead of about ten, mean and rstd kept for backward.
        out = layer_norm_output(input, weight, bias, len(shape), eps)
        return out if out is not None else apply(LAYER_NORM, input, weight, bias, k=len(shape), eps=eps)[0]
    _refuse_non_float("LayerNormKernelImpl", input)
    _refuse_mixed(input, weight, bias)
    if input.dtype in _HALF and type(data) is np.ndarray and data.size:
        # ATen normalizes half rows in float32 and rounds the output once: the float32 row on widened copies (the
        # composite below took 2.4x torch's time on a 1000x1000 bfloat16 input; this takes about torch's)
        weight, bias = (p.float() if p is not None else None for p in (weight, bias))
        # (ATen's output is row-major whatever the input's layout)
        return layer_norm(input.contiguous().float(), shape, weight, bias, eps).to(input.dtype)
    out = _normalize_over(_upcast(input), tuple(range(-len(shape), 0)), eps)[0]
    return _affine(out, weight, bias, lambda t: t).to(input.dtype)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x ** 2) + eps) * weight`` over the trailing ``normalized_shape`` dims.

    ``eps=None`` is the machine epsilon of the compute dtype (float32 for half inputs).
    """
    shape, dims = _normalized_dims(input, normalized_shape, "rms_norm")
    _check_like("weight", weight, shape)
    _refuse_non_float("rms_norm", input, complex_ok=True)
    x = _upcast(input)
    if eps is None:  # PyTorch's default is the epsilon of the compute dtype: float32's for half inputs
        eps = _dtype.finfo(x.dtype).eps
    fmt = suggested_format(input)
    # One temporary, the mean not kept by name: holding both made the product below 15% slower on a
    # 32x64x32x32 input (measured in one process, interleaved).
    shifted = (x * x).mean(dims, keepdim=True) + eps
    if fmt is not contiguous_format:
        # The (small) statistics in the input's layout: the product then writes it, where a row-major factor would
        # make it row-major and cost a copy of the whole result.
        shifted = shifted.contiguous(memory_format=fmt)
    out = x * shifted.rsqrt()
    if weight is not None:
        out = out * weight
    return _in_suggested_layout(out.to(input.dtype), input, fmt)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalize each group of ``C // num_groups`` channels of each sample, then apply per-channel affine."""
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    _refuse_non_float("GroupNormKernelImpl", input)
    _refuse_mixed(input, weight, bias)
    n, channels = input.shape[0], input.shape[1]
    _verify_batch_size([n * channels // num_groups, num_groups] + list(input.shape[2:]))
    if channels % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.numel() != channels):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, but "
                               f"got {name} of shape {list(t.shape)} and input of shape {list(input.shape)}")
    x = _upcast(input)
    half = x is not input and type(input._data) is np.ndarray  # the row rounds as ATen's (ops/group_norm.py)
    if (half or x._data.dtype in FUSED_DTYPES) and x._data.size:
        # One row (ops/group_norm.py): statistics and the per-channel affine in one kernel, its backward in another
        # (layer norm's row kernel and a separate affine took 2.7x torch's time for GroupNorm(8, 64) at 16x64x32x32).
        if not half:
            weight, bias = (p.to(x.dtype) if p is not None and p.dtype != x.dtype else p for p in (weight, bias))
        out = apply(GROUP_NORM, input if half else x, weight, bias, groups=num_groups, eps=eps)[0]
        return _in_suggested_layout(out.to(input.dtype), input)
    # the group size is spelled out: -1 cannot be inferred when the batch is empty
    group_size = channels // num_groups * math.prod(x.shape[2:])
    out = _normalize_over(x.reshape(n, num_groups, group_size), (2,), eps)[0].reshape(x.shape)
    ndim = x.dim()
    return _in_suggested_layout(_affine(out, weight, bias, lambda t: _channel_view(t, ndim)).to(input.dtype), input)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``x / (k + alpha * mean of x ** 2 over a window of size channels) ** beta`` (channels: dim 1)."""
    dim = input.dim()
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    sq = input * input
    # The window over channels, zero padded by size // 2 before and (size - 1) // 2 after, divided by size always
    # (PyTorch's average pooling with the padding counted).
    pad_shape = list(sq.shape)
    pad_shape[1] = size // 2
    before = sq.new_zeros(tuple(pad_shape))
    pad_shape[1] = (size - 1) // 2
    after = sq.new_zeros(tuple(pad_shape))
    padded = _movement.cat([before, sq, after], 1)
    channels = input.shape[1]
    total = padded.narrow(1, 0, channels)
    for offset in range(1, size):
        total = total + padded.narrow(1, offset, channels)
    div = (total / size * alpha + k) ** beta
    return input / div


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"normalize(): argument 'input' must be Tensor, not {type(input).__name__}")
    denom = input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)
    if out is None:
        return input / denom
    from .._pointwise import div

    return div(input, denom, out=out)


from ._functional_batch_norm import batch_norm, instance_norm  # noqa: E402,F401 - split for size; re-exported
