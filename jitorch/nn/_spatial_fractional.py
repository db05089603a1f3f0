"""Fractional max pooling: ``fractional_max_pool2d/3d`` (and their ``_with_indices`` forms), as ATen's.

Each (sample, channel) plane gets pseudo-random window starts from its ``_random_samples`` entry ``u`` in
``[0, 1)``: with ``alpha = (in - k) / (out - 1)``, start ``i`` is ``int((i + u) alpha) - int(u alpha)`` and the last
one is ``in - k``, computed in the input's dtype as ATen does (so the windows match torch's bit for bit). The
windows are gathered from the flattened plane and reduced with ``max``: the gradient flows back through the gather
to each window's maximum, accumulating where windows overlap.

>>> import jitorch
>>> from jitorch.nn._spatial_fractional import fractional_max_pool2d
>>> x = jitorch.arange(16.0).reshape(1, 1, 4, 4)
>>> fractional_max_pool2d(x, 2, output_size=2, _random_samples=jitorch.full((1, 1, 2), 0.5))
tensor([[[[ 5.,  7.],
          [13., 15.]]]])
"""
from __future__ import annotations

import numpy as np

from .. import _creation, _dtype, _movement
from ..autograd.grad_mode import is_grad_enabled

__all__ = ["fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
           "fractional_max_pool3d_with_indices"]

_AXES = ("time", "height", "width")


def _starts(samples, size, out, kernel):
    """``(N, C, out)`` int64 window starts along one axis from the ``(N, C)`` samples (ATen's generate_intervals)."""
    n, c = samples.shape
    if out == 0:
        return _creation.zeros((n, c, 0), dtype=_dtype.int64, device=samples.device)
    last = _creation.full((n, c, 1), size - kernel, dtype=_dtype.int64, device=samples.device)
    if out == 1:
        return last
    # alpha is rounded to the samples' dtype, like ATen's scalar_t arithmetic
    alpha = float(np.asarray(size - kernel, dtype=_np_dtype(samples)) / np.asarray(out - 1, dtype=_np_dtype(samples)))
    steps = _creation.arange(out - 1, dtype=samples.dtype, device=samples.device)
    u = samples.unsqueeze(-1)
    starts = ((steps + u) * alpha).to(_dtype.int64) - (u * alpha).to(_dtype.int64)
    return _movement.cat([starts, last], -1)


def _window_indices(starts, sizes, kernel, outs, planes):
    """``(N, C, prod(outs) * prod(kernel))`` flat plane indices of every window's elements, window by window."""
    nd = len(sizes)
    flat = None
    for i in range(nd):
        # axis i's starts (outs[i] of them) and offsets (kernel[i]) on their own dims: the sum broadcasts them all
        pos = starts[i].reshape(planes + (1,) * i + (outs[i],) + (1,) * (2 * nd - 1 - i))
        offs = _creation.arange(kernel[i], dtype=_dtype.int64, device=starts[i].device)
        off = offs.reshape((1,) * (2 + nd + i) + (kernel[i],) + (1,) * (nd - 1 - i))
        term = (pos + off) * int(np.prod(sizes[i + 1:], dtype=np.int64))
        flat = term if flat is None else flat + term
    # sizes spelled out: -1 cannot be inferred for an empty batch
    count = int(np.prod(outs, dtype=np.int64)) * int(np.prod(kernel, dtype=np.int64))
    return flat.expand(planes + tuple(outs) + tuple(kernel)).reshape(planes + (count,))


def _expand(value, nd):
    """A number repeated ``nd`` times; a sequence as a tuple (its length is checked by the caller)."""
    return tuple(value) if isinstance(value, (list, tuple)) else (value,) * nd


def _np_dtype(t):
    return np.float64 if t.dtype is _dtype.float64 else np.float32


def _fractional(name, nd, input, kernel_size, output_size, output_ratio, samples):
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        if nd == 2 and len(output_ratio) > 2:
            raise ValueError("fractional_max_pool2d requires output_ratio to either be a single Int or tuple of Ints.")
        ratio = _expand(output_ratio, nd)
        output_size = [int(input.shape[-nd + i] * ratio[i]) for i in range(nd)]
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(input.shape)}")
    if samples is None:
        from .._random import rand

        samples = rand(1 if input.dim() == nd + 1 else input.shape[0], input.shape[-nd - 1], nd, dtype=input.dtype,
                       device=input.device)
    if samples.requires_grad and is_grad_enabled():
        raise RuntimeError(f"The function '{name}' is not differentiable with respect to argument 'random_samples'. "
                           "This input cannot have requires_grad True.")
    kernel, outs = _expand(kernel_size, nd), _expand(output_size, nd)
    if len(kernel) != nd or len(outs) != nd:
        raise RuntimeError(f"{name}: kernel_size must either be a single Int or tuple of Ints")
    x = input.unsqueeze(0) if input.dim() == nd + 1 else input
    n, c, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    for d in range(1, x.dim()):
        if x.shape[d] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but got"
                               f"{list(x.shape)} with dimension {d} being empty.")
    if samples.dim() != 3:
        raise RuntimeError(f"{name}(): Expect _random_samples to have 3 dimensions, got {samples.dim()}")
    if samples.shape[0] < n:
        raise RuntimeError(f"{name}(): Expect _random_samples.size(0) no less then input batch size {n}; got "
                           f"{samples.shape[0]}.")
    if samples.shape[1] != c:
        raise RuntimeError(f"{name}(): Expect _random_samples.size(1) equals to input channel size {c}; got "
                           f"{samples.shape[1]}.")
    if samples.shape[2] != nd:
        raise RuntimeError(f"{name}(): Expect _random_samples.size(2) equals to {nd}; got {samples.shape[2]}.")
    prefix = f"{name}()" if nd == 2 else f"{name}_out()"
    for axis, size, k, o in zip(_AXES[3 - nd:], sizes, kernel, outs):
        # ATen's 3-D check is strict (the last window may not end at the border), its 2-D one is not
        if o + k - 1 > size or nd == 3 and o + k - 1 == size:
            raise RuntimeError(f"{prefix}: pool {axis} {k} too large relative to input {axis} {size}")
    samples = samples[:n].to(x.dtype)  # extra samples are allowed and unused, as in ATen
    # ATen's 2-D kernel reads sample 0 for the width and 1 for the height; its 3-D one reads them in axis order
    order = [1, 0] if nd == 2 else [0, 1, 2]
    starts = [_starts(samples[:, :, order[i]], sizes[i], outs[i], kernel[i]) for i in range(nd)]
    flat = _window_indices(starts, sizes, kernel, outs, (n, c))
    window = int(np.prod(kernel, dtype=np.int64))
    picked = x.reshape(n, c, int(np.prod(sizes, dtype=np.int64))).gather(2, flat)
    values, arg = picked.reshape((n, c) + tuple(outs) + (window,)).max(-1)
    indices = flat.reshape((n, c) + tuple(outs) + (window,)).gather(-1, arg.unsqueeze(-1)).squeeze(-1)
    if x is not input:
        return values.squeeze(0), indices.squeeze(0)
    return values, indices


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """``(values, indices)`` of 2-D fractional max pooling; indices are flat over each plane's ``H * W``."""
    return _fractional("fractional_max_pool2d", 2, input, kernel_size, output_size, output_ratio, _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """``(values, indices)`` of 3-D fractional max pooling; indices are flat over each volume's ``T * H * W``."""
    return _fractional("fractional_max_pool3d", 3, input, kernel_size, output_size, output_ratio, _random_samples)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Max over ``kernel_size`` windows at pseudo-random, overlapping positions of ``(N, C, H, W)`` or ``(C, H, W)``,
    to ``output_size`` or ``output_ratio`` of the input; ``return_indices`` adds the flat indices of the maxima."""
    out = fractional_max_pool2d_with_indices(input, kernel_size, output_size, output_ratio, False, _random_samples)
    return out if return_indices else out[0]


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """3-D fractional max pooling of ``(N, C, T, H, W)`` or ``(C, T, H, W)``: see ``fractional_max_pool2d``."""
    out = fractional_max_pool3d_with_indices(input, kernel_size, output_size, output_ratio, False, _random_samples)
    return out if return_indices else out[0]

