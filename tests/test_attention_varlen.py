"""torch.nn.attention.varlen (packed variable-length attention). torch runs it only on CUDA, so the oracle is
torch's scaled_dot_product_attention per sequence with flash attention's window masks, on the CPU."""
import math

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, make_array
from jitorch.nn.attention.varlen import AuxRequest, varlen_attn, varlen_attn_out

LENS_Q, LENS_K = [3, 0, 5, 1], [4, 2, 5, 3]


def _cu(lib, lens):
    return lib.tensor(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))


def _torch_reference(q, k, v, window, group, lens_q=LENS_Q, lens_k=LENS_K):
    outs, lses = [], []
    cq, ck = np.concatenate([[0], np.cumsum(lens_q)]), np.concatenate([[0], np.cumsum(lens_k)])
    for n in range(len(lens_q)):
        qi, ki, vi = q[cq[n]:cq[n + 1]], k[ck[n]:ck[n + 1]], v[ck[n]:ck[n + 1]]
        ki, vi = ki.repeat_interleave(group, 1), vi.repeat_interleave(group, 1)
        lq, lk = qi.shape[0], ki.shape[0]
        i, j = torch.arange(lq)[:, None], torch.arange(lk)[None]
        allowed = torch.ones(lq, lk, dtype=torch.bool)
        if window[0] >= 0:
            allowed &= j >= i + lk - lq - window[0]
        if window[1] >= 0:
            allowed &= j <= i + lk - lq + window[1]
        out = torch.nn.functional.scaled_dot_product_attention(qi.transpose(0, 1), ki.transpose(0, 1),
                                                               vi.transpose(0, 1), attn_mask=allowed)
        scores = (qi.transpose(0, 1) @ ki.transpose(0, 1).transpose(-1, -2)) / math.sqrt(q.shape[-1])
        lses.append(torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), -1).transpose(0, 1))
        outs.append(out.transpose(0, 1))
    return torch.cat(outs), torch.cat(lses)


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (2, 0), (1, 1)])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_packed_attention_and_gradients_match_per_sequence_sdpa(window, heads):
    rng = np.random.default_rng(sum(window) + heads[0])
    h_q, h_kv = heads
    q = make_array((sum(LENS_Q), h_q, 8), "float32", rng)
    k, v = (make_array((sum(LENS_K), h_kv, 8), "float32", rng) for _ in range(2))

    def ours(q, k, v):
        return varlen_attn(q, k, v, _cu(jitorch, LENS_Q), _cu(jitorch, LENS_K), 5, 5, window_size=window,
                           enable_gqa=h_q != h_kv, return_aux=AuxRequest(lse=True))

    def theirs(q, k, v):
        return _torch_reference(q, k, v, window, h_q // h_kv)
    check_op(ours, theirs, [q, k, v], atol=1e-5, rtol=1e-5)


def test_seqused_k_paged_cache_out_variant_and_gradcheck():
    rng = np.random.default_rng(3)
    q = make_array((4, 2, 4), "float64", rng)
    k, v = (make_array((6, 2, 4), "float64", rng) for _ in range(2))
    cu_q, cu_k = _cu(jitorch, [1, 3]), _cu(jitorch, [3, 3])
    used = jitorch.tensor([2, 3], dtype=jitorch.int32)
    jq, jk, jv = (jitorch.tensor(a) for a in (q, k, v))
    trimmed = varlen_attn(jq, jk, jv, cu_q, cu_k, 3, 3, seqused_k=used)
    want = varlen_attn(jq, jitorch.cat([jk[:2], jk[3:]]), jitorch.cat([jv[:2], jv[3:]]), cu_q,
                       _cu(jitorch, [2, 3]), 3, 3)
    np.testing.assert_allclose(trimmed.numpy(), want.numpy(), rtol=1e-12)
    # the same keys as pages of 2 tokens: sequence 0 on pages [1, 0], sequence 1 on pages [2, 3]
    pool_k = jitorch.stack([jk[2:4], jk[0:2], jk[3:5], jk[5:6].expand(2, 2, 4)])
    pool_v = jitorch.stack([jv[2:4], jv[0:2], jv[3:5], jv[5:6].expand(2, 2, 4)])
    table = jitorch.tensor([[1, 0], [2, 3]], dtype=jitorch.int32)
    paged = varlen_attn(jq, pool_k, pool_v, cu_q, None, 3, 3, seqused_k=used, block_table=table)
    np.testing.assert_allclose(paged.numpy(), want.numpy(), rtol=1e-12)
    out = jitorch.empty(4, 2, 4, dtype=jitorch.float64)
    assert varlen_attn_out(out, jq, jk, jv, cu_q, cu_k, 3, 3) is out
    args = tuple(jitorch.tensor(a, requires_grad=True) for a in (q, k, v))
    assert jitorch.autograd.gradcheck(lambda a, b, c: varlen_attn(a, b, c, cu_q, cu_k, 3, 3, window_size=(-1, 0)),
                                      args)


def test_tokens_past_the_last_offset_are_zero_and_bad_inputs_are_refused():
    q = jitorch.ones(5, 1, 2)
    cu = jitorch.tensor([0, 3], dtype=jitorch.int32)
    out, lse = varlen_attn(q, q, q, cu, cu, 3, 3, return_aux=AuxRequest(lse=True))
    assert out[3:].abs().sum().item() == 0 and bool(jitorch.isinf(lse[3:]).all())
    with pytest.raises(RuntimeError, match="varlen_attn: cu_seq_q must be a 1-D int32 tensor"):
        varlen_attn(q, q, q, jitorch.tensor([0, 3]), cu, 3, 3)
    with pytest.raises(RuntimeError, match="varlen_attn: 2 query heads and 1 key/value heads need enable_gqa"):
        varlen_attn(jitorch.ones(3, 2, 2), q, q, cu, cu, 3, 3)
    with pytest.raises(RuntimeError, match="varlen_attn: block_table requires seqused_k"):
        varlen_attn(q, jitorch.ones(2, 2, 1, 2), jitorch.ones(2, 2, 1, 2), cu, None, 3, 3,
                    block_table=jitorch.tensor([[0, 1]], dtype=jitorch.int32))
    with pytest.raises(RuntimeError, match="varlen_attn: cu_seq_k has 3 offsets, cu_seq_q has 2"):
        varlen_attn(q, q, q, cu, jitorch.tensor([0, 1, 2], dtype=jitorch.int32), 3, 3)


def test_masked_scores_far_above_the_row_keep_gradients_finite_and_half_inputs_score_in_float32():
    q = jitorch.tensor([[[1.0]], [[1.0]]], requires_grad=True)
    k = jitorch.tensor([[[0.0]], [[100.0]]], requires_grad=True)
    v = jitorch.tensor([[[1.0]], [[2.0]]], requires_grad=True)
    cu = jitorch.tensor([0, 2], dtype=jitorch.int32)
    varlen_attn(q, k, v, cu, cu, 2, 2, window_size=(-1, 0), scale=1.0).sum().backward()
    for t in (q, k, v):
        assert bool(jitorch.isfinite(t.grad).all())
    rng = np.random.default_rng(4)
    a = make_array((6, 2, 16), "float32", rng)
    cu = _cu(jitorch, [6])
    half = varlen_attn(*(jitorch.tensor(a).bfloat16() for _ in range(3)), cu, cu, 6, 6)
    wide = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a).bfloat16().float().transpose(0, 1)
                                                              for _ in range(3))).transpose(0, 1)
    assert half.dtype == jitorch.bfloat16
    np.testing.assert_allclose(half.float().numpy(), wide.numpy(), rtol=1e-2, atol=1e-2)   # a bf16 step or two
