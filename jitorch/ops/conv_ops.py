"""Convolution, im2col/col2im and max-pooling primitives for 1, 2 and 3 spatial dims.

Every kernel copies sliding windows of the (padded) input into a matrix and hands the work to ONE batched BLAS
matmul (im2col, in the layout of conv_layouts.py with the longest copy runs); the adjoint (col2im) loops over kernel
offsets only, each step a vectorized strided add. The three convolution rows are closed under differentiation, so
double backward works without touching windows again:

- ``convolution(x, w)``: cross-correlation, ``(N, C, *S) x (O, C/G, *K) -> (N, O, *OS)``;
- ``convolution_transpose(g, w)``: its adjoint in ``x`` (the input gradient, and ``conv_transpose``'s forward);
- ``convolution_weight(x, g)``: its adjoint in ``w`` (the weight gradient).

A fourth, non-differentiable row, ``convolution_weight_cols``, gives the weight and bias gradients in first-order eager
backward from the window matrix the forward kept (conv2d and friends ask for it), skipping a second window copy.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> from jitorch.ops.conv_ops import CONVOLUTION
>>> x, w = jitorch.ones(1, 1, 3, 3), jitorch.ones(1, 1, 2, 2)
>>> apply(CONVOLUTION, x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
tensor([[[[4., 4.],
          [4., 4.]]]])
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .conv_layouts import (STASH, col2im, col2im_T, conv_forward, conv_weight, k_major_layout, to_frame,
                           weight_from_cols, windows)
from .conv_direct import direct_forward, direct_transpose, direct_weight
from .conv_patches import patch_forward, patch_transpose, patch_weight
from . import native_lowered
from .pad_ops import CONSTANT_PAD  # noqa: F401 - the padding row, imported from here by nn
from .pool_ops import MAX_POOL_SCATTER, pair_pool_max
from .._tensor import Tensor
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["CONVOLUTION", "CONVOLUTION_TRANSPOSE", "CONVOLUTION_WEIGHT", "IM2COL", "COL2IM", "MAX_POOL",
           "ADAPTIVE_MAX_POOL", "CONSTANT_PAD", "conv_output_size", "adaptive_bounds", "windows_kept_under"]

_HALF = {"float16", "bfloat16"}
_OFFSET_MAX_KERNEL = 32  # max-pool windows up to this many elements: one op per offset, no argmax


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


def conv_output_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _prod(values):
    return math.prod(values)


def _check_same_dtype(op, *arrays):
    if len({a.dtype for a in arrays}) > 1:
        names = " and ".join(str(a.dtype) for a in arrays)
        raise RuntimeError(f"{op}: expected all operands to have the same dtype, but got {names}")


def _compute_array(a):
    """NumPy has no half-precision BLAS: half inputs are computed in float32 and rounded once at the end."""
    return a.astype(np.float32) if a.dtype.name in _HALF else a


# -- convolution ----------------------------------------------------------------------------------------------------
# Each kernel is one product over disjoint patches where the kernel equals the stride (conv_patches.py), a generated
# direct convolution (conv_direct.py) where that applies, else one GEMM (batched over groups) between a window
# matrix and a weight or gradient matrix, in the layout of conv_layouts.py with the longest copy runs.
def _forward(xp, x, w, b, stride, pads, dilation, groups, outs, windows=False):
    """The convolution through the direct kernel or `conv_forward`. ``windows``: a caller that needs the window
    matrix (``convolution_cols``), as does a replay refilling a kept one (``STASH.into``), takes the GEMM."""
    if not windows and STASH.into is None:
        out = patch_forward(xp, x, w, b, stride, pads, dilation, groups, outs)
        if out is None:
            out = direct_forward(xp, x, w, b, stride, pads, dilation, groups, outs)
        if out is not None:
            return out
    return conv_forward(xp, x, w, b, stride, pads, dilation, groups, outs)


def _conv_kernel(xp, x, w, b=None, *, stride, padding, dilation, groups, windows=False):
    _check_same_dtype("convolution", x, w)
    dtype = x.dtype
    x, w = _compute_array(x), _compute_array(w)
    outs = tuple(conv_output_size(*a) for a in zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    # The bias is added in place on the fresh output: no broadcast-add node; its gradient is one reduction in this
    # row's backward.
    out = _forward(xp, x, w, b, stride, [(p, p) for p in padding], dilation, groups, outs, windows)
    return out.astype(dtype, copy=False)


def _crop_to(t, sizes):
    """``t`` narrowed to ``sizes`` in its spatial dims (a no-op when they already match)."""
    for i, s in enumerate(sizes):
        if t.shape[2 + i] != s:
            t = t.narrow(2 + i, 0, s)
    return t


def _geometry(attrs):
    return {k: attrs[k] for k in ("stride", "padding", "dilation", "groups")}


def _conv_backward(ctx, g):
    x, w = ctx.inputs[:2]
    geo = _geometry(ctx.attrs)
    gx = _apply(CONVOLUTION_TRANSPOSE, g, w, spatial=tuple(x.shape[2:]), **geo) if ctx.needs_grad(0) else None
    has_bias = len(ctx.next) == 3
    cols = ctx.__dict__.pop("conv_cols", None)  # the forward's window matrix, kept by conv2d and friends
    gb = None
    if cols is not None and ctx.needs_grad(1) and not _grad_enabled() and windows_kept_under(_modes()) \
            and not g.is_meta:  # a meta forward's kept matrix is a plain array: no meta result from it
        # First-order backward (no graph to record) in eager or in a capture that refills the kept matrix, so the
        # non-differentiable row may stand in for the weight row.
        frame = {"frame": cols[2]} if len(cols) > 2 else {}
        gw, gb = _apply(CONVOLUTION_WEIGHT_COLS, Tensor._make(cols[1]), g, layout=cols[0], kernel=tuple(w.shape[2:]),
                        channels=x.shape[1], groups=geo["groups"], **frame)
    else:
        gw = _apply(CONVOLUTION_WEIGHT, x, g, kernel=tuple(w.shape[2:]), **geo) if ctx.needs_grad(1) else None
    if not has_bias:
        return gx, gw
    if not ctx.needs_grad(2):
        return gx, gw, None
    return gx, gw, gb if gb is not None else g.sum((0,) + tuple(range(2, g.dim())))


def _grad_enabled():
    from ..autograd.grad_mode import GradState

    return GradState.enabled


def _modes():
    from .._dispatch import MODES

    return MODES


def windows_kept_under(modes):
    """Whether a convolution's window matrix may be kept for its weight gradient under the dispatch ``modes``: plain
    eager, or a CPU graph capture, whose replay refills the kept matrix in place (``keeps_conv_windows``). Not while
    tracing, whose graph would bake the matrix in as a constant."""
    return not modes or len(modes) == 1 and getattr(modes[0], "keeps_conv_windows", False)


CONVOLUTION = defop("convolution", _conv_kernel, _conv_backward, Opaque("im2col + BLAS"), saves="inputs",
                    grad_name="ConvolutionBackward0")


def _conv_transpose_kernel(xp, g, w, spatial, stride, padding, dilation, groups):
    _check_same_dtype("convolution_transpose", g, w)
    dtype = g.dtype
    g, w = _compute_array(g), _compute_array(w)
    n, outs, kernel = g.shape[0], tuple(g.shape[2:]), tuple(w.shape[2:])
    out = patch_transpose(xp, g, w, spatial, stride, padding, dilation, groups)
    if out is not None:
        return out.astype(dtype, copy=False)
    left = [d * (k - 1) - p for k, p, d in zip(kernel, padding, dilation)]
    finite = bool(xp.isfinite(w).all())
    if all(s == 1 for s in stride) and min(left) >= 0 and 2 * w.shape[1] * groups >= w.shape[0] and finite:
        # At stride 1 the transposed convolution is a plain one of g, padded by the kernel's reach, with the flipped
        # kernel: one window copy and one GEMM, no scatter of window columns back into an image. Not when it has far
        # fewer output than input channels (an image model's first layer): its GEMM would be a thin one over windows
        # of many channels, and the product of the weight and g followed by col2im moves less. Nor with an inf or nan
        # weight: the padding of g times it would put nan where col2im's sums of real products (torch's) have none.
        pads = [(lo, s + d * (k - 1) - lo - o) for lo, s, d, k, o in zip(left, spatial, dilation, kernel, outs)]
        cin, cout = w.shape[0] // groups, w.shape[1]
        wf = w.reshape((groups, cin, cout) + kernel).swapaxes(1, 2).reshape((groups * cout, cin) + kernel)
        wf = wf[(Ellipsis,) + (slice(None, None, -1),) * len(kernel)]
        out = _forward(xp, g, wf, None, stride, pads, dilation, groups, tuple(spatial))
        return out.astype(dtype, copy=False)
    out = direct_transpose(xp, g, w, spatial, stride, padding, dilation, groups)
    if out is not None:
        return out.astype(dtype, copy=False)
    # The flat frame's dropped positions are zeros of g: with an inf weight they would turn into nan.
    _, frame, _, _, _ = k_major_layout(spatial, outs, kernel, stride, padding, dilation, finite)
    gT = to_frame(xp, g, frame, groups)  # (G, O/G, N * frame)
    wT = xp.ascontiguousarray(w).reshape(groups, w.shape[0] // groups, -1).transpose(0, 2, 1)
    colT = xp.matmul(wT, gT).reshape(wT.shape[0] * wT.shape[1], gT.shape[-1])  # (C * prod(kernel), N * frame)
    return col2im_T(xp, colT, n, spatial, outs, kernel, stride, padding, dilation, finite).astype(dtype, copy=False)


def _conv_transpose_backward(ctx, gy):
    g, w = ctx.inputs
    geo = _geometry(ctx.attrs)
    gg = _crop_to(_apply(CONVOLUTION, gy, w, **geo), g.shape[2:]) if ctx.needs_grad(0) else None
    gw = _apply(CONVOLUTION_WEIGHT, gy, g, kernel=tuple(w.shape[2:]), **geo) if ctx.needs_grad(1) else None
    return gg, gw


CONVOLUTION_TRANSPOSE = defop("convolution_transpose", _conv_transpose_kernel, _conv_transpose_backward,
                              Opaque("BLAS + col2im"), saves="inputs", grad_name="ConvolutionBackward0")


def _conv_weight_kernel(xp, x, g, kernel, stride, padding, dilation, groups):
    _check_same_dtype("convolution_weight", x, g)
    dtype = x.dtype
    x, g = _compute_array(x), _compute_array(g)
    pads = [(p, p) for p in padding]
    gw = patch_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    if gw is None:
        gw = direct_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    if gw is None:
        gw = conv_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    return gw.astype(dtype, copy=False)


def _conv_weight_backward(ctx, ggw):
    x, g = ctx.inputs
    geo = _geometry(ctx.attrs)
    gx = _apply(CONVOLUTION_TRANSPOSE, g, ggw, spatial=tuple(x.shape[2:]), **geo) if ctx.needs_grad(0) else None
    gg = _crop_to(_apply(CONVOLUTION, x, ggw, **geo), g.shape[2:]) if ctx.needs_grad(1) else None
    return gx, gg


CONVOLUTION_WEIGHT = defop("convolution_weight", _conv_weight_kernel, _conv_weight_backward, Opaque("im2col + BLAS"),
                           saves="inputs", grad_name="ConvolutionBackwardBackward0")


def _weight_cols_kernel(xp, cols, g, layout, kernel, channels, groups, frame=None):
    dtype = g.dtype
    gw, gb = weight_from_cols(xp, layout, cols, _compute_array(g), kernel, channels, groups, frame)
    return gw.astype(dtype, copy=False), gb.astype(dtype, copy=False)


def _conv_cols_kernel(xp, x, w, b=None, *, stride, padding, dilation, groups):
    STASH.want = True
    try:
        out = _conv_kernel(xp, x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                           windows=True)
    finally:
        STASH.want = False
        cols, STASH.cols = STASH.cols, None
    return out, cols[1]


# ``convolution`` that also returns its window matrix: a compiled training graph saves it for
# ``convolution_weight_cols`` in the backward (jitorch._compile.decompose), as eager autograd keeps it on the node. Only
# compiled graphs call it, and their backward is recorded separately (a double backward reruns eagerly).
CONVOLUTION_COLS = defop("convolution_cols", _conv_cols_kernel, NOT_DIFFERENTIABLE, Opaque("im2col + BLAS"), nout=2)

# The weight and bias gradients from the window matrix the forward kept (``conv_layouts.STASH``): first-order backward
# only, so its own gradient is never needed; double backward goes through CONVOLUTION_WEIGHT.
CONVOLUTION_WEIGHT_COLS = defop("convolution_weight_cols", _weight_cols_kernel, NOT_DIFFERENTIABLE,
                                Opaque("BLAS"), nout=2, grad_name="ConvolutionBackwardBackward0")


# -- im2col / col2im (F.unfold / F.fold): each is the other's gradient -------------------------------------------------
def _im2col_kernel(xp, x, kernel, stride, padding, dilation):
    win = windows(xp, x, kernel, stride, padding, dilation)
    nd = len(kernel)
    n, c = x.shape[:2]
    perm = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    # the block count spelled out: -1 is ambiguous for an empty batch
    return win.transpose(perm).reshape(n, c * _prod(kernel), _prod(win.shape[2:2 + nd]))


def _im2col_backward(ctx, g):
    a = ctx.attrs
    return _apply(COL2IM, g, spatial=ctx.in_meta[0][0][2:], kernel=a["kernel"], stride=a["stride"],
                  padding=a["padding"], dilation=a["dilation"])


IM2COL = defop("im2col", _im2col_kernel, _im2col_backward, Opaque("window copy"), meta=True,
               grad_name="Im2ColBackward0")


def _col2im_kernel(xp, col, spatial, kernel, stride, padding, dilation):
    outs = [conv_output_size(s, k, st, p, d) for s, k, st, p, d in zip(spatial, kernel, stride, padding, dilation)]
    n = col.shape[0]
    c = col.shape[1] // _prod(kernel)
    return col2im(xp, col.reshape((n, c) + tuple(kernel) + tuple(outs)), spatial, kernel, stride, padding, dilation)


def _col2im_backward(ctx, g):
    a = ctx.attrs
    return _apply(IM2COL, g, kernel=a["kernel"], stride=a["stride"], padding=a["padding"], dilation=a["dilation"])


COL2IM = defop("col2im", _col2im_kernel, _col2im_backward, Opaque("windowed scatter-add"), grad_name="Col2ImBackward0")


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
