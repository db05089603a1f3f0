"""Transformer layers: ``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer``,
``TransformerDecoder`` and ``Transformer``, with PyTorch's submodule names (so ``state_dict``s load across) and its
post-norm / pre-norm (``norm_first``) residual blocks.

PyTorch's inference fast paths (fused kernels, nested tensors) compute the same function and are not reproduced,
except for their visible effects: where PyTorch's encoder runs a padded batch as a nested tensor (eval mode, no
gradients, a left-aligned ``src_key_padding_mask``, no ``mask``), its output is zero at the padded positions, and
so is jitorch's (`_nested_path_keep`); where its fused encoder layer runs, masks are read as boolean and fully
masked rows come out NaN (`_attention_fast_path`).

>>> import jitorch
>>> from jitorch.nn.modules.transformer import Transformer, TransformerEncoder, TransformerEncoderLayer
>>> layer = TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
>>> encoder = TransformerEncoder(layer, num_layers=2)
>>> causal = Transformer.generate_square_subsequent_mask(5)
>>> encoder(jitorch.randn(3, 5, 8), mask=causal).shape
jitorch.Size([3, 5, 8])
"""
from __future__ import annotations

import copy
import warnings

from ... import _creation
from .. import functional as F
from .._functional_mha import _canonical_mask
from ._attention_fast_path import as_blocking, blocked_query_rows, encoder_layer_takes_fast_path, nan_rows
from ..init import xavier_uniform_
from .attention import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer"]


def _generate_square_subsequent_mask(sz, device=None, dtype=None):
    """``(sz, sz)`` float mask: ``-inf`` above the diagonal (future positions), 0 elsewhere."""
    return _creation.full((sz, sz), float("-inf"), dtype=dtype, device=device).triu(1)


def _get_seq_len(src, batch_first):
    size = src.size()
    return size[0] if len(size) == 2 else size[1 if batch_first else 0]


def _detect_is_causal_mask(mask, is_causal=None, size=None):
    """``is_causal`` when given; otherwise whether ``mask`` is exactly the square subsequent mask."""
    make_causal = is_causal is True
    if is_causal is None and mask is not None:
        sz = size if size is not None else mask.size(-2)
        causal = _generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype)
        make_causal = mask.size() == causal.size() and bool((mask == causal).all())
    return make_causal


def _none_or_dtype(t):
    return None if t is None else t.dtype


def _get_clones(module, n):
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def _get_activation_fn(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class TransformerEncoderLayer(Module):
    """Self-attention + feed-forward block: ``norm(x + SA(x))``, ``norm(x + FF(x))`` (or pre-norm with
    ``norm_first``); ``activation`` is ``'relu'``, ``'gelu'`` or a callable."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        if isinstance(activation, str):
            activation = _get_activation_fn(activation)
        # Kept for parity with PyTorch, whose fused fast path reads it: 1 = relu, 2 = gelu, 0 = other.
        if activation is F.relu or type(activation).__name__ == "ReLU":
            self.activation_relu_or_gelu = 1
        elif activation is F.gelu or type(activation).__name__ == "GELU":
            self.activation_relu_or_gelu = 2
        else:
            self.activation_relu_or_gelu = 0
        self.activation = activation

    def __setstate__(self, state):
        super().__setstate__(state)
        if not hasattr(self, "activation"):
            self.activation = F.relu

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        src_key_padding_mask = _canonical_mask(src_key_padding_mask, "src_key_padding_mask",
                                               _none_or_dtype(src_mask), "src_mask", src.dtype)
        src_mask = _canonical_mask(src_mask, "src_mask", None, "", src.dtype, check_other=False)
        blocked = None
        if encoder_layer_takes_fast_path(self, src):
            # PyTorch's fused inference layer reads the masks as boolean (nonzero = blocked) and not is_causal;
            # rows with every key blocked come out NaN.
            src_mask, src_key_padding_mask = as_blocking(src_mask), as_blocking(src_key_padding_mask)
            is_causal = False
            blocked = blocked_query_rows(src_mask, src_key_padding_mask, src.shape[0], self.self_attn.num_heads,
                                         src.shape[1])
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal=is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal=is_causal))
            x = self.norm2(x + self._ff_block(x))
        return nan_rows(x, blocked)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over ``memory`` and feed-forward, each with a residual and a LayerNorm."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias,
                                                 **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _get_activation_fn(activation) if isinstance(activation, str) else activation

    def __setstate__(self, state):
        state.setdefault("activation", F.relu)
        super().__setstate__(state)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                           need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                is_causal=is_causal, need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _nested_tensor_blocker(layer):
    """Why PyTorch would not use its nested-tensor path for ``layer`` ('' when it would): only the warning uses it."""
    if not isinstance(layer, TransformerEncoderLayer):
        return "encoder_layer was not TransformerEncoderLayer"
    checks = [
        (layer.norm_first, "encoder_layer.norm_first was True"),
        (not layer.self_attn.batch_first, "encoder_layer.self_attn.batch_first was not True(use batch_first for "
                                          "better inference performance)"),
        (not layer.self_attn._qkv_same_embed_dim, "encoder_layer.self_attn._qkv_same_embed_dim was not True"),
        (layer.self_attn.in_proj_bias is None, "encoder_layer.self_attn was passed bias=False"),
        (not layer.activation_relu_or_gelu, "encoder_layer.activation_relu_or_gelu was not True"),
        (layer.norm1.eps != layer.norm2.eps, "encoder_layer.norm1.eps was not equal to encoder_layer.norm2.eps"),
        (layer.self_attn.num_heads % 2 == 1, "encoder_layer.self_attn.num_heads is odd"),
    ]
    return next((why for failed, why in checks if failed), "")


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` applied in turn, then the optional final ``norm``."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why = _nested_tensor_blocker(encoder_layer)
        if enable_nested_tensor and why:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False because {why}",
                          stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """``mask``: ``(S, S)`` or ``(N * nhead, S, S)`` float (added) or bool (True = blocked);
        ``src_key_padding_mask``: ``(N, S)``; ``is_causal=None`` detects a square subsequent ``mask``."""
        src_key_padding_mask = _canonical_mask(src_key_padding_mask, "src_key_padding_mask", _none_or_dtype(mask),
                                               "mask", src.dtype)
        mask = _canonical_mask(mask, "mask", None, "", src.dtype, check_other=False)
        seq_len = _get_seq_len(src, self.layers[0].self_attn.batch_first)
        is_causal = _detect_is_causal_mask(mask, is_causal, seq_len)
        output = src
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=is_causal, src_key_padding_mask=src_key_padding_mask)
        keep = self._nested_path_keep(src, mask, src_key_padding_mask)
        if keep is not None:
            output = output.masked_fill(keep.logical_not().unsqueeze(-1), 0.0)
        if self.norm is not None:
            output = self.norm(output)
        return output

    def _nested_path_keep(self, src, mask, padding):
        """The ``(N, S)`` mask of real tokens when PyTorch would run this call as a nested tensor (whose padded
        positions come out as zeros), else None: its conditions, in its order."""
        from ... import backends
        from ..._dispatch import is_compiling
        from ...amp.autocast_mode import is_autocast_enabled
        from ...autograd.grad_mode import is_grad_enabled

        first = self.layers[0]
        if not (backends.mha.get_fastpath_enabled() and self.use_nested_tensor and not first.training
                and src.dim() == 3 and padding is not None and mask is None and not is_autocast_enabled()):
            return None
        if self.mask_check and is_compiling():
            return None
        params = list(first.parameters())
        if is_grad_enabled() and (src.requires_grad or any(p.requires_grad for p in params)):
            return None
        keep = padding == 0  # canonical: 0 for a token, -inf for padding
        if self.mask_check:
            # Left-aligned only: each row's tokens, then its padding (PyTorch checks this before nesting).
            counts = keep.sum(1, keepdim=True)
            if not bool((keep == (_creation.arange(keep.shape[1]).unsqueeze(0) < counts)).all()):
                return None
        return keep


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` over ``(tgt, memory)``, then the optional final ``norm``."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        output = tgt
        seq_len = _get_seq_len(tgt, self.layers[0].self_attn.batch_first)
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, seq_len)
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """Encoder-decoder transformer ("Attention Is All You Need") with final LayerNorms; Xavier-uniform init of every
    matrix parameter, as PyTorch."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation=F.relu, custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                      bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        is_batched = src.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if is_batched and src.size(batch_dim) != tgt.size(batch_dim):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The causal mask: ``-inf`` where position ``j > i`` (the future), 0 elsewhere."""
        return _generate_square_subsequent_mask(sz, dtype=dtype, device=device)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                xavier_uniform_(p)
