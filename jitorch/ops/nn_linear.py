"""The ``linear`` row (PyTorch's ``addmm``/``linear``: ``x @ W^T + b``) and its backward row.

As a composite, ``F.linear`` costs a transpose view, a matmul and a broadcast add forward (three dispatches, three
nodes, and a temporary the add copies), and the backward reduces the bias gradient through the engine's generic
``_sum_to_size``. As a row it is one matmul into a fresh array with the bias added in place, and one backward node
whose gradients come from one backward row: ``g @ W``, ``g^T @ x`` (already in W's ``(out, in)`` layout) and ``g``
summed over all leading dims.

Double backward: with ``create_graph`` the backward is written in jitorch ops (differentiable to any order); the
backward row is used only when no graph is being built, and its own backward is also written in jitorch ops.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> x = jitorch.ones(2, 3, requires_grad=True)
>>> apply(LINEAR, x, jitorch.ones(4, 3), jitorch.zeros(4))
tensor([[3., 3., 3., 3.],
        [3., 3., 3., 3.]], grad_fn=<LinearBackward0>)
"""
from __future__ import annotations

import numpy as np

from .. import _dispatch
from ..autograd.grad_mode import GradState
from .cascade_sum import sum_rows
from .host_matmul import _TRANSPOSED_MIN_WORK, matmul
from .table import Opaque, defop

__all__ = ["LINEAR", "LINEAR_BACKWARD"]


def _apply(op, *args, **attrs):
    # The module, bound once (it is loaded before the nn rows): an import statement here cost a microsecond a call.
    return _dispatch.apply(op, *args, **attrs)


def _rows(a):
    """``a`` as a 2-D ``(rows, last)`` matrix: one GEMM instead of numpy's loop over the leading dims."""
    return a.reshape(-1, a.shape[-1]) if a.ndim != 2 else a


def _linear_kernel(xp, x, w, b):
    if x.ndim == 2:
        n, k = x.shape
        if xp is np and k > 1 and n * k * w.shape[0] < _TRANSPOSED_MIN_WORK:
            # `matmul`'s own choice for a small float product (np.dot), without its checks: 0.4 us of a 3.5 us
            # 8 x 32 -> 16 layer call. No dtype test: the row's callers pass float32/float64 operands of one dtype
            # (FUSED_DTYPES), so the result needs no rounding back. One input feature (k == 1) keeps matmul's
            # broadcast multiply.
            out = np.dot(x, w.T)
            if b is not None:
                out += b
            return out
        out = matmul(xp, x, w.T)  # BLAS reads the transposed view with a flag: no copy of W
    else:
        out = matmul(xp, _rows(x), w.T).reshape(x.shape[:-1] + (w.shape[0],))
    if b is not None:
        out += b  # in place: the matmul result is fresh
    # NumPy's matmul of bfloat16 (ml_dtypes) returns float32: round back to the inputs' dtype, as torch's result is.
    return out if out.dtype == x.dtype else out.astype(x.dtype)


def _grads_composite(g, x, w, needs):
    """(gx, gw, gb) in jitorch ops: the graph-building backward (``create_graph``)."""
    gx = g.matmul(w) if needs[0] else None
    g2 = g.reshape(-1, g.shape[-1]) if (needs[1] or needs[2]) and g.dim() != 2 else g
    gw = g2.t().matmul(x.reshape(-1, x.shape[-1])) if needs[1] else None
    gb = g2.sum(0) if needs[2] else None
    return gx, gw, gb


def _linear_backward(ctx, g):
    x, w, _b = ctx.inputs
    needs = (ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2))
    if GradState.enabled:
        return _grads_composite(g, x, w, needs)
    # The row needs x only for gw and w only for gx (save_if saved exactly those): pass g for the missing one.
    gx, gw, gb = _apply(LINEAR_BACKWARD, g, x if x is not None else g, w if w is not None else g, needs=needs)
    return (gx if needs[0] else None), (gw if needs[1] else None), (gb if needs[2] else None)


def _linear_backward_kernel(xp, g, x, w, needs):
    g2 = _rows(g)
    gx = gw = gb = None
    if needs[0]:
        gx = matmul(xp, g2, w)
        if g.ndim != 2:
            gx = gx.reshape(g.shape[:-1] + (w.shape[1],))
    if needs[1]:
        gw = matmul(xp, g2.T, _rows(x))
    if needs[2]:
        gb = sum_rows(xp, g2)  # over a batch of rows: NumPy's sum(axis=0) adds them one after another
    dtype = g.dtype
    out = []
    for r in (gx, gw, gb):  # a loop, not a generator: this runs in every small layer's backward
        if r is None:
            r = xp.zeros((0,), dtype=dtype)  # placeholder for a gradient nobody asked for
        elif r.dtype != dtype:
            r = r.astype(dtype)  # bfloat16 matmul: float32
        out.append(r)
    return tuple(out)


def _linear_backward_backward(ctx, ggx, ggw, ggb):
    # Outputs gx = g @ w, gw = g2^T @ x2, gb = sum(g2): each is bilinear or linear in (g, x, w).
    g, x, w = ctx.inputs
    needs = ctx.attrs["needs"]
    ggx = ggx if needs[0] else None
    ggw = ggw if needs[1] else None
    ggb = ggb if needs[2] else None
    gg_g = gg_x = gg_w = None
    if ctx.needs_grad(0):
        parts = []
        if ggx is not None:
            parts.append(ggx.matmul(w.t()))
        if ggw is not None:
            parts.append(x.matmul(ggw.t()))
        if ggb is not None:
            parts.append(ggb.expand(g.shape))
        gg_g = sum(parts[1:], parts[0]) if parts else g.new_zeros(g.shape)
    if ctx.needs_grad(1) and needs[1]:
        gg_x = g.matmul(ggw) if ggw is not None else None
    if ctx.needs_grad(2) and needs[0]:
        if ggx is not None:
            gg_w = g.reshape(-1, g.shape[-1]).t().matmul(ggx.reshape(-1, ggx.shape[-1]))
    return gg_g, gg_x, gg_w


def _save_if(needs):
    # x only for W's gradient, W only for x's: saving less keeps less alive and avoids spurious in-place errors.
    return (needs[1], needs[0], False)


# row_major_out: the product is a matmul into a new array.
LINEAR = defop("linear", _linear_kernel, _linear_backward, Opaque("BLAS"), saves="inputs", save_if=_save_if,
               grad_name="LinearBackward0", row_major_out=True)
LINEAR_BACKWARD = defop("linear_backward", _linear_backward_kernel, _linear_backward_backward, Opaque("BLAS"),
                        nout=3, saves="inputs")
