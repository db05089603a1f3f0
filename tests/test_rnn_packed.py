"""RNN/LSTM/GRU on ``PackedSequence`` input agree with PyTorch (same weights), gradients included."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.nn.utils import rnn as jrnn


def _pair(kind, **kw):
    torch.manual_seed(0)
    pt = getattr(torch.nn, kind)(3, 4, **kw)
    jt = getattr(jitorch.nn, kind)(3, 4, **kw)
    jt.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in pt.state_dict().items()})
    return pt, jt


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True, "batch_first": True}])
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("with_hx", [False, True])
def test_packed_matches_torch(kind, kw, enforce_sorted, with_hx):
    pt, jt = _pair(kind, **kw)
    lengths = [5, 3, 2] if enforce_sorted else [2, 5, 3]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 5, 3)).astype(np.float32)
    bf = kw.get("batch_first", False)
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h0 = rng.normal(size=(layers, 3, 4)).astype(np.float32)
    results = []
    for lib, rnn_mod, utils in ((torch, pt, torch.nn.utils.rnn), (jitorch, jt, jrnn)):
        xt = lib.tensor(x if bf else x.transpose(1, 0, 2).copy(), requires_grad=True)
        packed = utils.pack_padded_sequence(xt, lib.tensor(lengths), batch_first=bf, enforce_sorted=enforce_sorted)
        hx = None
        if with_hx:
            hx = lib.tensor(h0)
            hx = (hx, lib.tensor(h0) * 0.5) if kind == "LSTM" else hx
        out, hn = rnn_mod(packed, hx)
        assert isinstance(out, utils.PackedSequence)
        padded, lens = utils.pad_packed_sequence(out, batch_first=bf)
        h = hn[0] if kind == "LSTM" else hn
        (padded.sum() + (h * h).sum()).backward()
        results.append((padded.detach().numpy(), h.detach().numpy(), xt.grad.numpy(), out.batch_sizes.tolist()))
    for a, b in zip(*results):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)


def test_packed_wrong_hidden_size_raises():
    rnn = jitorch.nn.GRU(3, 4)
    packed = jrnn.pack_sequence([jitorch.randn(3, 3), jitorch.randn(2, 3)])
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        rnn(packed, jitorch.zeros(1, 3, 4))
