"""``multi_head_attention_forward``: the computation behind ``nn.MultiheadAttention``, following PyTorch's.

Inputs are sequence-first, ``(L, N, E)`` (or unbatched ``(L, E)``). Boolean masks mean True = masked out (the
reverse of ``scaled_dot_product_attention``'s) and are turned into additive ``-inf`` masks. With ``need_weights`` the
attention weights are computed explicitly and returned (averaged over heads by default); otherwise the call goes to
``scaled_dot_product_attention`` (self-attention with the packed projection: straight to the attention row, on
strided views of the projection, with no copy of the activations).

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> x = jitorch.randn(3, 2, 4)
>>> w, b = jitorch.randn(12, 4), jitorch.zeros(12)
>>> out, weights = F.multi_head_attention_forward(x, x, x, 4, 2, w, b, None, None, False, 0.0,
...                                               jitorch.randn(4, 4), None)
>>> out.shape, weights.shape
(jitorch.Size([3, 2, 4]), jitorch.Size([2, 3, 3]))
"""
from __future__ import annotations

import math
import warnings

from .. import _creation, _dtype, _movement
from .._dispatch import apply
from ..ops.nn_attention import SDPA
from ._functional_attention import _dropout_scale, _row_takes, scaled_dot_product_attention
from ._functional_core import linear
from ._functional_dropout import dropout

__all__ = ["multi_head_attention_forward"]


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """A bool mask (True = masked) as an additive float mask of ``target_type``; float masks pass unchanged."""
    if mask is None:
        return None
    is_float = mask.dtype.category >= _dtype.FLOAT
    if mask.dtype is not _dtype.bool and not is_float:
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if check_other and other_type is not None and mask.dtype is not other_type:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type for both "
                      "instead.", stacklevel=3)
    if not is_float:
        mask = _creation.zeros_like(mask, dtype=target_type).masked_fill(mask, -math.inf)
    return mask


def _none_or_dtype(input):
    """The dtype of a mask, or None (PyTorch's helper, used by transformer layers)."""
    if input is None:
        return None
    if hasattr(input, "dtype") and hasattr(input, "shape"):
        return input.dtype
    raise RuntimeError("input to _none_or_dtype() must be None or torch.Tensor")


def _pad_last(t):
    """Append one zero along the last dim (PyTorch's ``pad(t, (0, 1))``)."""
    return _movement.cat([t, t.new_zeros(tuple(t.shape[:-1]) + (1,))], -1)


def _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    if query.dim() == 3:
        if key.dim() != 3 or value.dim() != 3:
            raise AssertionError(f"For batched (3-D) `query`, expected `key` and `value` to be 3-D but found "
                                 f"{key.dim()}-D and {value.dim()}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 2:
            raise AssertionError(f"For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but "
                                 f"found {key_padding_mask.dim()}-D tensor instead")
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise AssertionError(f"For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                                 f"{attn_mask.dim()}-D tensor instead")
        return True
    if query.dim() == 2:
        if key.dim() != 2 or value.dim() != 2:
            raise AssertionError(f"For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found "
                                 f"{key.dim()}-D and {value.dim()}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 1:
            raise AssertionError(f"For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D but "
                                 f"found {key_padding_mask.dim()}-D tensor instead")
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 3):
                raise AssertionError(f"For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but "
                                     f"found {attn_mask.dim()}-D tensor instead")
            expected = (num_heads, query.shape[0], key.shape[0])
            if attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
                raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got {attn_mask.shape}")
        return False
    raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D query tensor")


def _project(query, key, value, in_proj_weight, in_proj_bias, separate, q_w, k_w, v_w):
    if separate:
        for name, w in (("q_proj_weight", q_w), ("k_proj_weight", k_w), ("v_proj_weight", v_w)):
            if w is None:
                raise AssertionError(f"use_separate_proj_weight is True but {name} is None")
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = in_proj_bias.chunk(3)
        return linear(query, q_w, b_q), linear(key, k_w, b_k), linear(value, v_w, b_v)
    if in_proj_weight is None:
        raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
    if query is key and key is value:  # self-attention: one matmul for the three projections
        e = query.shape[-1]
        proj = linear(query, in_proj_weight, in_proj_bias).unflatten(-1, (3, e))
        return proj.select(-2, 0), proj.select(-2, 1), proj.select(-2, 2)
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q = b_k = b_v = None
    if in_proj_bias is not None:
        b_q, b_k, b_v = in_proj_bias.chunk(3)
    return linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)


# PyTorch's private helpers under their names: copies of its attention code import them from ``nn.functional``.
_mha_shape_check = _shape_check


def _in_projection_packed(q, k, v, w, b=None):
    """``q``, ``k``, ``v`` projected by the three row blocks of the packed ``w`` (and ``b``)."""
    return _project(q, k, v, w, b, False, None, None, None)


def _in_projection(q, k, v, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    """``q``, ``k``, ``v`` projected by their own weights (and biases), all to the query's embedding size."""
    e_q, e_k, e_v = q.size(-1), k.size(-1), v.size(-1)
    for name, t, shape in (("query weights", w_q, (e_q, e_q)), ("key weights", w_k, (e_q, e_k)),
                           ("value weights", w_v, (e_q, e_v)), ("query bias", b_q, (e_q,)),
                           ("key bias", b_k, (e_q,)), ("value bias", b_v, (e_q,))):
        if t is not None and tuple(t.shape) != shape:
            raise AssertionError(f"expecting {name} shape of {shape}, but got {t.shape}")
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def _check_attn_mask(attn_mask, tgt_len, src_len, bsz, num_heads):
    if attn_mask.dim() == 2:
        if tuple(attn_mask.shape) != (tgt_len, src_len):
            raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                               f"{(tgt_len, src_len)}.")
        return attn_mask.unsqueeze(0)
    if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
        raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                           f"{(bsz * num_heads, tgt_len, src_len)}.")
    return attn_mask


def _static(static, projected, bsz, num_heads, head_dim, name):
    if static is None:
        return projected.reshape(projected.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    if static.shape[0] != bsz * num_heads:
        raise AssertionError(f"expecting {name}.size(0) of {bsz * num_heads}, but got {static.shape[0]}")
    if static.shape[2] != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {static.shape[2]}")
    return static


def _packed_self_attention(x, num_heads, in_w, in_b, out_w, out_b, attn_mask, dropout_p, is_causal):
    """Self-attention with the packed projection weights and no copy of the activations: ``(L, N, E)`` in and out.

    The three projections are made with row blocks of ``in_proj_weight`` (the same GEMM work as one packed product),
    so the heads are views of three separate results: the backward then adds three ``(L, N, E)`` gradients, where
    views of one packed result would each scatter into a zeroed ``(L, N, 3E)`` gradient. The attention row writes its
    output in the layout where merging the heads back is a view. A ``batch_first`` module passes its ``(N, L, E)``
    input transposed: it is projected in its own memory order, and the result goes back as the transposed view of an
    ``(N, L, E)`` array.
    """
    length, bsz, embed_dim = x.shape
    head_dim = embed_dim // num_heads
    batch_major = not x.is_contiguous() and x.transpose(0, 1).is_contiguous()
    src = x.transpose(0, 1) if batch_major else x
    # (N, H, L, hd) views of (N, L, E) or (L, N, E) results; the output memory is (N, L, H, hd) or (L, N, H, hd).
    dims, out_perm = ((0, 2, 1, 3), (0, 2, 1, 3)) if batch_major else ((1, 2, 0, 3), (2, 0, 1, 3))
    biases = in_b.chunk(3) if in_b is not None else (None, None, None)
    q, k, v = (linear(src, w, b).view(*src.shape[:2], num_heads, head_dim).permute(*dims)
               for w, b in zip(in_w.chunk(3), biases))
    if attn_mask is not None:
        attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 else \
            attn_mask.reshape(bsz, num_heads, length, attn_mask.shape[-1])
    if _row_takes(q, k, v, attn_mask):
        drop = _dropout_scale(q, k, dropout_p) if dropout_p > 0.0 else None
        out = apply(SDPA, q, k, v, attn_mask, drop, scale=1.0 / math.sqrt(head_dim), is_causal=bool(is_causal),
                    out_perm=out_perm)[0]
    else:
        out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = linear(out.permute(*out_perm).reshape(-1, embed_dim), out_w, out_b)
    if batch_major:
        return out.view(bsz, length, embed_dim).transpose(0, 1)
    return out.view(length, bsz, embed_dim)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """Multi-head attention over sequence-first inputs; returns ``(output, weights or None)``."""
    is_batched = _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask",
                                       None if attn_mask is None else attn_mask.dtype, "attn_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
                           "`generate_square_subsequent_mask` to create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # scaled_dot_product_attention builds the causal mask itself
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, check_other=False)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight and tuple(key.shape[:2]) != tuple(value.shape[:2]):
        raise AssertionError(f"key's sequence and batch dims {key.shape[:2]} do not match value's {value.shape[:2]}")
    if not use_separate_proj_weight and tuple(key.shape) != tuple(value.shape):
        raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
    if (not need_weights and query is key and key is value and not use_separate_proj_weight and bias_k is None
            and bias_v is None and not add_zero_attn and static_k is None and static_v is None
            and key_padding_mask is None):
        if attn_mask is not None:
            attn_mask = _check_attn_mask(attn_mask, tgt_len, src_len, bsz, num_heads)
        out = _packed_self_attention(query, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                                     attn_mask, dropout_p if training else 0.0, is_causal)
        return (out if is_batched else out.squeeze(1)), None
    q, k, v = _project(query, key, value, in_proj_weight, in_proj_bias, use_separate_proj_weight, q_proj_weight,
                       k_proj_weight, v_proj_weight)
    if attn_mask is not None:
        attn_mask = _check_attn_mask(attn_mask, tgt_len, src_len, bsz, num_heads)
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = _movement.cat([k, bias_k.repeat(1, bsz, 1)])
        v = _movement.cat([v, bias_v.repeat(1, bsz, 1)])
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
    elif bias_k is not None or bias_v is not None:
        raise AssertionError("bias_k is set but bias_v is None" if bias_k is not None else
                             "bias_v is set but bias_k is None")
    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = _static(static_k, k, bsz, num_heads, head_dim, "static_k")
    v = _static(static_v, v, bsz, num_heads, head_dim, "static_v")
    if add_zero_attn:
        zeros = _creation.zeros((bsz * num_heads, 1, head_dim), dtype=k.dtype, device=k.device)
        k, v = _movement.cat([k, zeros], 1), _movement.cat([v, zeros.to(v.dtype)], 1)
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise AssertionError(f"Expected key_padded_mask of shape {(bsz, src_len)}, but got "
                                 f"{tuple(key_padding_mask.shape)}")
        key_padding_mask = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(bsz, num_heads, 1, src_len) \
            .reshape(bsz * num_heads, 1, src_len)
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = (q * math.sqrt(1.0 / head_dim)).matmul(k.transpose(-2, -1))
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = scores.softmax(-1)
        if dropout_p > 0.0:
            weights = dropout(weights, p=dropout_p)
        out = weights.matmul(v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = linear(out, out_proj_weight, out_proj_bias)
        out = out.reshape(tgt_len, bsz, out.shape[-1])  # sizes spelled out: -1 is ambiguous for an empty batch
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(1)
        if not is_batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights
    if attn_mask is not None:
        attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 else \
            attn_mask.reshape(bsz, num_heads, attn_mask.shape[-2], src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias)
    out = out.reshape(tgt_len, bsz, out.shape[-1])
    return (out.squeeze(1) if not is_batched else out), None
