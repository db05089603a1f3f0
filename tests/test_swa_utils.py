"""jitorch.optim.swa_utils against torch.optim.swa_utils: averaged weights, SWALR's learning rates, update_bn."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch


def _model(m, seed=0):
    rng = np.random.default_rng(seed)
    net = m.nn.Sequential(m.nn.Linear(3, 4), m.nn.BatchNorm1d(4), m.nn.ReLU(), m.nn.Linear(4, 2))
    net.load_state_dict({k: m.tensor(rng.standard_normal(tuple(v.shape)).astype(np.float32))
                         if v.is_floating_point() else v for k, v in net.state_dict().items()})
    return net


def _state(net):
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def _averaging(m, which):
    su = m.optim.swa_utils
    kwargs = {"swa": {}, "ema_multi": {"multi_avg_fn": su.get_ema_multi_avg_fn(0.9)},
              "ema": {"avg_fn": su.get_ema_avg_fn(0.8)}, "swa_multi": {"multi_avg_fn": su.get_swa_multi_avg_fn()},
              "swa_fn": {"avg_fn": su.get_swa_avg_fn()}, "buffers": {"use_buffers": True}}[which]
    net = _model(m)
    avg = su.AveragedModel(net, **kwargs)
    x = m.tensor(np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32))
    opt = m.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
        avg.update_parameters(net)
    return _state(avg), avg(x).detach().numpy()


@pytest.mark.parametrize("which", ["swa", "ema_multi", "ema", "swa_multi", "swa_fn", "buffers"])
def test_averaged_model_matches_torch(which):
    (mine, mine_out), (theirs, theirs_out) = _averaging(jitorch, which), _averaging(torch, which)
    assert list(mine) == list(theirs)  # 'n_averaged' and 'module.*' keys, in torch's order
    for k in theirs:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(mine_out, theirs_out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(swa_lr=0.05), dict(swa_lr=0.05, anneal_epochs=3, anneal_strategy="linear"),
                                    dict(swa_lr=[0.05, 0.2], anneal_epochs=0), dict(swa_lr=0.01, anneal_epochs=4)])
def test_swalr_learning_rates_match_torch(kwargs):
    def lrs(m):
        groups = [{"params": [m.zeros(1, requires_grad=True)]}, {"params": [m.zeros(1, requires_grad=True)],
                                                                  "lr": 0.3}]
        opt = m.optim.SGD(groups, lr=0.5)
        sched = m.optim.swa_utils.SWALR(opt, **kwargs)
        out = []
        for _ in range(8):
            opt.step()
            sched.step()
            out.append(sched.get_last_lr())
        return out, {k: v for k, v in sched.state_dict().items() if k != "_last_lr"}

    (mine, mine_sd), (theirs, theirs_sd) = lrs(jitorch), lrs(torch)
    np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    assert sorted(mine_sd) == sorted(theirs_sd)


def test_swalr_rejects_bad_arguments_like_torch():
    for kwargs in (dict(anneal_strategy="exp"), dict(anneal_epochs=-1)):
        msgs = []
        for m in (jitorch, torch):
            opt = m.optim.SGD([m.zeros(1, requires_grad=True)], lr=0.1)
            with pytest.raises(ValueError) as e:
                m.optim.swa_utils.SWALR(opt, swa_lr=0.1, **kwargs)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1]


def test_update_bn_matches_torch():
    data = np.random.default_rng(2).standard_normal((6, 5, 3)).astype(np.float32) * 3 + 1
    states = []
    for m in (jitorch, torch):
        net = _model(m)
        net.eval()
        loader = [(m.tensor(batch), 0) for batch in data]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.optim.swa_utils.update_bn(loader, net)
        assert not net.training and net[1].momentum == 0.1
        states.append(_state(net))
    for k in states[1]:
        np.testing.assert_allclose(states[0][k], states[1][k], rtol=1e-5, atol=1e-6, err_msg=k)
