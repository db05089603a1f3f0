"""``torch.nn.attention.varlen``: attention over packed variable-length sequences. The batch is one token axis,
cut into sequences by cumulative offsets (``cu_seq_q``, ``cu_seq_k``), so no padding is computed.

torch runs it only through CUDA's flash kernels; jitorch computes it from its ops on every device (one product per
sequence), so gradients flow and the code also runs on the CPU. Masks follow flash attention's conventions: a
``window_size`` of ``(left, right)`` lets query ``i`` see keys ``i + (k_len - q_len) - left`` through
``i + (k_len - q_len) + right`` (``-1``: unbounded), so ``(-1, 0)`` is causal anchored at the bottom right.

>>> import jitorch
>>> q = jitorch.ones(5, 2, 4)
>>> cu = jitorch.tensor([0, 2, 5], dtype=jitorch.int32)
>>> varlen_attn(q, q, q, cu, cu, 3, 3, window_size=(-1, 0)).shape
jitorch.Size([5, 2, 4])
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..._offsets import read_offsets

__all__ = ["AuxRequest", "varlen_attn", "varlen_attn_out"]


class AuxRequest(NamedTuple):
    """Which auxiliary outputs ``varlen_attn`` returns besides the attention output."""

    lse: bool = False


def _offsets(cu, name, count=None):
    values = read_offsets(cu, "varlen_attn", name)
    if count is not None and len(values) != count:
        raise RuntimeError(f"varlen_attn: {name} has {len(values)} offsets, cu_seq_q has {count}")
    return values


def _paged_keys(pages, table_row, used):
    """The first ``used`` tokens of one sequence from a pool of pages (pages, page_size, H, D)."""
    import jitorch

    page_size = pages.shape[1]
    needed = -(-used // page_size)
    rows = [pages[int(p)] for p in table_row[:needed].tolist()]
    return jitorch.cat(rows, 0)[:used] if rows else pages.new_zeros((0, *pages.shape[2:]))


def _window_mask(q_len, k_len, window_size, device):
    import jitorch

    left, right = window_size
    shift = k_len - q_len
    i = jitorch.arange(q_len, device=device).unsqueeze(1)
    j = jitorch.arange(k_len, device=device).unsqueeze(0)
    allowed = jitorch.ones(q_len, k_len, dtype=jitorch.bool, device=device)
    if left >= 0:
        allowed = allowed & (j >= i + shift - left)
    if right >= 0:
        allowed = allowed & (j <= i + shift + right)
    return allowed


def _attend(q, k, v, scale, window_size):
    """One sequence: q (Lq, H, D), k and v (Lk, H, D) -> output (Lq, H, D) and lse (Lq, H)."""
    import jitorch

    wide = jitorch.float64 if q.dtype == jitorch.float64 else jitorch.float32   # half inputs: float32 scores
    scores = jitorch.einsum("qhd,khd->hqk", q.to(wide), k.to(wide)) * scale
    allowed = _window_mask(q.shape[0], k.shape[0], window_size, q.device)
    masked = scores.masked_fill(~allowed, float("-inf"))
    lse = jitorch.logsumexp(masked, -1)                                      # (H, Lq); -inf where nothing is seen
    finite = jitorch.where(jitorch.isfinite(lse), lse, jitorch.zeros_like(lse))
    # exp of the MASKED scores: a masked score far above the row's lse would overflow to inf, and 0 * inf in a
    # where()'s gradient is NaN; fully masked rows give exp(-inf) = 0 (flash's output there)
    weights = jitorch.exp(masked - finite.unsqueeze(-1))
    out = jitorch.einsum("hqk,khd->qhd", weights.to(v.dtype), v)
    return out, lse.transpose(0, 1)


def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    """Attention over packed sequences: ``query`` (T_q, H_q, D), ``key``/``value`` (T_k, H_kv, D) or, with
    ``block_table``, a pool of pages (pages, page_size, H_kv, D). Returns (T_q, H_q, D), and the log-sum-exp
    (T_q, H_q) too when ``return_aux.lse``. ``max_q``/``max_k`` and ``num_splits`` only size GPU kernels.

    >>> import jitorch
    >>> q = jitorch.randn(4, 2, 8)
    >>> cu = jitorch.tensor([0, 4], dtype=jitorch.int32)
    >>> out, lse = varlen_attn(q, q, q, cu, cu, 4, 4, return_aux=AuxRequest(lse=True))
    >>> out.shape, lse.shape
    (jitorch.Size([4, 2, 8]), jitorch.Size([4, 2]))
    """
    import jitorch

    if query.dim() != 3:
        raise RuntimeError(f"varlen_attn: query must be (tokens, heads, head_dim), got shape {tuple(query.shape)}")
    paged = block_table is not None
    if key.dim() != (4 if paged else 3) or value.shape != key.shape:
        layout = "(pages, page_size, heads, head_dim)" if paged else "(tokens, heads, head_dim)"
        raise RuntimeError(f"varlen_attn: key and value must both be {layout}, got {tuple(key.shape)} and "
                           f"{tuple(value.shape)}")
    if paged and seqused_k is None:
        raise RuntimeError("varlen_attn: block_table requires seqused_k (the valid tokens of each sequence)")
    h_q, h_kv, dim = query.shape[1], key.shape[-2], query.shape[-1]
    if key.shape[-1] != dim:
        raise RuntimeError(f"varlen_attn: query and key head sizes differ: {dim} and {key.shape[-1]}")
    if h_q != h_kv and not (enable_gqa and h_kv and h_q % h_kv == 0):
        raise RuntimeError(f"varlen_attn: {h_q} query heads and {h_kv} key/value heads need enable_gqa=True and "
                           "a query head count divisible by the key/value head count")
    starts_q = _offsets(cu_seq_q, "cu_seq_q")
    count = len(starts_q)
    starts_k = None if cu_seq_k is None else _offsets(cu_seq_k, "cu_seq_k", count)
    if starts_k is None and not paged:
        raise RuntimeError("varlen_attn: cu_seq_k is required without a block_table")
    used = None if seqused_k is None else [int(n) for n in seqused_k.tolist()]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    group = h_q // h_kv
    outs, lses = [], []
    for n in range(count - 1):
        q = query[starts_q[n]:starts_q[n + 1]]
        if paged:
            k, v = _paged_keys(key, block_table[n], used[n]), _paged_keys(value, block_table[n], used[n])
        else:
            k, v = key[starts_k[n]:starts_k[n + 1]], value[starts_k[n]:starts_k[n + 1]]
            if used is not None:
                k, v = k[:used[n]], v[:used[n]]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out, lse = _attend(q, k, v, scale, tuple(window_size))
        outs.append(out)
        lses.append(lse)
    tail = query.shape[0] - (starts_q[-1] if starts_q else 0)
    outs.append(query.new_zeros((tail, h_q, value.shape[-1])))
    lses.append(query.new_full((tail, h_q), float("-inf"), dtype=jitorch.float32 if query.dtype in (
        jitorch.float16, jitorch.bfloat16) else query.dtype))
    out = jitorch.cat(outs, 0)
    if return_aux is not None and return_aux.lse:
        return out, jitorch.cat([lse.to(lses[-1].dtype) for lse in lses], 0)
    return out


def varlen_attn_out(out, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs):
    """``varlen_attn`` written into ``out`` (returned, with the log-sum-exp when asked).

    >>> import jitorch
    >>> q, cu = jitorch.ones(3, 1, 2), jitorch.tensor([0, 3], dtype=jitorch.int32)
    >>> o = jitorch.empty(3, 1, 2)
    >>> varlen_attn_out(o, q, q, q, cu, cu, 3, 3) is o
    True
    """
    result = varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs)
    values, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    out.copy_(values)
    return (out, *rest) if rest else out
