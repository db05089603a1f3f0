"""Max pooling primitives for 1, 2 and 3 spatial dims: the values and the flat input index of each window's maximum
(``max_pool``), and adaptive max pooling's windows (``adaptive_max_pool``); both share one backward, a scatter of the
gradient to those indices.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> x = jitorch.arange(16.0).reshape(1, 1, 4, 4)
>>> values, indices = apply(MAX_POOL, x, kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
...                         out_sizes=(2, 2))
>>> values.flatten().tolist(), indices.flatten().tolist()
([5.0, 7.0, 13.0, 15.0], [5, 7, 13, 15])
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import native_lowered
from .conv_layouts import windows
from .pool_ops import MAX_POOL_SCATTER, pair_pool_max
from .table import Opaque, defop

__all__ = ["MAX_POOL", "ADAPTIVE_MAX_POOL", "adaptive_bounds"]

_HALF = {"float16", "bfloat16"}
_OFFSET_MAX_KERNEL = 32  # max-pool windows up to this many elements: one op per offset, no argmax
_prod = math.prod


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


# -- max pooling: values and the flat input index of each maximum ------------------------------------------------------
def _lowest(dtype):
    return -np.inf if dtype.kind == "f" or dtype.name in _HALF else np.iinfo(dtype).min


def _flat_index(xp, coords, spatial):
    """Flat index over ``spatial`` of per-dim coordinate arrays (broadcast together)."""
    flat = 0
    for c, s in zip(coords, spatial):
        flat = flat * s + c
    return flat


def _window_max(xp, flat):
    """(max, argmax) over the last axis; NaN wins and, as in PyTorch's ``val > max || isnan(val)`` scan, the last
    NaN of a window is its index (``argmax`` alone would give the first)."""
    arg = flat.argmax(-1)
    if flat.dtype.kind == "f":
        nan = xp.isnan(flat)
        if bool(nan.any()):
            last = flat.shape[-1] - 1 - nan[..., ::-1].argmax(-1)
            arg = xp.where(nan.any(-1), last, arg)
    return xp.take_along_axis(flat, arg[..., None], -1)[..., 0], arg


def _pool_pads(spatial, kernel, stride, padding, dilation, out_sizes):
    """Left/right pads; extra right padding makes the last (ceil_mode) window exist (it only sees the fill value)."""
    pads = []
    for i in range(len(kernel)):
        need = (out_sizes[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
        pads.append((padding[i], max(padding[i], need - spatial[i] - padding[i])))
    return pads


def _window_origins(xp, spatial, stride, padding, out_sizes):
    """Flat input index of each window's first element, ``(*out)`` (negative or past rows when in the padding)."""
    nd = len(spatial)
    base = 0
    for i in range(nd):
        shape = [1] * nd
        shape[i] = out_sizes[i]
        start = xp.arange(out_sizes[i], dtype=np.int64).reshape(shape) * stride[i] - padding[i]
        base = base + start * _prod(spatial[i + 1:])
    return base


def _offset_max(xp, win, kernel, spatial, dilation):
    """(max, flat input offset from the window origin of the first maximum) with one elementwise op per kernel
    offset on strided views: no copy of the windows, no argmax over a short axis. NaN wins, as in PyTorch."""
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    views = [win[(Ellipsis,) + o] for o in offsets]
    best = views[0]
    for v in views[1:]:
        best = xp.maximum(best, v)  # propagates NaN
    flat = [sum(k * d * _prod(spatial[i + 1:]) for i, (k, d) in enumerate(zip(o, dilation))) for o in offsets]
    where = xp.full(best.shape, flat[-1], dtype=np.int64)
    # Any NaN in a window makes ``best`` NaN: with none (checked once), ``v == best`` alone finds the maximum.
    nan = best.dtype.kind == "f" and bool(xp.isnan(best).any())
    for v, f in zip(views[-2::-1], flat[-2::-1]):  # backwards, so the first hit in window order wins
        xp.copyto(where, f, where=v == best)  # in place: no new index array per offset
    if nan:
        # ``v == best`` never holds in a NaN window; PyTorch's scan (``val > max || isnan(val)``) keeps its last NaN.
        for v, f in zip(views, flat):
            xp.copyto(where, f, where=v != v)
    return best, where


def _first_inside(xp, spatial, stride, padding, dilation, out_sizes):
    """Flat input index of each window's first position inside the input, ``(*out)``."""
    flat = 0
    for i in range(len(spatial)):
        shape = [1] * len(spatial)
        shape[i] = out_sizes[i]
        start = xp.arange(out_sizes[i], dtype=np.int64).reshape(shape) * stride[i] - padding[i]
        first = start + xp.where(start < 0, (-start + dilation[i] - 1) // dilation[i], 0) * dilation[i]
        flat = flat * spatial[i] + first
    return flat


def _max_pool_kernel(xp, x, kernel, stride, padding, dilation, out_sizes):
    pads = _pool_pads(x.shape[2:], kernel, stride, padding, dilation, out_sizes)
    values, index = _max_pool_scan(xp, x, kernel, stride, padding, dilation, out_sizes, pads)
    if any(lo or hi for lo, hi in pads):
        # The scans start from the fill, which never wins a comparison, so a window whose input values all equal
        # it (-inf, an integer's least) keeps the fill's position; torch names the window's first input position.
        first = _first_inside(xp, x.shape[2:], stride, padding, dilation, out_sizes)
        index = xp.where(values == _lowest(x.dtype), first, index)
    return values, index


def _max_pool_scan(xp, x, kernel, stride, padding, dilation, out_sizes, pads):
    nd = len(kernel)
    spatial = x.shape[2:]
    found = native_lowered.max_pool(x, kernel, stride, padding, dilation, out_sizes, pads,
                                    _lowest(x.dtype) if x.dtype.kind in "fiu" else None)  # CPU: one generated scan
    if found is not None:
        return found
    if (nd == 2 and tuple(kernel) == (2, 2) and tuple(stride) == (2, 2) and not any(padding)
            and tuple(dilation) == (1, 1) and tuple(out_sizes) == (spatial[0] // 2, spatial[1] // 2)
            and spatial[0] % 2 == 0 and spatial[1] % 2 == 0):
        return pair_pool_max(xp, x)  # the common MaxPool2d(2): windows are a reshape view
    win = windows(xp, x, kernel, stride, pads, dilation, fill=_lowest(x.dtype))
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in out_sizes)]
    if _prod(kernel) <= _OFFSET_MAX_KERNEL:
        values, offset = _offset_max(xp, win, kernel, spatial, dilation)
        return values, offset + _window_origins(xp, spatial, stride, padding, out_sizes)
    values, arg = _window_max(xp, win.reshape(win.shape[:2 + nd] + (_prod(kernel),)))
    offsets = xp.unravel_index(arg, kernel) if nd > 1 else (arg,)
    coords = []
    for i in range(nd):
        shape = [1] * (2 + nd)
        shape[2 + i] = out_sizes[i]
        start = xp.arange(out_sizes[i]).reshape(shape) * stride[i] - padding[i]
        coords.append(start + offsets[i] * dilation[i])
    return values, _flat_index(xp, coords, spatial).astype(np.int64)


def _max_pool_backward(ctx, g, _g_indices=None):
    """The output gradient routed to the positions of the maxima (windows may share a maximum).

    One row, ``max_pool_scatter``: disjoint windows (stride >= dilated kernel, e.g. the common 2x2 pool) give each
    input position at most one gradient, an indexed store; overlapping ones add up (a generated gather kernel on the
    CPU, else a scatter-add: col2im of a one-hot column measured slower). Adaptive pools keep the scatter-add.
    """
    shape = ctx.in_meta[0][0]
    n, c = shape[:2]
    indices = ctx.output(1).detach()  # the values may since have been changed in place (a ReLU(inplace=True))
    a = ctx.attrs
    if "kernel" in a:
        return _apply(MAX_POOL_SCATTER, g, indices, shape=tuple(shape), stride=tuple(a["stride"]),
                      padding=tuple(a["padding"]), kernel=tuple(a["kernel"]), dilation=tuple(a["dilation"]))
    flat = g.new_zeros((n, c, _prod(shape[2:])))
    pooled = _prod(g.shape[2:])  # not -1: ambiguous for an empty batch
    return flat.scatter_add(2, indices.reshape(n, c, pooled), g.reshape(n, c, pooled)).reshape(shape)


MAX_POOL = defop("max_pool", _max_pool_kernel, _max_pool_backward, Opaque("windowed max"), nout=2,
                 saves="outputs", meta=True, nondiff_outputs=(1,), grad_name="MaxPoolWithIndicesBackward0")


def adaptive_bounds(size, out):
    """PyTorch's adaptive windows: ``[floor(i * size / out), ceil((i + 1) * size / out))`` for each output ``i``."""
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def _adaptive_max_kernel(xp, x, out_sizes):
    nd = len(out_sizes)
    spatial = x.shape[2:]
    index_arrays = []
    for i, (s, o) in enumerate(zip(spatial, out_sizes)):
        start, end = adaptive_bounds(s, o)
        width = int((end - start).max())
        # Short windows repeat their last element: a repeat never changes the maximum or its first position.
        idx = np.minimum(start[:, None] + np.arange(width), end[:, None] - 1)
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = o, width
        index_arrays.append(xp.asarray(idx.reshape(shape)))
    win = x[(slice(None), slice(None)) + tuple(index_arrays)]  # (N, C, *out, *width)
    widths = tuple(a.shape[nd + i] for i, a in enumerate(index_arrays))
    values, arg = _window_max(xp, win.reshape(win.shape[:2 + nd] + (_prod(widths),)))
    offsets = xp.unravel_index(arg, widths) if nd > 1 else (arg,)
    coords = []
    for i in range(nd):
        table = index_arrays[i].reshape(out_sizes[i], widths[i])
        shape = [1] * (2 + nd)
        shape[2 + i] = out_sizes[i]
        coords.append(table[xp.arange(out_sizes[i]).reshape(shape), offsets[i]])
    return values, _flat_index(xp, coords, spatial).astype(np.int64)


ADAPTIVE_MAX_POOL = defop("adaptive_max_pool", _adaptive_max_kernel, _max_pool_backward, Opaque("windowed max"),
                          nout=2, saves="outputs", meta=True, nondiff_outputs=(1,),
                          grad_name="AdaptiveMaxPoolBackward0")
