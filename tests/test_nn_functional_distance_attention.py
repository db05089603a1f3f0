"""``nn.functional`` similarities and distances, scaled dot-product attention and ``multi_head_attention_forward``,
checked against PyTorch 2.13.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import check_error, check_op, gradcheck_op

import jitorch
import jitorch.nn.functional as F

from nn_functional_helpers import F32


# -- similarities and distances -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes,dim", [(((3, 4), (3, 4)), 1), (((3, 4), (4,)), -1), (((2, 3, 4), (2, 1, 4)), 2),
                                        (((5,), (5,)), 0)])
def test_cosine_similarity_matches_torch(shapes, dim, rng):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    a.reshape(-1)[:4] = 1e-10  # a nearly zero vector: its norm is floored at eps (value only, as PyTorch)
    check_op(lambda a, b: F.cosine_similarity(a, b, dim), lambda a, b: TF.cosine_similarity(a, b, dim), [a, b],
             atol=1e-5, rtol=1e-4)
    gradcheck_op(lambda a, b: F.cosine_similarity(a, b, dim), [rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (4,))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance_matches_torch(p, shapes, keepdim, rng):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    check_op(lambda a, b: F.pairwise_distance(a, b, p, keepdim=keepdim),
             lambda a, b: TF.pairwise_distance(a, b, p, keepdim=keepdim), [a, b], **F32)
    gradcheck_op(lambda a, b: F.pairwise_distance(a, b, p), [rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("p", [2.0, 1.0])
def test_pdist_matches_torch(p, rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    check_op(lambda x: F.pdist(x, p), lambda x: TF.pdist(x, p), [x], **F32)


# -- attention ------------------------------------------------------------------------------------------------------
def _qkv(rng, lead=(2, 3), length=4, source=5, e=6, ev=7):
    return [rng.standard_normal(lead + s).astype(np.float32) for s in ((length, e), (source, e), (source, ev))]


@pytest.mark.parametrize("kwargs", [{}, {"scale": 0.3}, {"is_causal": True}])
@pytest.mark.parametrize("lead", [(2, 3), (3,), ()])
def test_sdpa_matches_torch(kwargs, lead, rng):
    qkv = _qkv(rng, lead)
    check_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kwargs), qkv, **F32)


@pytest.mark.parametrize("kind", ["bool", "float", "bool_broadcast"])
def test_sdpa_masks_match_torch(kind, rng):
    q, k, v = _qkv(rng)
    if kind == "float":
        mask = rng.standard_normal((4, 5)).astype(np.float32)
        mask[1] = -np.inf  # a query that may attend to nothing: zeros
    else:
        mask = rng.random((2, 1, 4, 5) if kind == "bool_broadcast" else (4, 5)) < 0.6
        mask[..., 2, :] = False
    check_op(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m), [q, k, v, mask], **F32)


def test_sdpa_gqa_and_gradcheck(rng):
    q = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 6, 5)).astype(np.float32) for _ in range(2))
    check_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, enable_gqa=True), [q, k, v], **F32)
    mask = jitorch.tensor(rng.random((3, 6)) < 0.7)
    gradcheck_op(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 [a[:1].astype(np.float64) for a in (q[:, :2], k, v)])


def test_sdpa_dropout_drops_attention_weights(rng):
    q, k, v = (jitorch.tensor(a) for a in _qkv(rng))
    plain = F.scaled_dot_product_attention(q, k, v)
    assert jitorch.allclose(F.scaled_dot_product_attention(q, k, v, dropout_p=0.0), plain)
    assert not jitorch.allclose(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5), plain)


def test_sdpa_errors_match_torch(rng):
    q, k, v = _qkv(rng)
    check_error(F.scaled_dot_product_attention, TF.scaled_dot_product_attention, [q.astype(np.float64), k, v],
                match="same dtype")
    mask = np.ones((4, 5), bool)
    check_error(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, is_causal=True),
                lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m, is_causal=True), [q, k, v, mask],
                match="is_causal")


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", ["none", "key_padding", "attn_bool", "attn_float", "causal"])
def test_multi_head_attention_forward_matches_torch(need_weights, masks, rng):
    length, batch, embed, heads = 4, 2, 6, 3
    x = rng.standard_normal((length, batch, embed)).astype(np.float32)
    w_in = rng.standard_normal((3 * embed, embed)).astype(np.float32) * 0.3
    b_in = rng.standard_normal(3 * embed).astype(np.float32)
    w_out = rng.standard_normal((embed, embed)).astype(np.float32) * 0.3
    b_out = rng.standard_normal(embed).astype(np.float32)
    kw = {}
    if masks == "key_padding":
        kw["key_padding_mask"] = np.array([[False, False, True, False], [False, True, True, False]])
    elif masks == "attn_bool":
        kw["attn_mask"] = np.triu(np.ones((length, length), bool), 1)
    elif masks == "attn_float":
        kw["attn_mask"] = rng.standard_normal((length, length)).astype(np.float32)
    elif masks == "causal":
        kw["attn_mask"] = np.triu(np.ones((length, length), bool), 1)
        kw["is_causal"] = True

    def run(mha, lib):
        def fn(x, w_in, b_in, w_out, b_out):
            tensors = {k: (lib.tensor(v) if lib is jitorch else torch.from_numpy(v)) for k, v in kw.items()
                       if k != "is_causal"}
            return mha(x, x, x, embed, heads, w_in, b_in, None, None, False, 0.0, w_out, b_out,
                       need_weights=need_weights, is_causal=kw.get("is_causal", False), **tensors)
        return fn
    check_op(run(F.multi_head_attention_forward, jitorch), run(TF.multi_head_attention_forward, torch),
             [x, w_in, b_in, w_out, b_out], atol=1e-5, rtol=1e-4)
