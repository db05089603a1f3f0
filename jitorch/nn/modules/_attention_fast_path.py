"""What PyTorch's inference fast paths for attention change visibly, reproduced on jitorch's ordinary computation.

In eval mode without gradients, PyTorch runs a batch-first self-attention ``MultiheadAttention`` through
``torch._native_multi_head_attention`` and a ``TransformerEncoderLayer`` through
``torch._transformer_encoder_layer_fwd``.
Their results equal the ordinary computation except where the masks come in (pytorch/pytorch#107084, #147209):

- the merged mask is read as a boolean one: any nonzero entry blocks its key, so an additive float mask's values
  are lost (``MultiheadAttention`` leaves the fast path for float masks; the encoder layer does not);
- a query row whose keys are all blocked comes out NaN (a softmax over nothing), where the ordinary path's
  ``scaled_dot_product_attention`` gives zeros;
- ``is_causal`` is not read: the masks alone decide (no error for a missing causal mask either).

The checks below follow PyTorch's, in its order; each returns whether the fast path would run.
"""
from __future__ import annotations

import math


def _grad_blocks(tensors):
    from ...autograd.grad_mode import is_grad_enabled

    return is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _devices_and_overrides_allow(tensors):
    from ...overrides import has_torch_function

    present = tuple(t for t in tensors if t is not None)
    return not has_torch_function(present) and all(t.device.type in ("cpu", "cuda") for t in present)


def mha_takes_fast_path(mha, query, key, value, key_padding_mask, attn_mask):
    """Whether PyTorch's ``MultiheadAttention.forward`` would call ``torch._native_multi_head_attention``."""
    from ... import backends
    from ...amp.autocast_mode import is_autocast_enabled

    if any(m is not None and m.is_floating_point() for m in (attn_mask, key_padding_mask)):
        return False
    weight, bias = mha.in_proj_weight, mha.in_proj_bias
    if not (backends.mha.get_fastpath_enabled() and query.dim() == 3 and query is key and key is value
            and weight is not None and bias is not None and query.dtype == bias.dtype == weight.dtype
            and not mha.training and mha.num_heads % 2 == 0 and mha.batch_first and mha.bias_k is None
            and mha.bias_v is None and not mha.add_zero_attn and mha._qkv_same_embed_dim
            and not is_autocast_enabled()):
        return False
    tensors = (query, key, value, weight, bias, mha.out_proj.weight, mha.out_proj.bias)
    return _devices_and_overrides_allow(tensors) and not _grad_blocks(tensors)


def encoder_layer_takes_fast_path(layer, src):
    """Whether PyTorch's ``TransformerEncoderLayer.forward`` would call ``torch._transformer_encoder_layer_fwd``."""
    from ... import backends
    from ...amp.autocast_mode import is_autocast_enabled

    attn = layer.self_attn
    if not (backends.mha.get_fastpath_enabled() and src.dim() == 3 and not layer.training and attn.batch_first
            and attn.in_proj_bias is not None and attn._qkv_same_embed_dim and layer.activation_relu_or_gelu
            and layer.norm1.eps == layer.norm2.eps and attn.num_heads % 2 == 0 and not is_autocast_enabled()):
        return False
    if any(len(getattr(m, "_forward_hooks", {})) + len(getattr(m, "_forward_pre_hooks", {}))
           for m in layer.modules()):
        return False
    tensors = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
               layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias, layer.linear1.weight,
               layer.linear1.bias, layer.linear2.weight, layer.linear2.bias)
    return _devices_and_overrides_allow(tensors) and not _grad_blocks(tensors)


def as_blocking(mask):
    """The fast path's reading of a mask: True (blocked) wherever it is nonzero; None stays None."""
    from ... import _dtype

    return mask if mask is None or mask.dtype is _dtype.bool else mask != 0


def blocked_query_rows(attn_mask, key_padding_mask, batch, num_heads, seq_len):
    """The ``(N, L)`` rows whose keys the boolean masks block entirely in some head, or None when no row is.

    ``attn_mask``: ``(L, S)`` or ``(N * num_heads, L, S)``; ``key_padding_mask``: ``(N, S)``."""
    if attn_mask is None and key_padding_mask is None:
        return None
    blocked = None
    if attn_mask is not None:
        blocked = attn_mask.reshape(-1, num_heads, seq_len, attn_mask.shape[-1]) if attn_mask.dim() == 3 \
            else attn_mask.reshape(1, 1, seq_len, attn_mask.shape[-1])
    if key_padding_mask is not None:
        padding = key_padding_mask.reshape(batch, 1, 1, key_padding_mask.shape[-1])
        blocked = padding if blocked is None else blocked | padding
    rows = blocked.all(-1).any(1).expand(batch, seq_len)
    return rows if bool(rows.any()) else None


def nan_rows(out, rows):
    """``out`` (batch-first ``(N, L, E)``) with the given rows NaN, as the fast path leaves them."""
    return out if rows is None else out.masked_fill(rows.unsqueeze(-1), math.nan)
