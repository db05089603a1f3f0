"""MultiheadAttention and the Transformer layers against PyTorch with identical weights (eval mode, and train mode
with dropout=0): outputs, attention weights, input and parameter gradients, masks of every kind."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from jitorch.nn.modules import attention as jattn
from jitorch.nn.modules import transformer as jtr
from jitorch.ops.nn_linear import LINEAR
from nn_oracle import check_call, check_module
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

from nn_transformer_helpers import TOL, arr, causal_mask, padding_mask, pair


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
