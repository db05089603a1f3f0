"""Transformer encoder and decoder stacks and the full ``nn.Transformer``: masks, nested-tensor flags, a training step,
float64 gradcheck, padded inference and the functional projection helpers, checked against PyTorch 2.13.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from jitorch.nn.modules import attention as jattn
from jitorch.nn.modules import transformer as jtr
from nn_oracle import check_call, copy_weights, same_parameter_names
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

from nn_transformer_helpers import TOL, arr, causal_mask, padding_mask, pair


# -- stacks and the full model --------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("is_causal", [None, True])
def test_encoder_stack_with_float_causal_mask_and_padding(batch_first, is_causal):
    torch.manual_seed(0)
    th_layer = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=batch_first)
    jt_layer = jtr.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=batch_first)
    th = torch.nn.TransformerEncoder(th_layer, 3, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    from jitorch.nn.modules.normalization import LayerNorm

    jt = jtr.TransformerEncoder(jt_layer, 3, norm=LayerNorm(8), enable_nested_tensor=False)
    assert repr(jt) == repr(th)
    same_parameter_names(jt, th)
    pad = padding_mask(3, 5, seed=4)

    def call(m, x):
        lib = jitorch if isinstance(x, jitorch.Tensor) else torch
        mask = lib.tensor(causal_mask(5, np.float32))  # float with -inf entries
        return m(x, mask=mask, src_key_padding_mask=lib.tensor(pad), is_causal=is_causal)

    check_call(jt, th, call, [arr(3, 5, 8) if batch_first else arr(5, 3, 8)], **TOL)
    for mode in (True, False):
        check_call(jt, th, lambda m, x: m(x), [arr(5, 3, 8) if not batch_first else arr(3, 5, 8)], train=mode,
                   **TOL)


def test_encoder_nested_tensor_flags_and_causal_detection():
    with pytest.warns(UserWarning, match="enable_nested_tensor is True, but self.use_nested_tensor is False"):
        enc = jtr.TransformerEncoder(jtr.TransformerEncoderLayer(8, 2), 2)
    assert enc.use_nested_tensor is False and enc.enable_nested_tensor is True
    layer = jtr.TransformerEncoderLayer(8, 2, batch_first=True)
    assert jtr.TransformerEncoder(layer, 2).use_nested_tensor is True
    mask = jtr.Transformer.generate_square_subsequent_mask(4)
    assert mask.dtype == jitorch.float32 and np.isneginf(mask.numpy()[0, 1]) and mask.numpy()[1, 0] == 0
    assert jtr._detect_is_causal_mask(mask) is True and jtr._detect_is_causal_mask(mask * 0) is False


def test_decoder_stack_and_full_transformer():
    torch.manual_seed(0)
    th = torch.nn.Transformer(8, 2, 2, 2, 16, 0.0, batch_first=True)
    jt = jtr.Transformer(8, 2, 2, 2, 16, 0.0, batch_first=True)
    same_parameter_names(jt, th)
    tgt_mask = causal_mask(4, np.float32)
    src_pad = padding_mask(2, 6, seed=5)

    def call(m, src, tgt):
        lib = jitorch if isinstance(src, jitorch.Tensor) else torch
        return m(src, tgt, tgt_mask=lib.tensor(tgt_mask), src_key_padding_mask=lib.tensor(src_pad),
                 memory_key_padding_mask=lib.tensor(src_pad), tgt_is_causal=True)

    check_call(jt, th, call, [arr(2, 6, 8), arr(2, 4, 8, seed=1)], **TOL)
    check_call(jt, th, lambda m, s, t: m(s, t), [arr(2, 6, 8), arr(2, 4, 8, seed=1)], train=False, **TOL)
    for p in jt.parameters():
        if p.dim() > 1:
            fan_out, fan_in = p.shape[0], p.shape[1]
            assert np.abs(p.detach().numpy()).max() <= math.sqrt(6.0 / (fan_in + fan_out)) + 1e-7
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        jt(jitorch.randn(2, 6, 8), jitorch.randn(3, 4, 8))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        jt(jitorch.randn(2, 6, 8), jitorch.randn(2, 4, 6))


def test_decoder_stack_seq_first():
    torch.manual_seed(0)
    th = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, 0.0, norm_first=True), 2)
    jt = jtr.TransformerDecoder(jtr.TransformerDecoderLayer(8, 2, 16, 0.0, norm_first=True), 2)
    assert repr(jt) == repr(th)

    def call(m, tgt, memory):
        lib = jitorch if isinstance(tgt, jitorch.Tensor) else torch
        return m(tgt, memory, tgt_mask=lib.tensor(causal_mask(4)), memory_mask=lib.tensor(causal_mask(4)[:, :3]))

    check_call(jt, th, call, [arr(4, 2, 8), arr(3, 2, 8, seed=1)], **TOL)


def test_tiny_language_model_training_step_matches_torch():
    """A causal encoder language model trained for two SGD steps: identical losses and parameters."""
    from jitorch.nn.modules.linear import Linear
    torch.manual_seed(0)
    th_enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2,
                                         enable_nested_tensor=False)
    th_head = torch.nn.Linear(8, 5)
    jt_enc = jtr.TransformerEncoder(jtr.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2,
                                    enable_nested_tensor=False)
    jt_head = Linear(8, 5)
    copy_weights(jt_enc, th_enc)
    copy_weights(jt_head, th_head)
    x, target = arr(4, 6, 8), np.random.default_rng(1).integers(0, 5, (4, 6))
    losses = {}
    for lib, enc, head in ((torch, th_enc, th_head), (jitorch, jt_enc, jt_head)):
        opt = lib.optim.SGD(list(enc.parameters()) + list(head.parameters()), lr=0.1)
        mask = jtr.Transformer.generate_square_subsequent_mask(6) if lib is jitorch else \
            torch.nn.Transformer.generate_square_subsequent_mask(6)
        for _ in range(2):
            logits = head(enc(lib.tensor(x), mask=mask, is_causal=True))
            loss = -logits.log_softmax(-1).gather(-1, lib.tensor(target).unsqueeze(-1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.setdefault(lib.__name__, []).append(loss.item())
    np.testing.assert_allclose(losses["jitorch"], losses["torch"], atol=1e-5, rtol=1e-5)
    th_state = th_enc.state_dict()
    for k, v in jt_enc.state_dict().items():
        np.testing.assert_allclose(v.numpy(), th_state[k].numpy(), atol=1e-5, rtol=1e-5, err_msg=k)


def test_gradcheck_float64():
    mha = jattn.MultiheadAttention(4, 2, dtype=jitorch.float64, add_bias_kv=True)
    q = jitorch.tensor(arr(3, 2, 4).astype(np.float64), requires_grad=True)
    kv = jitorch.tensor(arr(5, 2, 4, seed=1).astype(np.float64), requires_grad=True)
    pad = jitorch.tensor(padding_mask(2, 5))
    assert jitorch.autograd.gradcheck(lambda q, kv: mha(q, kv, kv, key_padding_mask=pad)[0], (q, kv), eps=1e-6,
                                      atol=1e-5)
    layer = jtr.TransformerEncoderLayer(4, 2, 6, 0.0, activation="gelu", norm_first=True, dtype=jitorch.float64)
    mask = jtr.Transformer.generate_square_subsequent_mask(3, dtype=jitorch.float64)
    assert jitorch.autograd.gradcheck(lambda x: layer(x, src_mask=mask), (q,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("pad_kind", ["left_aligned", "holes", "none"])
@pytest.mark.parametrize("final_norm", [False, True])
def test_encoder_inference_zeroes_padded_positions_where_torch_nests(pad_kind, final_norm):
    from jitorch.nn.modules.normalization import LayerNorm

    torch.manual_seed(0)
    th = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2,
                                     norm=torch.nn.LayerNorm(8) if final_norm else None)
    jt = jtr.TransformerEncoder(jtr.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2,
                                norm=LayerNorm(8) if final_norm else None)
    copy_weights(jt, th)
    pad = np.zeros((3, 6), bool)
    if pad_kind == "left_aligned":
        pad[1, 4:] = pad[2, 2:] = True
    elif pad_kind == "holes":
        pad[1, 2] = pad[2, 4] = True
    x = arr(3, 6, 8)
    th.eval(), jt.eval()
    with torch.no_grad(), jitorch.no_grad():
        want = th(torch.tensor(x), src_key_padding_mask=torch.tensor(pad))
        got = jt(jitorch.tensor(x), src_key_padding_mask=jitorch.tensor(pad))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    if pad_kind == "left_aligned" and not final_norm:
        assert np.all(got.numpy()[1, 4:] == 0)


def test_functional_private_projection_helpers_match_torch():
    # copies of PyTorch's attention code import these from nn.functional
    import torch.nn.functional as TF

    import jitorch.nn.functional as F
    q, k, v = arr(3, 2, 4, seed=1), arr(5, 2, 6, seed=2), arr(5, 2, 7, seed=3)
    w, b = arr(12, 4, seed=4), arr(12, seed=5)
    ws, bs = (arr(4, 4, seed=6), arr(4, 6, seed=7), arr(4, 7, seed=8)), (arr(4, seed=9), None, arr(4, seed=10))
    for lib, fn in ((jitorch, F), (torch, TF)):
        t = lambda a: None if a is None else lib.tensor(a)  # noqa: E731
        x = t(q)
        fn._mha_shape_check(x, x, x, None, None, 2)
        outs = fn._in_projection_packed(x, x, x, t(w), t(b)) + fn._in_projection_packed(x, t(q) * 2, t(q) * 3, t(w))
        outs += fn._in_projection(t(q), t(k), t(v), *map(t, ws), *map(t, bs))
        if lib is jitorch:
            mine = [o.numpy() for o in outs]
    for a, b_ in zip(mine, outs):
        np.testing.assert_allclose(a, b_.numpy(), atol=1e-6, rtol=1e-6)
    for fn in (F, TF):
        lib = jitorch if fn is F else torch
        with pytest.raises(AssertionError, match=r"expecting key weights shape of \(4, 6\)"):
            fn._in_projection(lib.ones(3, 4), lib.ones(3, 6), lib.ones(3, 6), lib.ones(4, 4), lib.ones(4, 4),
                              lib.ones(4, 6))


@pytest.mark.parametrize("mask", [None, "padding"])
def test_mha_empty_batch(mask):
    jt, th = pair(jattn.MultiheadAttention, torch.nn.MultiheadAttention, 4, 2, batch_first=True)
    kwargs = {} if mask is None else {"key_padding_mask": np.zeros((0, 3), bool)}
    check_call(jt, th, lambda m, x, **kw: m(x, x, x, **kw)[0], [np.zeros((0, 3, 4), np.float32)],
               kwargs=kwargs, **TOL)
    # PyTorch's need_weights=False path raises on the -1 of an empty reshape here; the output is just empty
    x = jitorch.zeros(0, 3, 4, requires_grad=True)
    for mask in (jitorch.zeros(0, 3, dtype=jitorch.bool), None):
        out = jt(x, x, x, need_weights=False, key_padding_mask=mask, attn_mask=None if mask is not None else
                 jitorch.zeros(0, 3, 3))[0]
        out.sum().backward()
        assert out.shape == x.grad.shape == (0, 3, 4)
