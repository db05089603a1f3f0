"""Pooling: ``max_pool1d/2d/3d``, ``avg_pool1d/2d/3d``, ``adaptive_{avg,max}_pool1d/2d/3d``, ``lp_pool1d/2d`` and
``max_unpool1d/2d/3d``.

Max pooling is one row (windowed max with flat indices, gradient scattered back); average pooling is a convolution
with a ones kernel (its gradient is the transposed convolution) divided by PyTorch's per-window divisor. The
adaptive pools live in ``_spatial_pool_adaptive.py`` (split for size), re-exported here.

>>> import jitorch
>>> from jitorch.nn._spatial_pool import max_pool2d
>>> max_pool2d(jitorch.arange(16.0).reshape(1, 1, 4, 4), 2)
tensor([[[[ 5.,  7.],
          [13., 15.]]]])
"""
from __future__ import annotations

import math

import numpy as np

from .. import _creation, _dtype
from .._dispatch import TORCH_TYPE_NAMES, apply
from ..amp._cast_mode import autocast_policy
from ..ops.conv_ops import CONSTANT_PAD, CONVOLUTION, MAX_POOL
from ._spatial_args import layout_as, ntuple

__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
           "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
           "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
           "adaptive_max_pool3d_with_indices", "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d", "max_unpool2d",
           "max_unpool3d"]


def pool_output_size(size, kernel, stride, pad, dilation, ceil_mode):
    """PyTorch's ``pooling_output_shape``: a ceil-mode window must start inside the input or its left padding."""
    num = size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _pool_dims_error(name, nd, input):
    if name == "max_pool1d":
        return RuntimeError(f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for "
                            f"input, but got:{list(input.shape)}")
    if name.startswith("max_pool"):
        return RuntimeError(f"non-empty {nd + 1}D or {nd + 2}D (batch mode) tensor expected for input")
    return RuntimeError(f"Expected {nd + 1} to {nd + 2} dimensions, but got {input.dim()}-dimensional tensor for "
                        f"argument #1 'self' (while checking arguments for {name})")


def _pool_args(name, nd, input, kernel_size, stride, padding, dilation, ceil_mode):
    if input.dim() not in (nd + 1, nd + 2):
        raise _pool_dims_error(name, nd, input)
    kernel = ntuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        ntuple(stride, nd, "stride")
    padding, dilation = ntuple(padding, nd, "padding"), ntuple(dilation, nd, "dilation")
    if any(s == 0 for s in stride):
        raise RuntimeError("stride should not be zero")
    if any(k <= 0 for k in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_size={list(kernel)}")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got dilation={list(dilation)}")
    for k, p, d in zip(kernel, padding, dilation):
        if p < 0 or p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    x = input.unsqueeze(0) if input.dim() == nd + 1 else input
    spatial = tuple(x.shape[2:])
    outs = tuple(pool_output_size(*a, ceil_mode) for a in zip(spatial, kernel, stride, padding, dilation))
    if any(o < 1 for o in outs) or x.shape[1] == 0:
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, (x.shape[1],) + spatial))}). Calculated output "
                           f"size: ({'x'.join(map(str, (x.shape[1],) + outs))}). Output size is too small")
    return x, kernel, stride, padding, dilation, outs


def _refuse_unordered(kernel, input):
    """PyTorch's max pools have no bool or complex kernels (NumPy would fail looking up the padding's lowest value)."""
    dt = input.dtype
    if dt is _dtype.bool or dt.is_complex:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES[dt.name]}\'')


def _max_poolnd(name, nd, input, kernel_size, stride, padding, dilation, ceil_mode):
    _refuse_unordered("max_pool3d" if nd == 3 else "max_pool2d", input)
    x, kernel, stride, padding, dilation, outs = _pool_args(name, nd, input, kernel_size, stride, padding, dilation,
                                                            ceil_mode)
    values, indices = apply(MAX_POOL, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                            out_sizes=outs)
    if x is not input:
        return values.squeeze(0), indices.squeeze(0)
    return layout_as(values, input), layout_as(indices, input)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    return _max_poolnd("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    return _max_poolnd("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    return _max_poolnd("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode)


def _check_max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """ATen's ``max_pool1d`` checks and words (its values-only op checks before any dispatch; the padding bound is
    half the kernel, not of the dilated window)."""
    (k,), (p,), (d,) = (ntuple(v, 1, n) for v, n in ((kernel_size, "kernel_size"), (padding, "padding"),
                                                     (dilation, "dilation")))
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else ntuple(stride, 1, "stride")[0]
    for ok, what in ((k > 0, f"kernel_size must be greater than zero, but got {k}"),
                     (s > 0, f"stride must be greater than zero, but got {s}"),
                     (p >= 0, f"padding must be non-negative, but got {p}"),
                     (p <= k // 2, f"padding should be at most half of kernel size, but got padding={p} and "
                                   f"kernel_size={k}"),
                     (d > 0, f"dilation must be greater than zero, but got {d}")):
        if not ok:
            raise RuntimeError(f"max_pool1d() {what}")
    out = pool_output_size(input.shape[-1], k, s, p, d, ceil_mode)
    if out <= 0:
        raise RuntimeError(f"max_pool1d() Invalid computed output size: {out}")


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of ``(N, C, L)``; ``return_indices`` adds the flat input index of each maximum.

    >>> import jitorch
    >>> x = jitorch.tensor([[[1.0, 3.0, 2.0, 0.0]]])
    >>> jitorch.nn.functional.max_pool1d(x, x.shape[2])  # TextCNN's max over time
    tensor([[[3.]]])
    """
    if not return_indices and input.dim() in (2, 3):  # (other ranks: the shared check's words)
        _check_max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode)
        _refuse_unordered("max_pool1d_impl", input)
    out = _max_poolnd("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode)
    return out if return_indices else out[0]


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of ``(N, C, H, W)`` (padding is -inf); indices are flat over ``H * W``."""
    out = _max_poolnd("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode)
    return out if return_indices else out[0]


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of ``(N, C, D, H, W)``."""
    if return_indices:  # torch's max_pool3d_with_indices: not on an autocast list
        return max_pool3d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    return _max_pool3d_values(input, kernel_size, stride, padding, dilation, ceil_mode)


@autocast_policy(cpu="fp32")  # torch's max_pool3d (the values only): float32 on CPU
def _max_pool3d_values(input, kernel_size, stride, padding, dilation, ceil_mode):
    return _max_poolnd("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode)[0]


def _avg_divisor(size, kernel, stride, pad, out, count_include_pad):
    """Per-output divisor along one dim, PyTorch's formula (windows clipped to input + padding, or to the input)."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def _in_float32(fn):
    """PyTorch averages halves in float32 and rounds once (a half window sum and divisor each round)."""
    def wrapper(name, nd, input, *args):
        if input.dtype in (_dtype.float16, _dtype.bfloat16):
            return fn(name, nd, input.float(), *args).to(input.dtype)
        return fn(name, nd, input, *args)
    return wrapper


def _refuse_integers(kernel, input, allow_long=False):
    """PyTorch's averaging pools (and adaptive max pools) have real floating kernels only (the plain average pools
    also an int64 one): an integer average here would truncate every window, or wrap a uint8 sum, silently."""
    dt = input.dtype
    if not (dt.is_floating_point or (allow_long and dt is _dtype.int64)):
        raise NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES[dt.name]}\'')


@_in_float32
def _avg_poolnd(name, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _refuse_integers("avg_pool3d_out_frame" if nd == 3 else "avg_pool2d", input, allow_long=True)
    x, kernel, stride, padding, _, outs = _pool_args(name, nd, input, kernel_size, stride, padding, 1, ceil_mode)
    n, c = x.shape[:2]
    flat = x.reshape((n * c, 1) + tuple(x.shape[2:]))
    # Ceil-mode windows may run past the right padding: zeros there add nothing to the sums.
    extra = [max(0, (o - 1) * s + k - (size + 2 * p)) for o, s, k, size, p in zip(outs, stride, kernel, x.shape[2:],
                                                                                   padding)]
    if any(extra):
        flat = apply(CONSTANT_PAD, flat, pads=((0, 0), (0, 0)) + tuple((0, e) for e in extra), value=0)
    ones = _creation.ones((1, 1) + kernel, dtype=x.dtype, device=x.device)
    sums = apply(CONVOLUTION, flat, ones, stride=stride, padding=padding, dilation=(1,) * nd, groups=1)
    sums = sums[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)].reshape((n, c) + outs)
    if divisor_override:
        divisor = float(divisor_override)
    else:
        per_dim = [_avg_divisor(size, k, s, p, o, count_include_pad)
                   for size, k, s, p, o in zip(x.shape[2:], kernel, stride, padding, outs)]
        grid = per_dim[0]
        for d in per_dim[1:]:
            grid = np.multiply.outer(grid, d)
        divisor = _creation.tensor(grid, dtype=x.dtype if x.is_floating_point() else None, device=x.device)
    out = sums / divisor if x.is_floating_point() else sums.div(divisor, rounding_mode="trunc").to(x.dtype)
    if x is not input:
        return out.squeeze(0)
    # ATen's 2-d average pooling keeps a channels-last input's layout; its 3-d one writes row-major (as ``out`` is).
    return layout_as(out, input) if nd < 3 else out


@autocast_policy(cpu="unlisted", cuda="unlisted")  # a convolution row inside, but not a listed op
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over sliding windows of ``(N, C, L)``."""
    return _avg_poolnd("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@autocast_policy(cpu="unlisted", cuda="unlisted")  # a convolution row inside, but not a listed op
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over sliding windows of ``(N, C, H, W)``; zero padding counts unless ``count_include_pad=False``."""
    return _avg_poolnd("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)


@autocast_policy(cpu="fp32", cuda="unlisted")
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over sliding windows of ``(N, C, D, H, W)``."""
    if input.dim() in (4, 5):
        # ATen's 3-d average pool (unlike the others) wants the unpadded input to hold one whole window
        kernel, (t, h, w) = ntuple(kernel_size, 3, "kernel_size"), input.shape[-3:]
        if t < kernel[0] or h < kernel[1] or w < kernel[2]:
            raise RuntimeError(f"input image (T: {t} H: {h} W: {w}) smaller than kernel size (kT: {kernel[0]} kH: "
                               f"{kernel[1]} kW: {kernel[2]})")
    return _avg_poolnd("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)


def _lp_pool(nd, input, norm_type, kernel_size, stride, ceil_mode):
    kernel = ntuple(kernel_size, nd, "kernel_size")
    pool = (avg_pool1d, avg_pool2d, avg_pool3d)[nd - 1]
    out = pool(input.pow(norm_type), kernel, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu()).mul(math.prod(kernel)).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling: ``(sum over the window of x^p)^(1/p)``."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """2-D power-average pooling."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """3-D power-average pooling."""
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


def _max_unpoolnd(nd, input, indices, kernel_size, stride, padding, output_size):
    kernel = ntuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None else ntuple(stride, nd, "stride")
    padding = ntuple(padding, nd, "padding")
    spatial = tuple(input.shape[-nd:])
    default = tuple((i - 1) * s - 2 * p + k for i, s, p, k in zip(spatial, stride, padding, kernel))
    if output_size is None:
        outs = default
    else:
        outs = tuple(output_size)[-nd:]
        for dim, (o, d, s) in enumerate(zip(outs, default, stride)):
            if not d - s < o < d + s:
                raise ValueError(f"invalid output_size {list(output_size)} (dim {dim} must be between {d - s} and "
                                 f"{d + s})")
    lead = tuple(input.shape[:-nd])
    pooled = math.prod(spatial)  # not -1: ambiguous for an empty batch
    flat_in = input.reshape(lead + (pooled,))
    flat_idx = indices.reshape(lead + (pooled,))
    if flat_idx.numel() and (int(flat_idx.max()) >= math.prod(outs) or int(flat_idx.min()) < 0):
        raise RuntimeError(f"Found an invalid max index: {int(flat_idx.max())} (output volumes are of size "
                           f"{'x'.join(map(str, outs))})")
    out = flat_in.new_zeros(lead + (math.prod(outs),)).scatter(-1, flat_idx, flat_in)
    return out.reshape(lead + outs)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of ``max_pool1d``: values go back to their indices, zeros elsewhere."""
    return _max_unpoolnd(1, input, indices, kernel_size, stride, padding, output_size)


@autocast_policy(cpu="fp32")
def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of ``max_pool2d``."""
    return _max_unpoolnd(2, input, indices, kernel_size, stride, padding, output_size)


@autocast_policy(cpu="fp32")
def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Partial inverse of ``max_pool3d``."""
    return _max_unpoolnd(3, input, indices, kernel_size, stride, padding, output_size)


from ._spatial_pool_adaptive import (  # noqa: E402,F401 - split for size; re-exported
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool1d,
    adaptive_max_pool1d_with_indices, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, adaptive_max_pool3d,
    adaptive_max_pool3d_with_indices)
