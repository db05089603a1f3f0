"""PyTorch's attention inference fast paths (eval, no grad, batch-first self-attention) against torch: masks read
as boolean (nonzero = blocked), fully masked query rows NaN, ``is_causal`` unread; and the ordinary path kept
wherever torch leaves the fast path (training, grad, float masks for MultiheadAttention, odd heads, hooks)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from nn_transformer_helpers import arr, pair


def _copy(jt, th):
    jt.load_state_dict({k: jitorch.from_numpy(v.detach().numpy().copy()) for k, v in th.state_dict().items()})


def _both(value):
    return jitorch.from_numpy(np.array(value)), torch.from_numpy(np.array(value))


def _check(got, want, atol=2e-5):
    got, want = got.detach().numpy(), want.detach().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got, nan=0.0), np.nan_to_num(want, nan=0.0), atol=atol, rtol=2e-5)


def _mha(heads=2, **kw):
    jt, th = pair(jitorch.nn.MultiheadAttention, torch.nn.MultiheadAttention, 8, heads, batch_first=True, **kw)
    _copy(jt, th)
    return jt, th


PADDING = [[False, False, True, False], [True, True, True, True], [False, True, True, True]]
ROW_MASK = np.zeros((4, 4), dtype=bool)
ROW_MASK[2] = True  # query 2 may see no key


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masks", ["padding", "attn", "both", "per_head"])
def test_mha_fully_masked_rows_as_torch(masks, need_weights, training):
    jt, th = _mha()
    jt.train(training), th.train(training)
    x = arr(3, 4, 8, seed=1)
    kpm = PADDING if masks in ("padding", "both") else None
    if masks == "per_head":
        am = np.zeros((3 * 2, 4, 4), dtype=bool)
        am[3, 1] = True  # batch 1, head 1, query 1
    else:
        am = ROW_MASK if masks in ("attn", "both") else None
    with torch.no_grad(), jitorch.no_grad():
        args = [None if m is None else _both(m) for m in (kpm, am)]
        xj, xt = jitorch.from_numpy(x), torch.from_numpy(x)
        oj, wj = jt(xj, xj, xj, key_padding_mask=args[0] and args[0][0], attn_mask=args[1] and args[1][0],
                    need_weights=need_weights)
        ot, wt = th(xt, xt, xt, key_padding_mask=args[0] and args[0][1], attn_mask=args[1] and args[1][1],
                    need_weights=need_weights)
    _check(oj, ot)
    assert (wj is None) == (wt is None)
    if wt is not None:
        _check(wj, wt)
    if not training:
        assert np.isnan(ot.numpy()).any()  # the case exercises the fast path's NaN rows


def test_mha_float_masks_and_grad_stay_on_the_ordinary_path():
    jt, th = _mha()
    jt.eval(), th.eval()
    x = arr(3, 4, 8, seed=2)
    float_kpm = np.where(np.array(PADDING), -np.inf, 0.0).astype(np.float32)
    xj, xt = jitorch.from_numpy(x), torch.from_numpy(x)
    with torch.no_grad(), jitorch.no_grad():
        _check(jt(xj, xj, xj, key_padding_mask=_both(float_kpm)[0], need_weights=False)[0],
               th(xt, xt, xt, key_padding_mask=_both(float_kpm)[1], need_weights=False)[0])
    # gradients enabled with trainable weights: no fast path (zeros, not NaN, for the padded batch element)
    oj = jt(xj, xj, xj, key_padding_mask=_both(PADDING)[0], need_weights=False)[0]
    ot = th(xt, xt, xt, key_padding_mask=_both(PADDING)[1], need_weights=False)[0]
    _check(oj, ot)
    assert not np.isnan(ot.detach().numpy()).any()


@pytest.mark.parametrize("blocker", ["odd_heads", "seq_first", "cross_attention", "fastpath_off"])
def test_mha_without_torch_fast_path_keeps_zero_rows(blocker):
    jt, th = _mha(heads=1) if blocker == "odd_heads" else _mha()
    if blocker == "seq_first":
        jt.batch_first = th.batch_first = False
    jt.eval(), th.eval()
    x, y = arr(3, 4, 8, seed=3), arr(3, 4, 8, seed=4)
    kpm = np.array(PADDING)
    if blocker == "seq_first":  # x reads as (L=3, N=4, E): the padding mask is (N=4, S=3)
        kpm = np.array([[False, False, True], [True, True, True], [False, True, True], [False, False, False]])
    was = torch.backends.mha.get_fastpath_enabled()
    try:
        if blocker == "fastpath_off":
            torch.backends.mha.set_fastpath_enabled(False)
            jitorch.backends.mha.set_fastpath_enabled(False)
        with torch.no_grad(), jitorch.no_grad():
            xj, xt = jitorch.from_numpy(x), torch.from_numpy(x)
            kj, kt = (jitorch.from_numpy(y), torch.from_numpy(y)) if blocker == "cross_attention" else (xj, xt)
            oj = jt(xj, kj, kj, key_padding_mask=_both(kpm)[0], need_weights=False)[0]
            ot = th(xt, kt, kt, key_padding_mask=_both(kpm)[1], need_weights=False)[0]
    finally:
        torch.backends.mha.set_fastpath_enabled(was)
        jitorch.backends.mha.set_fastpath_enabled(was)
    _check(oj, ot)
    assert not np.isnan(ot.numpy()).any()


def test_mha_fast_path_ignores_is_causal_like_torch():
    jt, th = _mha()
    jt.eval(), th.eval()
    x = arr(2, 4, 8, seed=5)
    xj, xt = jitorch.from_numpy(x), torch.from_numpy(x)
    with torch.no_grad(), jitorch.no_grad():
        _check(jt(xj, xj, xj, is_causal=True, need_weights=False)[0],
               th(xt, xt, xt, is_causal=True, need_weights=False)[0])
    jt.train(), th.train()
    for lib, m, t in ((jitorch, jt, xj), (torch, th, xt)):
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
            m(t, t, t, is_causal=True, need_weights=False)


def _layer(**kw):
    kw = dict(dim_feedforward=16, dropout=0.0, batch_first=True) | kw
    jt, th = pair(jitorch.nn.TransformerEncoderLayer, torch.nn.TransformerEncoderLayer, 8, 2, **kw)
    _copy(jt, th)
    return jt, th


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mask_kind", ["bool_padding", "float_padding", "additive_float", "bool_rows", "neg_1e9_rows"])
def test_encoder_layer_fast_path_masks_as_torch(mask_kind, norm_first):
    jt, th = _layer(norm_first=norm_first)
    x = arr(3, 4, 8, seed=6)
    rng = np.random.default_rng(7)
    kpm = src_mask = None
    if mask_kind == "bool_padding":
        kpm = np.array(PADDING)
    elif mask_kind == "float_padding":
        kpm = np.where(np.array(PADDING), -np.inf, 0.0).astype(np.float32)
    elif mask_kind == "additive_float":  # values lost on the fast path: nonzero entries block
        src_mask = rng.standard_normal((4, 4)).astype(np.float32)
        src_mask[np.arange(4), np.arange(4)] = 0.0
    elif mask_kind == "bool_rows":
        src_mask = ROW_MASK
    else:
        src_mask = np.where(ROW_MASK, -1e9, 0.0).astype(np.float32)
    for training in (False, True):
        jt.train(training), th.train(training)
        with torch.no_grad(), jitorch.no_grad():
            kw_j = {k: _both(v)[0] for k, v in (("src_key_padding_mask", kpm), ("src_mask", src_mask)) if v is not None}
            kw_t = {k: _both(v)[1] for k, v in (("src_key_padding_mask", kpm), ("src_mask", src_mask)) if v is not None}
            _check(jt(jitorch.from_numpy(x), **kw_j), th(torch.from_numpy(x), **kw_t))


def test_encoder_layer_fast_path_off_with_hooks_or_grad():
    jt, th = _layer()
    jt.eval(), th.eval()
    x = arr(3, 4, 8, seed=8)
    for m in (jt, th):
        m.register_forward_hook(lambda *args: None)
    with torch.no_grad(), jitorch.no_grad():
        oj = jt(jitorch.from_numpy(x), src_key_padding_mask=_both(PADDING)[0])
        ot = th(torch.from_numpy(x), src_key_padding_mask=_both(PADDING)[1])
    _check(oj, ot)
    assert not np.isnan(ot.numpy()).any()
    jt2, th2 = _layer()
    jt2.eval(), th2.eval()
    oj = jt2(jitorch.from_numpy(x), src_key_padding_mask=_both(PADDING)[0])  # grad enabled: ordinary path
    ot = th2(torch.from_numpy(x), src_key_padding_mask=_both(PADDING)[1])
    _check(oj, ot)
    assert not np.isnan(ot.detach().numpy()).any()


def test_encoder_stack_eval_without_nesting_as_torch():
    layer_j, layer_t = _layer()
    enc_j = jitorch.nn.TransformerEncoder(layer_j, 2, enable_nested_tensor=False).eval()
    enc_t = torch.nn.TransformerEncoder(layer_t, 2, enable_nested_tensor=False).eval()
    x = arr(3, 4, 8, seed=9)
    with torch.no_grad(), jitorch.no_grad():
        _check(enc_j(jitorch.from_numpy(x), src_key_padding_mask=_both(PADDING)[0]),
               enc_t(torch.from_numpy(x), src_key_padding_mask=_both(PADDING)[1]))
        _check(enc_j(jitorch.from_numpy(x), mask=_both(ROW_MASK)[0]),
               enc_t(torch.from_numpy(x), mask=_both(ROW_MASK)[1]))
