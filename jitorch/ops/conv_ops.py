"""Convolution and im2col/col2im primitives for 1, 2 and 3 spatial dims.

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

import math

import numpy as np

from .conv_layouts import (STASH, col2im, col2im_T, conv_forward, conv_weight, k_major_layout, to_frame,
                           weight_from_cols, windows)
from .conv_direct import direct_forward, direct_transpose, direct_weight
from .conv_patches import patch_forward, patch_transpose, patch_weight, pointwise_weight
from .pad_ops import CONSTANT_PAD  # noqa: F401 - the padding row, imported from here by nn
from .._memory_format import channels_last, contiguous_format, suggested_format, written_in
from .._tensor import Tensor
from .table import NOT_DIFFERENTIABLE, Opaque, defop

__all__ = ["CONVOLUTION", "CONVOLUTION_TRANSPOSE", "CONVOLUTION_WEIGHT", "IM2COL", "COL2IM", "MAX_POOL",
           "ADAPTIVE_MAX_POOL", "CONSTANT_PAD", "conv_output_size", "adaptive_bounds", "windows_kept_under"]

_HALF = {"float16", "bfloat16"}


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


def _conjugated_inputs(ctx, n=2):
    """The saved operands of a bilinear row, conjugated when complex: the conjugate Wirtinger gradient of each is the
    transposed product of the upstream gradient with the other's conjugate."""
    a, b = ctx.inputs[:n]
    return (a.conj(), b.conj()) if a.is_complex() else (a, b)


def _conv_backward(ctx, g):
    x, w = _conjugated_inputs(ctx)
    geo = _geometry(ctx.attrs)
    gx = _apply(CONVOLUTION_TRANSPOSE, g, w, spatial=tuple(x.shape[2:]), **geo) if ctx.needs_grad(0) else None
    has_bias = len(ctx.next) == 3
    cols = ctx.__dict__.pop("conv_cols", None)  # the forward's window matrix, kept by conv2d and friends
    if x.is_complex():
        cols = None  # the window matrix of the unconjugated input
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
    gx, gw = _backward_layout(x, w, gx, gw)
    if not has_bias:
        return gx, gw
    if not ctx.needs_grad(2):
        return gx, gw, None
    return gx, gw, gb if gb is not None else g.sum((0,) + tuple(range(2, g.dim())))


def _backward_layout(x, w, *grads):
    """A 2-d convolution's input and weight gradients as ATen's CPU backward writes them: channels-last, with the
    strides of a new channels-last tensor (size-1 dims included), when the input or the weight suggests that format
    (``conv_suggest_memory_format``, as for the forward), else row-major (size-1 dims' strides included: a kernel
    working on ``(N, C, 1, 1)`` arrays may hand back channels-last ones). One copy where the kernel's layout differs,
    observable through ``autograd.grad``, hooks and views of the gradients."""
    if x.dim() != 4:
        return grads
    cl = suggested_format(x) is channels_last or suggested_format(w) is channels_last
    fmt = channels_last if cl else contiguous_format
    return tuple(None if t is None else written_in(t, fmt) for t in grads)


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
    g, w = _conjugated_inputs(ctx)
    geo = _geometry(ctx.attrs)
    gg = _crop_to(_apply(CONVOLUTION, gy, w, **geo), g.shape[2:]) if ctx.needs_grad(0) else None
    gw = _apply(CONVOLUTION_WEIGHT, gy, g, kernel=tuple(w.shape[2:]), **geo) if ctx.needs_grad(1) else None
    return _backward_layout(g, w, gg, gw)


CONVOLUTION_TRANSPOSE = defop("convolution_transpose", _conv_transpose_kernel, _conv_transpose_backward,
                              Opaque("BLAS + col2im"), saves="inputs", grad_name="ConvolutionBackward0")


def _conv_weight_kernel(xp, x, g, kernel, stride, padding, dilation, groups):
    _check_same_dtype("convolution_weight", x, g)
    dtype = x.dtype
    x, g = _compute_array(x), _compute_array(g)
    pads = [(p, p) for p in padding]
    gw = patch_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    if gw is None:
        gw = pointwise_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    if gw is None:
        gw = direct_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    if gw is None:
        gw = conv_weight(xp, x, g, tuple(kernel), stride, pads, dilation, groups)
    return gw.astype(dtype, copy=False)


def _conv_weight_backward(ctx, ggw):
    x, g = _conjugated_inputs(ctx)
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


from .max_pool_rows import ADAPTIVE_MAX_POOL, MAX_POOL, adaptive_bounds  # noqa: E402,F401 - the pooling rows, imported from here by nn
