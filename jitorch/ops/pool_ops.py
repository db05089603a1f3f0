"""Pooling rows that keep per-step dispatches down on small images (conv_ops.py holds the general max-pool row).

- ``max_pool_scatter(g, indices, shape)``: the max-pool input gradient. When windows do not overlap (the common
  ``MaxPool2d(2)``), each input position is the maximum of at most one window, so the gradient is a plain indexed
  store into a zeroed buffer through its flat ``(N * C * prod(spatial))`` reshape view: one dispatch, no scatter-add,
  no one-hot comparison over the whole input (which cost three dispatches and ~15x the time). Overlapping windows
  (the pool's ``kernel`` and ``dilation`` given) add their gradients up: a generated gather kernel on CPU arrays
  (`pool_overlap_grad`), else a scatter-add.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> g = jitorch.tensor([[[[1.0, 2.0]]]])
>>> idx = jitorch.tensor([[[[1, 2]]]])
>>> apply(MAX_POOL_SCATTER, g, idx, shape=(1, 1, 1, 4))
tensor([[[[0., 1., 2., 0.]]]])
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime import scatter_add
from . import native_lowered, pool_overlap_grad
from .table import Opaque, defop

__all__ = ["MAX_POOL_SCATTER", "windows_disjoint", "pair_pool_max"]


def windows_disjoint(kernel, stride, dilation):
    """Whether no two pooling windows share an input position (every stride covers its dilated window)."""
    return all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel, stride, dilation))


def _pick(xp, a, b):
    """(max, whether ``b`` wins) of two arrays, as PyTorch's window scan ``val > max || isnan(val)``: the first of
    equal maxima, the last NaN (``maximum`` propagates NaN, so the value agrees)."""
    take = b > a
    if a.dtype.kind == "f":
        take |= b != b
    return xp.maximum(a, b), take


def pair_pool_max(xp, x):
    """2x2, stride-2, unpadded max-pool of ``(N, C, H, W)`` with even ``H`` and ``W``: (values, flat input indices).

    One copy de-interleaves the four window positions into contiguous ``(2, 2, N, C, H/2, W/2)`` planes: elementwise
    ops on strided window views run ~15x slower than on contiguous arrays. Each row of a window picks its column
    first, then the window picks its row, which keeps the row-major scan order's tie and NaN rules.
    """
    n, c, h, w = x.shape
    q = xp.ascontiguousarray(x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(3, 5, 0, 1, 2, 4))
    top, top_right = _pick(xp, q[0, 0], q[0, 1])
    bottom, bottom_right = _pick(xp, q[1, 0], q[1, 1])
    values, lower = _pick(xp, top, bottom)
    col = top_right ^ (lower & (bottom_right ^ top_right))  # bool select: cheaper than ``where``
    index = lower.astype(np.int64)
    index *= w
    index += col
    index += (xp.arange(0, h, 2, dtype=np.int64) * w).reshape(h // 2, 1) + xp.arange(0, w, 2, dtype=np.int64)
    return values, index


def _scatter_kernel(xp, g, indices, shape, stride=None, padding=None, kernel=None, dilation=None):
    # ``stride``, ``padding`` (and ``kernel``, ``dilation``: the pool's) are for native kernels, which compute each
    # input position's windows instead of storing at the indices (`jitorch.cpu._lower_pool`, also run eagerly on CPU
    # arrays, and `pool_overlap_grad`); the stores below do not need them. Without a kernel the windows are disjoint.
    overlap = kernel is not None and not windows_disjoint(kernel, stride, dilation)
    found = pool_overlap_grad.gradient(g, indices, shape, kernel, stride, padding, dilation) if overlap else \
        native_lowered.max_pool_scatter(g, indices, shape, stride, padding)
    if found is not None:
        return found
    rows = shape[0] * shape[1]
    size = math.prod(shape[2:])
    out = xp.zeros(rows * size, dtype=g.dtype)
    if out.size and g.size:
        # Indices are flat within each (n, c) plane: offset them by the plane's start in the flat view.
        flat = indices.reshape(rows, -1) + xp.arange(0, rows * size, size, dtype=indices.dtype).reshape(rows, 1)
        if overlap:  # windows share positions: their gradients add up
            scatter_add(xp, out, (flat.reshape(-1),), g.reshape(-1))
        else:
            out[flat.reshape(-1)] = g.reshape(-1)
    return out.reshape(shape)


def _scatter_backward(ctx, gg):
    # The adjoint of a store at ``indices`` is a gather at them; the indices get no gradient.
    indices = ctx.inputs[1]
    n, c = gg.shape[:2]
    return gg.reshape(n, c, -1).gather(2, indices.reshape(n, c, -1)).reshape(indices.shape), None


MAX_POOL_SCATTER = defop("max_pool_scatter", _scatter_kernel, _scatter_backward, Opaque("indexed store"),
                         saves="inputs", save_if=lambda needs: (False, True),
                         grad_name="MaxPoolWithIndicesBackwardBackward0")
