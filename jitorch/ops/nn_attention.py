"""The attention row (PyTorch's ``_scaled_dot_product_flash_attention_for_cpu``: ``softmax(q @ k^T * scale + mask) @ v``
with an optional dropout mask) and its backward row.

As a composite, attention costs about a dozen dispatches and autograd nodes each way (matmul, scale, mask fills, the
empty-row guard, softmax, dropout, matmul) and allocates a ``(..., L, S)`` temporary at most of them. As a row it is
two batched matmuls around an in-place softmax, and the backward is four batched matmuls around an in-place softmax
backward.

The scores are computed transposed, ``(..., S, L)`` (``k @ q^T``), so the softmax reduces over a non-innermost axis:
NumPy vectorizes that reduction across the contiguous query axis, where a reduction along 64-element rows runs one
row at a time (about 2x slower for max); the sums are BLAS products with a ones vector. The matmuls read the
transposed operands through BLAS flags, without copies. The probabilities are the row's second, non-differentiable
output (kept for the backward, as layer_norm's mean and rstd are); a query that may attend to nothing gets all-zero
probabilities, as PyTorch's kernels give. As PyTorch's flash kernel, the row also saves its output: modifying it in
place before ``backward`` raises PyTorch's in-place error.

The output is row-major (the layout of PyTorch's math attention, whatever the inputs' strides); ``out_perm`` asks for
a layout whose ``permute(out_perm)`` is contiguous instead: ``nn.functional`` passes the query's stride order where
PyTorch's CPU flash kernel takes the call (it writes ``empty_like(query)``), and ``MultiheadAttention`` the order that
makes merging the heads back a view.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> q = jitorch.ones(1, 2, 3, requires_grad=True)
>>> out, probs = apply(SDPA, q, q, q, None, None, scale=1.0, is_causal=True)
>>> probs
tensor([[[1.0000, 0.0000],
         [0.5000, 0.5000]]])
>>> out.sum().backward()
>>> q.grad
tensor([[[1.5000, 1.5000, 1.5000],
         [0.5000, 0.5000, 0.5000]]])
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..autograd.grad_mode import GradState
from .table import Opaque, defop

__all__ = ["SDPA", "SDPA_BACKWARD", "attention_weights"]


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


def _t(a):
    return a.swapaxes(-1, -2)


# -- forward ----------------------------------------------------------------------------------------------------------
def _causal_bias_t(xp, source, length, dtype):
    """``(S, L)`` causal mask (top-left aligned) as added scores, transposed: ``-inf`` where key ``j`` > query ``i``.
    Host masks are made once per size and dtype (read-only): a decoding loop asks for a new length every token, and
    building it was a fifth of a small attention call."""
    if xp is not np:
        return xp.tril(xp.full((source, length), -xp.inf, dtype=dtype), -1)
    key = (source, length, np.dtype(dtype).str)
    mask = _CAUSAL_MASKS.get(key)
    if mask is None:
        if len(_CAUSAL_MASKS) >= 256:
            _CAUSAL_MASKS.clear()
        mask = _CAUSAL_MASKS[key] = np.tril(np.full((source, length), -np.inf, dtype=dtype), -1)
        mask.flags.writeable = False
    return mask


_CAUSAL_MASKS: dict = {}


def _column_sums(xp, st):
    """Sums of ``st`` over axis -2, kept: a batched ``ones @ st`` (BLAS) for up to 4096 keys, 4x faster than NumPy's
    reduction over a non-innermost axis of a stack of matrices; longer columns keep NumPy's reduction."""
    if st.shape[-2] > 4096:
        return st.sum(axis=-2, keepdims=True)
    return xp.matmul(xp.ones(st.shape[-2], dtype=st.dtype), st)[..., None, :]


def _softmax_columns(xp, st):
    """In place: softmax of ``st`` over axis -2; columns of ``-inf`` only become zeros (not 0/0)."""
    m = st.max(axis=-2, keepdims=True)
    # An all -inf column (a query with nothing to attend to): any finite shift turns it into exp(-inf) = 0. NaN stays.
    xp.maximum(m, xp.finfo(st.dtype).min, out=m)
    st -= m
    xp.exp(st, out=st)
    s = _column_sums(xp, st)
    # A live column sums to >= 1 (its maximum contributes exp(0) = 1 exactly); a dead one to 0: divide it by 1.
    xp.maximum(s, 1, out=s)
    st /= s
    return st


def _out_buffer(xp, shape, dtype, out_perm):
    """An empty output of ``shape`` whose ``permute(out_perm)`` is contiguous (row-major without ``out_perm``: a
    batched matmul's own result follows its operands' batch strides, channels-last ones say)."""
    if out_perm is None:
        return xp.empty(shape, dtype=dtype)
    return xp.empty([shape[i] for i in out_perm], dtype=dtype).transpose(_inverse(out_perm))


@functools.lru_cache(maxsize=64)
def _inverse(perm):
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def _scores_t(xp, q, k, mask, scale, is_causal):
    """``(..., S, L)``: the scaled, masked scores, transposed."""
    st = xp.matmul(k, _t(q))
    st *= scale
    if is_causal:
        st += _causal_bias_t(xp, k.shape[-2], q.shape[-2], st.dtype)
    if mask is not None:
        if mask.dtype == bool:
            xp.copyto(st, -xp.inf, where=xp.logical_not(_t(mask)))
        else:
            st += _t(mask)
    return st


def _widened(xp, *arrays):
    """float32 copies of half/bfloat16 arrays (others as they are): as ATen's CPU flash kernel, attention on 2-byte
    floats computes its products, softmax and sums in float32 and rounds each result once."""
    return [a if a is None or a.dtype == bool or a.dtype.itemsize > 2 else a.astype(xp.float32) for a in arrays]


def _rounded_like(xp, a, like):
    """``a`` rounded to the dtype of ``like``, laid out as ``like`` (``empty_like``)."""
    out = xp.empty_like(like)
    out[...] = a
    return out


def _sdpa_kernel(xp, q, k, v, mask, drop, scale, is_causal, out_perm=None):
    if q.dtype.itemsize == 2:  # float16/bfloat16: float32 inside, the probabilities kept in float32
        out, attn = _sdpa_kernel(xp, *_widened(xp, q, k, v, mask, drop), scale, is_causal)
        buf = _out_buffer(xp, out.shape, v.dtype, out_perm)
        buf[...] = out
        return buf, attn
    st = _softmax_columns(xp, _scores_t(xp, q, k, mask, scale, is_causal))
    weights_t = st if drop is None else st * _t(drop)
    out = _out_buffer(xp, q.shape[:-1] + v.shape[-1:], v.dtype, out_perm)
    xp.matmul(_t(weights_t), v, out=out)
    return out, _t(st)


# -- backward ---------------------------------------------------------------------------------------------------------
def _matmul_like(xp, a, b, like):
    """``a @ b`` laid out as ``like`` (``empty_like``): the gradient of a head-split view then goes back through the
    view without a copy."""
    if like.flags.c_contiguous:
        return xp.matmul(a, b)
    return xp.matmul(a, b, out=xp.empty_like(like))


def _sdpa_backward_kernel(xp, g, q, k, v, attn, drop, scale, needs):
    if q.dtype.itemsize == 2:  # float16/bfloat16: float32 inside (the probabilities already are), as the forward
        grads = _sdpa_backward_kernel(xp, *_widened(xp, g, q, k, v), attn, *_widened(xp, drop), scale, needs)
        return tuple(gr if not gr.size else _rounded_like(xp, gr, like) for gr, like in zip(grads, (q, k, v)))
    at = _t(attn)  # (..., S, L), contiguous: the forward kept it that way
    empty = xp.zeros((0,), dtype=g.dtype)  # placeholder for a gradient nobody asked for
    gq = gk = gv = empty
    if needs[2]:
        gv = _matmul_like(xp, at if drop is None else at * _t(drop), g, v)
    if needs[0] or needs[1]:
        gst = xp.matmul(v, _t(g))  # d(weights)^T
        if drop is not None:
            gst *= _t(drop)
        # Softmax backward down the columns: p * (d - sum(d * p)), then the scale of the scores (einsum: no temporary).
        gst -= xp.einsum("...sl,...sl->...l", gst, at)[..., None, :]
        gst *= at
        gst *= scale
        if needs[0]:
            gq = _matmul_like(xp, _t(gst), k, q)
        if needs[1]:
            gk = _matmul_like(xp, gst, q, k)
    return gq, gk, gv


def _backward_composite(g, q, k, v, attn, drop, scale, needs):
    """(gq, gk, gv) in jitorch ops from the probabilities ``attn``: differentiable to any order."""
    weights = attn if drop is None else attn * drop
    gv = weights.transpose(-2, -1).matmul(g) if needs[2] else None
    gq = gk = None
    if needs[0] or needs[1]:
        ga = g.matmul(v.transpose(-2, -1))
        if drop is not None:
            ga = ga * drop
        gs = attn * (ga - (ga * attn).sum(-1, keepdim=True)) * scale
        gq = gs.matmul(k) if needs[0] else None
        gk = gs.transpose(-2, -1).matmul(q) if needs[1] else None
    return gq, gk, gv


def attention_weights(query, key, attn_mask, scale, is_causal):
    """``softmax(query @ key^T * scale + mask)`` in jitorch ops, a query with nothing to attend to giving zeros.

    ``attn_mask``: boolean (True: may attend) or float (added). The composite form of the row's probabilities:
    ``nn.functional`` uses it for the dtypes and layouts the row does not take, and the row's backward builds its
    graph from it under ``create_graph``.
    """
    from .. import _creation
    from .._dtype import bool as bool_

    scores = query.matmul(key.transpose(-2, -1)) * scale
    keep = None
    if is_causal:
        keep = _creation.ones(query.shape[-2], key.shape[-2], dtype=bool_, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype is bool_:
            keep = attn_mask
        else:
            scores = scores + attn_mask
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    if keep is None and attn_mask is None:
        return scores.softmax(-1)
    # Rows with nothing to attend to: softmax would be 0/0. They are set to 0 before and after the softmax, so neither
    # the output nor the gradient sees a NaN. Always applied (no branch on the values), so a traced or compiled graph
    # stays right for inputs whose masks differ from the example's.
    dead = ~(scores.detach() > -math.inf).any(-1, keepdim=True)
    return scores.masked_fill(dead, 0.0).softmax(-1).masked_fill(dead, 0.0)


def _sdpa_backward(ctx, g, _g_attn):
    q, k, v, mask, drop = ctx.inputs
    scale, is_causal = ctx.attrs["scale"], ctx.attrs["is_causal"]
    needs = (ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2))
    if GradState.enabled:
        # create_graph: the probabilities recomputed in jitorch ops, so the gradients have a graph of their own.
        attn = attention_weights(q, k, mask, scale, is_causal)
        return (*_backward_composite(g, q, k, v, attn, drop, scale, needs), None, None)
    attn = ctx.output(1)  # the result itself may since have been changed in place
    gq, gk, gv = _apply(SDPA_BACKWARD, g, q, k, v, attn, drop, scale=scale, needs=needs)
    return (gq if needs[0] else None), (gk if needs[1] else None), (gv if needs[2] else None), None, None


def _sdpa_backward_backward(ctx, ggq, ggk, ggv):
    # The vector-Jacobian product of the composite formula, the saved probabilities taken as an independent input.
    from ..autograd import grad as autograd_grad
    from ..autograd.grad_mode import enable_grad

    g, q, k, v, attn, drop = ctx.inputs
    needs = ctx.attrs["needs"]
    with enable_grad():
        leaves = [t.detach().requires_grad_() for t in (g, q, k, v, attn)]
        outs = _backward_composite(*leaves, drop, ctx.attrs["scale"], needs)
        pairs = [(o, gg) for o, gg in zip(outs, (ggq, ggk, ggv)) if o is not None and gg is not None]
        if not pairs:
            return None, None, None, None, None, None
        grads = autograd_grad([o for o, _ in pairs], leaves, [gg for _, gg in pairs], allow_unused=True,
                              create_graph=GradState.enabled)
    return (*(gr if ctx.needs_grad(i) else None for i, gr in enumerate(grads)), None)


SDPA = defop("scaled_dot_product_attention", _sdpa_kernel, _sdpa_backward,
             Opaque("batched BLAS around a softmax"), nout=2, saves="both", nondiff_outputs=(1,), masks=True,
             grad_name="ScaledDotProductFlashAttentionForCpuBackward0")
SDPA_BACKWARD = defop("scaled_dot_product_attention_backward", _sdpa_backward_kernel, _sdpa_backward_backward,
                      Opaque("batched BLAS around a softmax backward"), nout=3, saves="inputs",
                      grad_name="ScaledDotProductFlashAttentionForCpuBackwardBackward0")
