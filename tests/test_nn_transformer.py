"""MultiheadAttention and the Transformer layers against PyTorch with identical weights (eval mode, and train mode
with dropout=0): outputs, attention weights, input and parameter gradients, masks of every kind."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from helpers import make_array
from jitorch.nn.modules import attention as jattn
from jitorch.nn.modules import transformer as jtr
from jitorch.ops.nn_linear import LINEAR
from nn_oracle import check_call, check_module, copy_weights, same_parameter_names
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

TOL = dict(atol=2e-5, rtol=2e-5)


def arr(*shape, seed=0):
    return make_array(shape, "float32", np.random.default_rng(seed), low=-1.0, high=1.0)


def pair(jt_cls, th_cls, *args, **kwargs):
    torch.manual_seed(0)
    th = th_cls(*args, **kwargs)
    jt = jt_cls(*args, **kwargs)
    assert repr(jt) == repr(th)
    same_parameter_names(jt, th)
    return jt, th


def padding_mask(batch, length, seed=0, dtype=bool):
    """True (or -inf) at padded positions; every row keeps at least its first position."""
    mask = np.random.default_rng(seed).random((batch, length)) < 0.3
    mask[:, 0] = False
    return mask if dtype is bool else np.where(mask, -np.inf, 0.0).astype(np.float32)


def causal_mask(length, dtype=bool):
    mask = np.triu(np.ones((length, length), dtype=bool), 1)
    return mask if dtype is bool else np.where(mask, -np.inf, 0.0).astype(np.float32)


# -- MultiheadAttention ---------------------------------------------------------------------------------------------
def _self_attention(mod, x, **kw):
    return mod(x, x, x, **kw)


def _cross_attention(mod, q, k, v, **kw):
    return mod(q, k, v, **kw)


@pytest.mark.parametrize("config", [
    {}, {"batch_first": True}, {"bias": False}, {"add_bias_kv": True}, {"add_zero_attn": True},
    {"add_bias_kv": True, "add_zero_attn": True, "batch_first": True}, {"dropout": 0.2},
], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("call", [{}, {"need_weights": False}, {"average_attn_weights": False}])
def test_mha_self_attention(config, call):
    train = not config.get("dropout")  # random attention dropout cannot match torch; eval mode turns it off
    jt, th = pair(jattn.MultiheadAttention, torch.nn.MultiheadAttention, 8, 2, **config)
    x = arr(3, 4, 8)
    check_call(jt, th, lambda m, x: _self_attention(m, x, **call), [x], train=train, **TOL)


@pytest.mark.parametrize("kdim,vdim", [(None, None), (6, 5)])
@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_cross_attention_and_separate_projections(kdim, vdim, batch_first):
    jt, th = pair(jattn.MultiheadAttention, torch.nn.MultiheadAttention, 8, 4, kdim=kdim, vdim=vdim,
                  batch_first=batch_first)
    if kdim is not None:
        assert jt.in_proj_weight is None and jt.q_proj_weight.shape == (8, 8) and jt.k_proj_weight.shape == (8, 6)
    q = arr(2, 5, 8) if batch_first else arr(5, 2, 8)
    k = arr(2, 7, kdim or 8, seed=1) if batch_first else arr(7, 2, kdim or 8, seed=1)
    v = arr(2, 7, vdim or 8, seed=2) if batch_first else arr(7, 2, vdim or 8, seed=2)
    check_call(jt, th, _cross_attention, [q, k, v], **TOL)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("attn_shape", ["none", "2d", "3d"])
@pytest.mark.parametrize("with_padding", [False, True])
def test_mha_masks(mask_kind, attn_shape, with_padding):
    if attn_shape == "none" and not with_padding:
        return
    jt, th = pair(jattn.MultiheadAttention, torch.nn.MultiheadAttention, 8, 2, batch_first=True)
    dtype = bool if mask_kind == "bool" else np.float32
    kw = {}
    if with_padding:
        kw["key_padding_mask"] = padding_mask(3, 5, dtype=dtype)
    if attn_shape == "2d":
        kw["attn_mask"] = causal_mask(5, dtype=dtype)
    elif attn_shape == "3d":
        kw["attn_mask"] = np.broadcast_to(causal_mask(5, dtype=dtype), (6, 5, 5)).copy()
    masks = {k: v for k, v in kw.items()}

    def call(m, x):
        lib = jitorch if isinstance(x, jitorch.Tensor) else torch
        return m(x, x, x, **{k: lib.tensor(v) for k, v in masks.items()})

    check_call(jt, th, call, [arr(3, 5, 8)], **TOL)


def test_mha_unbatched_and_is_causal():
    jt, th = pair(jattn.MultiheadAttention, torch.nn.MultiheadAttention, 8, 2)
    check_call(jt, th, _self_attention, [arr(5, 8)], **TOL)
    mask = causal_mask(5, dtype=np.float32)

    def call(m, x):
        lib = jitorch if isinstance(x, jitorch.Tensor) else torch
        return m(x, x, x, attn_mask=lib.tensor(mask), is_causal=True, need_weights=False)

    check_call(jt, th, call, [arr(5, 2, 8)], **TOL)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        x = jitorch.randn(5, 2, 8)
        jt(x, x, x, is_causal=True)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal", "float2d", "bool2d", "float3d"])
def test_mha_packed_self_attention_path(batch_first, mask):
    """need_weights=False self-attention: strided heads into the attention row, no activation copies."""
    jt, th = pair(jattn.MultiheadAttention, torch.nn.MultiheadAttention, 8, 2, batch_first=batch_first)
    masks = {"causal": causal_mask(5, dtype=np.float32), "float2d": causal_mask(5, dtype=np.float32),
             "bool2d": causal_mask(5), "float3d": np.broadcast_to(causal_mask(5, dtype=np.float32), (6, 5, 5)).copy()}

    def call(m, x):
        lib = jitorch if isinstance(x, jitorch.Tensor) else torch
        kw = {} if mask == "none" else {"attn_mask": lib.tensor(masks[mask]), "is_causal": mask == "causal"}
        return m(x, x, x, need_weights=False, **kw)[0]

    x = arr(3, 5, 8) if batch_first else arr(5, 3, 8)
    check_call(jt, th, call, [x], **TOL)
    out = call(jt, jitorch.tensor(x, requires_grad=True))
    assert out.is_contiguous()
    names, stack = [], [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in names:
            names.append(node)
            stack.extend(fn for fn, _ in node.next_functions)
    linear_rows = sum(isinstance(n, LINEAR.node_cls) for n in names)  # shown under at::linear's names (addmm...)
    names = [type(n).__name__ for n in names]
    # One attention node, the q/k/v and output projections, and views only: no copy of the activations either way.
    assert names.count("ScaledDotProductFlashAttentionForCpuBackward0") == 1 and linear_rows == 4
    assert not {"CloneBackward0", "ContiguousBackward0", "MatmulBackward0", "SoftmaxBackward0"} & set(names)


def test_mha_packed_path_dropout_equals_the_general_path():
    """With dropout, the packed path draws the same mask as the general one (query not the key object)."""
    mha = jattn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True)
    x = arr(3, 5, 8)
    grad = jitorch.tensor(arr(3, 5, 8, seed=4))
    results = []
    for packed in (True, False):
        xj = jitorch.tensor(x, requires_grad=True)
        jitorch.manual_seed(5)
        out = mha(xj, xj, xj, need_weights=False)[0] if packed else mha(xj * 1.0, xj, xj, need_weights=False)[0]
        out.backward(grad)
        results.append([out.detach().numpy(), xj.grad.numpy(), mha.in_proj_weight.grad.numpy().copy()])
        mha.zero_grad()
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_mha_init_and_errors():
    mha = jattn.MultiheadAttention(16, 4, add_bias_kv=True)
    assert not mha.in_proj_bias.detach().numpy().any() and not mha.out_proj.bias.detach().numpy().any()
    bound = math.sqrt(6.0 / (16 + 48))  # xavier_uniform on (3E, E)
    assert np.abs(mha.in_proj_weight.detach().numpy()).max() <= bound
    assert mha.bias_k.shape == (1, 1, 16) and type(mha.out_proj).__name__ == "NonDynamicallyQuantizableLinear"
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        jattn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
        jattn.MultiheadAttention(0, 2)


# -- encoder / decoder layers ---------------------------------------------------------------------------------------
LAYER_CONFIGS = [
    {}, {"batch_first": True}, {"norm_first": True}, {"activation": "gelu", "batch_first": True},
    {"norm_first": True, "bias": False}, {"layer_norm_eps": 1e-3, "activation": "relu"},
]


def _ids(config):
    return "-".join(f"{k}={v}" for k, v in config.items()) or "default"


@pytest.mark.parametrize("config", LAYER_CONFIGS, ids=_ids)
@pytest.mark.parametrize("train", [True, False])
def test_encoder_layer_matches_torch(config, train):
    # Eval mode keeps dropout=0.1 (inactive); train mode uses dropout=0 so outputs are deterministic.
    jt, th = pair(jtr.TransformerEncoderLayer, torch.nn.TransformerEncoderLayer, 8, 2, 16,
                  0.0 if train else 0.1, **config)
    shape = (3, 5, 8) if config.get("batch_first") else (5, 3, 8)
    check_module(jt, th, [arr(*shape)], train=train, **TOL)
    pad = padding_mask(3, 5)

    def call(m, x):
        lib = jitorch if isinstance(x, jitorch.Tensor) else torch
        return m(x, src_mask=lib.tensor(causal_mask(5, np.float32)), src_key_padding_mask=lib.tensor(pad))

    check_call(jt, th, call, [arr(*shape)], train=train, **TOL)


def test_encoder_layer_callable_activation_and_unbatched():
    jt, th = pair(jtr.TransformerEncoderLayer, torch.nn.TransformerEncoderLayer, 8, 2, 16, 0.0)
    jt.activation, th.activation = (lambda x: x.tanh()), (lambda x: x.tanh())
    check_module(jt, th, [arr(5, 3, 8)], **TOL)
    check_module(jt, th, [arr(5, 8)], **TOL)
    assert jtr.TransformerEncoderLayer(8, 2, activation="gelu").activation_relu_or_gelu == 2
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        jtr.TransformerEncoderLayer(8, 2, activation="tanh")


@pytest.mark.parametrize("config", LAYER_CONFIGS, ids=_ids)
@pytest.mark.parametrize("train", [True, False])
def test_decoder_layer_matches_torch(config, train):
    jt, th = pair(jtr.TransformerDecoderLayer, torch.nn.TransformerDecoderLayer, 8, 2, 16,
                  0.0 if train else 0.1, **config)
    bf = config.get("batch_first", False)
    tgt, memory = (arr(3, 4, 8), arr(3, 6, 8, seed=1)) if bf else (arr(4, 3, 8), arr(6, 3, 8, seed=1))
    tgt_pad, mem_pad = padding_mask(3, 4, seed=2), padding_mask(3, 6, seed=3, dtype=np.float32)

    def call(m, tgt, memory):
        lib = jitorch if isinstance(tgt, jitorch.Tensor) else torch
        return m(tgt, memory, tgt_mask=lib.tensor(causal_mask(4)), tgt_key_padding_mask=lib.tensor(tgt_pad),
                 memory_key_padding_mask=lib.tensor(mem_pad))

    check_call(jt, th, call, [tgt, memory], train=train, **TOL)


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
