"""Adaptive pooling: ``adaptive_avg_pool1d/2d/3d`` and ``adaptive_max_pool1d/2d/3d`` (with indices), to a fixed
output size.

Split from ``_spatial_pool.py`` (for size), which re-exports these. Adaptive average pooling is one matmul per spatial
dim with an averaging matrix (output ``i`` averages input ``[floor(i*S/O), ceil((i+1)*S/O))``); adaptive max pooling
is one row (the window maxima with their flat indices).

>>> import jitorch
>>> from jitorch.nn._spatial_pool_adaptive import adaptive_avg_pool1d
>>> adaptive_avg_pool1d(jitorch.arange(6.0).reshape(1, 1, 6), 2)
tensor([[[1., 4.]]])
"""
from __future__ import annotations

import numpy as np

from .. import _creation
from .._dispatch import apply
from .._memory_format import contiguous_format, suggested_format
from ..amp._cast_mode import autocast_policy
from ..ops.conv_ops import ADAPTIVE_MAX_POOL, adaptive_bounds
from ._spatial_args import layout_as, written_in
# (``_spatial_pool`` is loaded first and imports this module at its end, once these are defined)
from ._spatial_pool import _in_float32, _refuse_integers

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices"]


def _adaptive_sizes(name, nd, input, output_size):
    if input.dim() not in (nd + 1, nd + 2) or any(s == 0 for s in input.shape[-nd:]):
        if nd == 1:
            raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.dim()}-dimensional tensor for argument "
                               f"#1 'self' (while checking arguments for {name})")
        sep = ":" if "max" in name else ""
        raise RuntimeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got{sep} {list(input.shape)}")
    sizes = (output_size,) * nd if not isinstance(output_size, (list, tuple)) else tuple(output_size)
    if len(sizes) != nd:
        raise RuntimeError(f"{name}: output_size must be {nd}")
    outs = tuple(s if o is None else int(o) for o, s in zip(sizes, input.shape[-nd:]))
    if min(outs) < 0:  # NumPy would give an empty average, or fail inside the max reduction
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to 0 but received {outs}")
    return outs


def _averaging_matrix(size, out, like):
    start, end = adaptive_bounds(size, out)
    pos = np.arange(size)
    m = ((pos >= start[:, None]) & (pos < end[:, None])) / (end - start)[:, None]
    return _creation.tensor(m, dtype=like.dtype, device=like.device)


@_in_float32
def _adaptive_avg_poolnd(name, nd, input, output_size):
    _refuse_integers("adaptive_avg_pool3d_cpu" if nd == 3 else "adaptive_avg_pool2d", input)
    outs = _adaptive_sizes(name, nd, input, output_size)
    out = input
    # One matmul per spatial dim with its averaging matrix (output i averages input [floor(i*S/O), ceil((i+1)*S/O))).
    for i in range(nd):
        dim = input.dim() - nd + i
        m = _averaging_matrix(input.shape[dim], outs[i], input)
        out = (out.movedim(dim, -1) @ m.mT).movedim(-1, dim)
    if nd == 1:  # ATen's is a 2-d pooling of the unsqueezed input
        return layout_as(out, input)
    # ATen's 2-d kernel writes a new tensor in the input's suggested format (row-major unless channels-last, whatever
    # the strides); its 3-d kernel writes row-major, channels_last_3d inputs included.
    return written_in(out, suggested_format(input) if nd == 2 else contiguous_format)


@autocast_policy(cpu="unlisted", cuda="unlisted")
def adaptive_avg_pool1d(input, output_size):
    """Average pooling to a fixed length ``output_size``."""
    return _adaptive_avg_poolnd("adaptive_avg_pool1d", 1, input, output_size)


@autocast_policy(cpu="unlisted", cuda="unlisted")
def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed ``(H_out, W_out)`` (``None`` keeps that input size)."""
    return _adaptive_avg_poolnd("adaptive_avg_pool2d", 2, input, output_size)


@autocast_policy(cpu="fp32", cuda="unlisted")
def adaptive_avg_pool3d(input, output_size):
    """Average pooling to a fixed ``(D_out, H_out, W_out)``."""
    return _adaptive_avg_poolnd("adaptive_avg_pool3d", 3, input, output_size)


def _adaptive_max_poolnd(name, nd, input, output_size):
    _refuse_integers("adaptive_max_pool3d_cpu" if nd == 3 else "adaptive_max_pool2d", input)
    outs = _adaptive_sizes(name, nd, input, output_size)
    x = input.unsqueeze(0) if input.dim() == nd + 1 else input
    values, indices = apply(ADAPTIVE_MAX_POOL, x, out_sizes=outs)
    if x is not input:
        return values.squeeze(0), indices.squeeze(0)
    return layout_as(values, input), layout_as(indices, input)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    return _adaptive_max_poolnd("adaptive_max_pool1d", 1, input, output_size)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    return _adaptive_max_poolnd("adaptive_max_pool2d", 2, input, output_size)


@autocast_policy(cpu="fp32")
def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    return _adaptive_max_poolnd("adaptive_max_pool3d", 3, input, output_size)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling to a fixed length."""
    out = _adaptive_max_poolnd("adaptive_max_pool1d", 1, input, output_size)
    return out if return_indices else out[0]


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling to a fixed ``(H_out, W_out)``; indices are flat over the input's ``H * W``."""
    out = _adaptive_max_poolnd("adaptive_max_pool2d", 2, input, output_size)
    return out if return_indices else out[0]


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max pooling to a fixed ``(D_out, H_out, W_out)``."""
    out = adaptive_max_pool3d_with_indices(input, output_size)  # one ATen op either way: float32 on CPU
    return out if return_indices else out[0]
