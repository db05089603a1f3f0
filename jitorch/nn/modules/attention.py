"""``MultiheadAttention``: PyTorch's layer (packed ``in_proj_weight`` or separate q/k/v weights for ``kdim``/``vdim``,
``out_proj``, optional ``bias_k``/``bias_v`` and zero attention), computed by ``F.multi_head_attention_forward``;
where PyTorch would take its fused inference path, that path's NaN rows (`_attention_fast_path`).

>>> import jitorch
>>> from jitorch.nn.modules.attention import MultiheadAttention
>>> mha = MultiheadAttention(8, 2, batch_first=True)
>>> x = jitorch.randn(3, 5, 8)
>>> out, weights = mha(x, x, x)
>>> out.shape, weights.shape
(jitorch.Size([3, 5, 8]), jitorch.Size([3, 5, 5]))
"""
from __future__ import annotations

from ... import _creation
from ..init import constant_, xavier_normal_, xavier_uniform_
from ..parameter import Parameter
from ._attention_fast_path import blocked_query_rows, mha_takes_fast_path, nan_rows
from .linear import NonDynamicallyQuantizableLinear
from .module import Module

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Attention over ``num_heads`` subspaces: ``out_proj(concat_h softmax(Q_h K_h^T / sqrt(d) + mask) V_h)``.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights or None)``. Boolean masks are True where
    attention is NOT allowed; float masks are added to the scores. Inputs are ``(L, N, E)`` (``(N, L, E)`` with
    ``batch_first``) or unbatched ``(L, E)``.
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != self.embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(_creation.empty((embed_dim, embed_dim), **kw))
            self.k_proj_weight = Parameter(_creation.empty((embed_dim, self.kdim), **kw))
            self.v_proj_weight = Parameter(_creation.empty((embed_dim, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(_creation.empty((3 * embed_dim, embed_dim), **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_creation.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(_creation.empty((1, 1, embed_dim), **kw))
            self.bias_v = Parameter(_creation.empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        """Xavier-uniform projections, zero biases, Xavier-normal ``bias_k``/``bias_v`` (PyTorch's init)."""
        if self._qkv_same_embed_dim:
            xavier_uniform_(self.in_proj_weight)
        else:
            xavier_uniform_(self.q_proj_weight)
            xavier_uniform_(self.k_proj_weight)
            xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            constant_(self.in_proj_bias, 0.0)
            constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            xavier_normal_(self.bias_v)

    def __setstate__(self, state):
        state.setdefault("_qkv_same_embed_dim", True)
        super().__setstate__(state)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        from .. import functional as F

        blocked = None
        if mha_takes_fast_path(self, query, key, value, key_padding_mask, attn_mask):
            # PyTorch's fused inference kernel: NaN rows where every key is masked, ``is_causal`` unread.
            is_causal = False
            blocked = blocked_query_rows(attn_mask, key_padding_mask, query.shape[0], self.num_heads, query.shape[1])
        is_batched = query.dim() == 3
        if self.batch_first and is_batched:
            # Keep self-attention's ``query is key is value`` identity: it selects the single packed projection.
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        separate = not self._qkv_same_embed_dim
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=separate, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and is_batched:
            out = out.transpose(1, 0)
        return nan_rows(out, blocked), weights

    def merge_masks(self, attn_mask, key_padding_mask, query):
        """One ``(N, num_heads, L, S)`` mask from ``attn_mask`` and ``key_padding_mask`` and its type (PyTorch's
        fast-path helper: 1 = padding mask only, 2 = attention mask)."""
        mask_type, merged = None, None
        if key_padding_mask is not None:
            mask_type, merged = 1, key_padding_mask
        if attn_mask is not None:
            batch_size, seq_len, _ = query.shape
            mask_type = 2
            if attn_mask.dim() == 3:
                merged = attn_mask.view(batch_size, -1, seq_len, seq_len)
            else:
                merged = attn_mask.view(1, 1, seq_len, seq_len).expand(batch_size, self.num_heads, -1, -1)
            if key_padding_mask is not None:
                merged = merged + key_padding_mask.view(batch_size, 1, 1, seq_len).expand(-1, self.num_heads, -1, -1)
        return merged, mask_type
