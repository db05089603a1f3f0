"""Similarities, distances and attention in ``nn.functional``: ``cosine_similarity``, ``pairwise_distance``,
``pdist`` and ``scaled_dot_product_attention``.

``scaled_dot_product_attention`` is PyTorch's math formulation: ``softmax(q @ k^T * scale + mask) @ v``, with a
boolean mask (True: may attend) or an additive float mask, a causal (top-left aligned) mask, dropout on the attention
weights and grouped-query attention. A query row that may attend to nothing gives zeros, as PyTorch's kernels do.
Float32/float64 inputs of one batch shape go to the attention row (``jitorch/ops/nn_attention.py``: one node, two
batched matmuls around an in-place softmax), and so do float16/bfloat16 ones on the CPU (computed in float32, rounded
once, as PyTorch's CPU flash kernel); other dtypes, broadcast batch dims and masks that need a gradient take the
composite of the same formula. The result is row-major, except where PyTorch's CPU flash kernel would compute it:
that one is laid out as the query (`_flash_order`).

>>> import jitorch
>>> import jitorch.nn.functional as F
>>> F.cosine_similarity(jitorch.tensor([[1.0, 0.0]]), jitorch.tensor([[1.0, 1.0]]))
tensor([0.7071])
>>> q = k = v = jitorch.ones(1, 2, 3, 4)
>>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
jitorch.Size([1, 2, 3, 4])
"""
from __future__ import annotations

import functools
import math

from .. import _creation, _dtype, _movement
from .._dispatch import TORCH_TYPE_NAMES, apply
from .._memory_format import dense_order
from ..amp._cast_mode import autocast_lower
from ..autograd.grad_mode import is_grad_enabled
from ..linalg import vector_norm
from ..ops.nn_attention import SDPA, attention_weights
from ..ops.nn_fused import FUSED_DTYPES
from ..ops.random_ops import BERNOULLI_MASK
from ._functional_dropout import dropout
from .attention import check_backends_allow

__all__ = ["cosine_similarity", "pairwise_distance", "pdist", "scaled_dot_product_attention"]

# c10's names of dtypes, which PyTorch's attention errors print.
_C10_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}


def _clamp_min_value_only(t, eps):
    # PyTorch clamps the norms in place under no_grad: the value is clamped, the gradient is the unclamped norm's.
    return t + (t.clamp_min(eps) - t).detach()


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim`` (inputs broadcast)."""
    common = _dtype.result_type(x1, x2)
    if not common.is_floating_point:  # (integer inputs compute in a float common dtype; complex ones not at all)
        raise RuntimeError(f"expected common dtype to be floating point, yet common dtype is "
                           f"{TORCH_TYPE_NAMES[common.name]} (cosine_similarity of {x1.dtype} and {x2.dtype} inputs; "
                           "pass real floating-point tensors)")
    x1, x2 = _movement.broadcast_tensors(x1, x2)
    x1, x2 = x1.to(common), x2.to(common)
    n1 = _clamp_min_value_only(vector_norm(x1, 2, dim, keepdim=True), eps)
    n2 = _clamp_min_value_only(vector_norm(x2, 2, dim, keepdim=True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim (inputs broadcast)."""
    innermost = max(x1.dim(), x2.dim()) - 1
    diff = x1 - x2 + eps
    if innermost < 0:
        return vector_norm(diff, p)
    return vector_norm(diff, p, innermost, keepdim=keepdim)


def pdist(input, p=2):
    """p-norm distances between every pair of rows of an ``(N, M)`` input: the ``N * (N - 1) / 2`` upper triangle."""
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.shape[0]
    rows, cols = _creation.triu_indices(n, n, 1, device=input.device)
    return vector_norm(input[rows] - input[cols], p, 1)


def _repeat_heads(t, times):
    """``t.repeat_interleave(times, dim=-3)`` by a broadcast view and a reshape."""
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(shape[:-2] + (times,) + shape[-2:])
    return expanded.reshape(shape[:-3] + (shape[-3] * times,) + shape[-2:])


def _check_sdpa(query, key, value, dropout_p):
    if not (query.dtype is key.dtype is value.dtype):
        names = [_C10_NAMES.get(t.dtype.name, t.dtype.name) for t in (query, key, value)]
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: {names[0]} "
                           f"key.dtype: {names[1]} and value.dtype: {names[2]} instead.")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise RuntimeError(f"scaled_dot_product_attention: expected query, key and value of at least 2 dims, but got "
                           f"{query.dim()}, {key.dim()} and {value.dim()}")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention: query's last dim ({query.shape[-1]}) must match key's "
                           f"({key.shape[-1]})")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: key and value must have the same sequence length, but got "
                           f"{key.shape[-2]} and {value.shape[-2]}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")


def _gqa(query, key, value):
    hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if hq % hk or hq % hv:
        raise RuntimeError(f"scaled_dot_product_attention: number of heads in key/value ({hk}/{hv}) must divide the "
                           f"number of heads in query ({hq}) when enable_gqa=True")
    return (_repeat_heads(key, hq // hk) if hk != hq else key), (_repeat_heads(value, hq // hv) if hv != hq else value)


@autocast_lower
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(query @ key^T * scale + mask) @ value`` over ``(..., L, E)``, ``(..., S, E)``, ``(..., S, Ev)``.

    ``attn_mask``: boolean (True where attention is allowed) or float (added to the scores), broadcast to
    ``(..., L, S)``. ``is_causal``: query ``i`` attends to keys ``0..i``. ``scale`` defaults to ``1 / sqrt(E)``.
    ``dropout_p`` drops attention weights (always, as PyTorch's functional; pass 0 in evaluation).
    """
    _check_sdpa(query, key, value, dropout_p)
    check_backends_allow(query.device.type)
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    out_perm = _flash_order(query, key, value, attn_mask, dropout_p)
    if enable_gqa and query.dim() >= 3:
        key, value = _gqa(query, key, value)
    # Without features the scores are empty sums, 0 whatever the scale (PyTorch scales q and k by its root first).
    scale_factor = 1.0 if not query.shape[-1] else 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if attn_mask is not None and attn_mask.dtype is not _dtype.bool and attn_mask.dtype.category < _dtype.FLOAT:
        raise RuntimeError(f"scaled_dot_product_attention: Expected attn_mask dtype to be bool or float, but got "
                           f"{attn_mask.dtype}")
    if _row_takes(query, key, value, attn_mask):
        drop = None
        if dropout_p > 0.0:
            drop = _dropout_scale(query, key, dropout_p)
        return apply(SDPA, query, key, value, attn_mask, drop, scale=scale_factor, is_causal=bool(is_causal),
                     out_perm=out_perm)[0]
    attn = attention_weights(query, key, attn_mask, scale_factor, is_causal)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, training=True)
    return attn.matmul(value)


def _row_takes(query, key, value, attn_mask):
    """Whether the attention row computes this call: float32/64 (or, on the CPU, float16/bfloat16, computed in
    float32 as PyTorch's CPU flash kernel does) of one dtype and batch shape, a mask that broadcasts to the scores
    without widening them and needs no gradient (the row gives masks none)."""
    reduced = query.dtype in (_dtype.float16, _dtype.bfloat16) and query.device.type == "cpu"
    if (query._data.dtype not in FUSED_DTYPES and not reduced) or query.dim() < 2 or not query.numel() \
            or not key.numel():
        return False
    batch = tuple(query.shape[:-2])
    if tuple(key.shape[:-2]) != batch or tuple(value.shape[:-2]) != batch:
        return False
    if attn_mask is None:
        return True
    if attn_mask.dtype is not _dtype.bool and attn_mask.dtype is not query.dtype:
        return False
    if attn_mask.requires_grad and is_grad_enabled():
        return False
    scores = batch + (query.shape[-2], key.shape[-2])
    mask_shape = tuple(attn_mask.shape)
    if len(mask_shape) > len(scores):
        return False
    return all(m in (1, s) for m, s in zip(mask_shape[::-1], scores[::-1]))


def _flash_order(query, key, value, attn_mask, dropout_p):
    """The row's ``out_perm`` where PyTorch's CPU flash kernel takes the call (4-D, no dropout, one head size, unit
    last strides, nonempty, no mask that needs a gradient): it writes ``empty_like(query)``, so heads split from
    ``(B, L, H * E)`` by a transpose merge back with a view. None (row-major, its math kernel's layout) otherwise."""
    q, k, v = query._data, key._data, value._data
    if dropout_p > 0.0 or q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return None
    if q.flags.c_contiguous and 1 not in q.shape:  # row-major (a size-1 dim's stride may still differ)
        return None
    e = q.shape[3]
    if not q.size or not k.size or k.shape[3] != e or v.shape[3] != e:
        return None
    if q.strides[3] != q.itemsize or k.strides[3] != k.itemsize or v.strides[3] != v.itemsize:
        return None
    if attn_mask is not None and attn_mask.requires_grad:
        return None
    return _query_order(q.shape, q.strides)


@functools.lru_cache(maxsize=64)
def _query_order(shape, strides):
    """The dims of a query of ``shape`` and (byte) ``strides`` from outermost to innermost, as ``empty_like`` lays them
    out; None when that is row-major. Cached: a model calls attention on a few layouts over and over."""
    order = tuple(dense_order(shape, strides))
    return None if order == (0, 1, 2, 3) else order


def _dropout_scale(query, key, p):
    """The dropout factors of the attention weights (0 or ``1 / (1 - p)``), drawn as ``F.dropout`` draws its mask."""
    shape = tuple(query.shape[:-1]) + (key.shape[-2],)
    if p == 1.0:
        return query.detach().new_zeros(shape)
    # The mask row (ops/random_ops.py) draws the numbers ``bernoulli_`` would, and a compiled graph draws it afresh.
    ref = query.detach().new_empty(())
    return apply(BERNOULLI_MASK, ref, p=1 - p, shape=shape) / (1 - p)
