"""How recurrent modules read their weights, against torch: spectral_norm (a stateful parametrization) on an RNN
weight advances its power iteration as often as torch's forward reads the weight; AWD-LSTM's WeightDrop (a weight
re-assigned as a plain tensor before each forward); a new Parameter assigned; functional_call; casts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _init(lib, module, seed):
    rng = np.random.RandomState(seed)
    with lib.no_grad():
        for p in module.parameters():
            p.copy_(lib.from_numpy(rng.uniform(-0.4, 0.4, tuple(p.shape)).astype(np.float32)))
    return module


def _x(lib, *shape, seed=0):
    return lib.from_numpy(np.random.RandomState(seed).standard_normal(shape).astype(np.float32))


def _spectral_rnn(lib, kind, names, eval_after):
    m = _init(lib, getattr(lib.nn, kind)(3, 4, num_layers=2), 1)
    F = lib.nn.functional
    for i, name in enumerate(names):
        lib.nn.utils.parametrizations.spectral_norm(m, name)
        sn = getattr(m.parametrizations, name)[0]
        with lib.no_grad():
            sn._u.copy_(F.normalize(_x(lib, sn._u.shape[0], seed=10 + i), dim=0))
            sn._v.copy_(F.normalize(_x(lib, sn._v.shape[0], seed=20 + i), dim=0))
    outs = []
    x = _x(lib, 5, 2, 3)
    for _ in range(3):
        out = m(x)[0]
        out.pow(2).sum().backward()
        outs.append(out.detach().numpy())
    if eval_after:
        m.eval()
        outs.append(m(x)[0].detach().numpy())
    for name in names:
        sn = getattr(m.parametrizations, name)[0]
        outs += [sn._u.numpy(), sn._v.numpy(), getattr(m.parametrizations, name).original.grad.numpy()]
    return outs


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("names", [("weight_hh_l0",), ("weight_ih_l1", "weight_hh_l0"), ("weight_ih_l0",)])
def test_spectral_norm_on_rnn_weights_matches_torch(kind, names):
    got = _spectral_rnn(jitorch, kind, names, eval_after=True)
    want = _spectral_rnn(torch, kind, names, eval_after=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


def _weight_drop(lib):
    """AWD-LSTM's WeightDrop (a deterministic scale standing in for the dropout mask)."""
    lstm = _init(lib, lib.nn.LSTM(3, 4), 2)
    raw = lstm.weight_hh_l0
    del lstm._parameters["weight_hh_l0"]
    lstm.register_parameter("weight_hh_l0_raw", lib.nn.Parameter(raw.data))
    outs = []
    x = _x(lib, 6, 2, 3, seed=3)
    for scale in (0.5, 0.25):
        lstm.weight_hh_l0 = lstm.weight_hh_l0_raw * scale  # a plain tensor, set before each forward
        out, (h, c) = lstm(x)
        (out.sum() + c.sum()).backward()
        outs += [out.detach().numpy(), lstm.weight_hh_l0_raw.grad.numpy().copy()]
    return outs


def test_weight_drop_reassignment_matches_torch():
    for g, w in zip(_weight_drop(jitorch), _weight_drop(torch)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _swaps(lib):
    gru = _init(lib, lib.nn.GRU(3, 4, batch_first=True), 4)
    x = _x(lib, 2, 5, 3, seed=5)
    outs = [gru(x)[0]]
    gru.weight_ih_l0 = lib.nn.Parameter(_x(lib, 12, 3, seed=6))
    outs.append(gru(x)[0])
    params = {k: v * 0.5 for k, v in gru.named_parameters()}
    outs.append(lib.func.functional_call(gru, params, (x,))[0])
    outs.append(gru(x)[0])  # the module's own weights again
    gru = gru.double()
    outs.append(gru(x.double())[0])
    assert [tuple(w.shape) for w in gru._flat_weights] == [(12, 3), (12, 4), (12,), (12,)]
    assert all(w.dtype == lib.float64 for w in gru._flat_weights)
    return [o.detach().numpy() for o in outs]


def test_assigned_parameters_functional_call_and_casts_match_torch():
    got, want = _swaps(jitorch), _swaps(torch)
    assert not np.allclose(got[0], got[1]) and not np.allclose(got[1], got[2])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_pickled_rnn_keeps_working(tmp_path):
    lstm = _init(jitorch, jitorch.nn.LSTM(3, 4), 7)
    path = tmp_path / "lstm.pt"
    jitorch.save(lstm, path)
    loaded = jitorch.load(path, weights_only=False)
    x = _x(jitorch, 4, 1, 3)
    np.testing.assert_array_equal(loaded(x)[0].detach().numpy(), lstm(x)[0].detach().numpy())
    assert all(a is b for a, b in zip(loaded._flat_weights, loaded.parameters()))
