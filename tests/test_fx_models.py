"""jitorch.fx on whole models (the digits CNN, transformer blocks), checked against eager jitorch and against torch.fx.

Each model is written once against a namespace ``T`` (``jitorch`` or ``torch``) so the same code, with the same weights
copied through NumPy, runs in both libraries: the oracle for results, generated code, node names and ShapeProp.
"""
from __future__ import annotations

import math
import os
import pathlib

import numpy as np
import pytest
import torch
import torch.fx
from test_fx_helpers import assert_close, check_traced, digits_cnn
from torch.fx.passes.shape_prop import ShapeProp as TorchShapeProp

import jitorch
from jitorch import fx
from jitorch.fx.make_fx import Primitive
from jitorch.fx.passes import ShapeProp

GOLDEN = pathlib.Path(__file__).parent / "golden"


def attention_block(T):
    """A hand-written pre-norm transformer block: causal attention through ``scaled_dot_product_attention`` or through
    matmul + softmax (scaled by ``math.sqrt`` of a traced size: autowrapped), then a GELU MLP."""
    nn, F = T.nn, T.nn.functional

    class Block(nn.Module):
        def __init__(self, d_model=16, n_head=4, use_sdpa=True):
            super().__init__()
            self.n_head, self.use_sdpa = n_head, use_sdpa
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

        def attend(self, q, k, v):
            if self.use_sdpa:  # a Python attribute, not a traced value: fine to branch on
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            scores = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
            mask = T.ones_like(scores, dtype=T.bool).tril()
            return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for y in (q, k, v))
            y = self.attend(q, k, v).transpose(1, 2).contiguous().view(b, t, c)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))
    return Block


def encoder(T):
    """``nn.TransformerEncoderLayer`` used inside a model: a leaf module, as in torch.fx."""
    nn = T.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            return self.head(self.layer(x).mean(dim=1))
    return Encoder


def _pair(factory, *args, **kwargs):
    """The jitorch model and a torch twin holding the same weights (copied through NumPy); both in eval mode."""
    jitorch.manual_seed(0)
    jm = factory(jitorch)(*args, **kwargs).eval()
    tm = factory(torch)(*args, **kwargs).eval()
    tm.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in jm.state_dict().items()})
    return jm, tm


def _inputs(*shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jitorch.tensor(x), torch.tensor(x)


def assert_meta_matches_torch(gm, tgm, *inputs):
    """ShapeProp on our graph against torch.fx's ShapeProp on torch's graph of the same model, node for node by name:
    shape, dtype, stride and requires_grad of every tensor value."""
    ShapeProp(gm).propagate(*(x for x, _ in inputs))
    # torch's own kernel choice, CPU flash attention included: its output takes the query's layout, as jitorch's does.
    TorchShapeProp(tgm).propagate(*(t for _, t in inputs))
    theirs = {n.name: n.meta.get("tensor_meta") for n in tgm.graph.nodes}
    checked = 0
    for node in gm.graph.nodes:
        ours, expected = node.meta.get("tensor_meta"), theirs.get(node.name)
        if not hasattr(expected, "shape"):
            continue
        assert hasattr(ours, "shape"), node.format_node()
        assert tuple(ours.shape) == tuple(expected.shape), node.format_node()
        assert tuple(ours.stride) == tuple(expected.stride), (node.format_node(), ours.stride, expected.stride)
        assert str(ours.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], node.format_node()
        assert ours.requires_grad == expected.requires_grad, node.format_node()
        checked += 1
    assert checked >= 3
    return checked


def _check_make_fx(model, x, fresh):
    """make_fx records primitives only; the GraphModule and the Interpreter replay them on fresh inputs."""
    with jitorch.no_grad():
        gm = fx.make_fx(model)(x)
        gm.graph.lint()
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert calls and all(isinstance(n.target, Primitive) or n.args[0].op == "call_function" for n in calls)
        expected = model(fresh)
        assert_close(gm(fresh), expected, atol=1e-4)
        assert_close(fx.Interpreter(gm).run(fresh), expected, atol=1e-4)
    return {n.target.__name__ for n in calls if isinstance(n.target, Primitive)}


def _golden(name, text):
    path = GOLDEN / f"{name}.py.txt"
    if os.environ.get("JITORCH_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_digits_cnn_trace_code_shapes_and_make_fx():
    jm, tm = _pair(digits_cnn)
    x, tx = _inputs(4, 1, 8, 8)
    gm, tgm = check_traced(jm, x), torch.fx.symbolic_trace(tm)
    assert_close(gm(x), tm(tx).detach(), atol=1e-4)
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == [
        "features.0", "features.1", "features.2", "features.3", "features.4", "features.5",
        "classifier.0", "classifier.1", "classifier.2"]
    # The generated source is torch.fx's, letter for letter, and a golden snapshot.
    assert gm.code.strip() == tgm.code.strip()
    _golden("fx_digits_cnn", gm.code)
    compile(gm.code, "<golden>", "exec")
    assert assert_meta_matches_torch(gm, tgm, (x, tx)) == 11  # input, 9 layers, output
    names = _check_make_fx(jm, x, _inputs(4, 1, 8, 8, seed=1)[0])
    assert {"conv2d", "relu", "linear"} <= names or {"relu", "linear"} <= names


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_hand_written_transformer_block(use_sdpa):
    jm, tm = _pair(attention_block, use_sdpa=use_sdpa)
    x, tx = _inputs(2, 5, 16)
    gm, tgm = check_traced(jm, x), torch.fx.symbolic_trace(tm)
    assert_close(gm(x), tm(tx).detach(), atol=1e-4)
    ops = {(n.op, n.target if isinstance(n.target, str) else n.target.__name__) for n in gm.graph.nodes}
    if use_sdpa:
        assert ("call_function", "scaled_dot_product_attention") in ops
    else:
        # math.sqrt of a traced size stays a node (autowrap_modules=(math,)), as torch.fx records it
        assert {("call_function", "sqrt"), ("call_method", "softmax"), ("call_method", "masked_fill")} <= ops
    assert [n.name for n in gm.graph.nodes] == [n.name for n in tgm.graph.nodes]
    assert_meta_matches_torch(gm, tgm, (x, tx))
    if not use_sdpa:
        _golden("fx_attention_block", gm.code)
    names = _check_make_fx(jm, x, _inputs(2, 5, 16, seed=1)[0])
    assert {"matmul", "softmax"} <= names or "scaled_dot_product_attention" in names or {"bmm"} <= names


def test_transformer_encoder_layer_is_a_leaf_and_make_fx_sees_its_primitives():
    jm, tm = _pair(encoder)
    x, tx = _inputs(3, 6, 16)
    gm, tgm = check_traced(jm, x), torch.fx.symbolic_trace(tm)
    assert_close(gm(x), tm(tx).detach(), atol=1e-4)
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["layer", "head"]
    assert gm.code.strip() == tgm.code.strip()
    assert_meta_matches_torch(gm, tgm, (x, tx))
    names = _check_make_fx(jm.layer, x, _inputs(3, 6, 16, seed=1)[0])
    assert not any(n.startswith("TransformerEncoderLayer") for n in names)
    assert {"softmax", "native_layer_norm"} & names
