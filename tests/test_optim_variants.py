"""Adamax, NAdam and RAdam against torch.optim 2.13, step for step (parameters and every state entry), with the
helpers and tolerances of test_optim.py; float64 runs show the update rules are torch's, float32 runs its rounding."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from optim_helpers import STEPS, TOL, _case_id, _np, _pair, _params, _reload, _train, _train_case

import jitorch

CASES = [
    ("Adamax", dict()), ("Adamax", dict(lr=0.01, weight_decay=0.1)), ("Adamax", dict(lr=0.05, maximize=True)),
    ("Adamax", dict(lr=0.1, betas=(0.5, 0.9), eps=1e-6)),
    ("NAdam", dict()), ("NAdam", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("NAdam", dict(lr=0.05, momentum_decay=0.01, maximize=True)), ("NAdam", dict(lr=0.1, betas=(0.5, 0.9))),
    ("RAdam", dict()), ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)), ("RAdam", dict(lr=0.05, maximize=True)),
    ("RAdam", dict(lr=0.1, betas=(0.5, 0.9), eps=1e-6)),  # rho_t > 5 from the 6th step: both branches run
]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_updates_match_torch_step_for_step(case, dtype):
    _train_case(*case, dtype)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam"])
def test_training_a_model_matches_torch(name):
    rng = np.random.default_rng(3)
    w0, x = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    trajectories = []
    for lib in (jitorch, torch):
        w = lib.tensor(w0.copy(), requires_grad=True)
        opt = getattr(lib.optim, name)([w], lr=0.05, weight_decay=0.01)
        for _ in range(STEPS):
            opt.zero_grad()
            ((lib.tensor(x) @ w).tanh() ** 2).sum().backward()
            opt.step()
        trajectories.append(_np(w))
    np.testing.assert_allclose(trajectories[0], trajectories[1], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam"])
def test_state_dict_round_trip_and_tensor_lr(name):
    rng = np.random.default_rng(8)
    jps, tps = _params(rng)
    jopt, topt = getattr(jitorch.optim, name)(jps, lr=jitorch.tensor(0.02)), getattr(torch.optim, name)(
        tps, lr=torch.tensor(0.02))
    _train(jopt, topt, jps, tps, rng, STEPS // 2, TOL[np.float32])
    jopt2, topt2, jps2, tps2, jsd, tsd = _reload(jopt, topt, jps, tps, lambda j, t: _pair(name, j, t, lr=0.5),
                                                 TOL[np.float32])
    assert [list(s) for s in jsd["state"].values()] == [list(s) for s in tsd["state"].values()]  # key order too
    _train(jopt2, topt2, jps2, tps2, rng, STEPS // 2, TOL[np.float32])


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam"])
def test_complex_parameters_update_as_real_pairs(name):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(np.complex64)
    jp, tp = jitorch.tensor(a.copy(), requires_grad=True), torch.tensor(a.copy(), requires_grad=True)
    jopt, topt = _pair(name, [jp], [tp], lr=0.01)
    for _ in range(STEPS):
        g = (rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape)).astype(np.complex64)
        jp.grad, tp.grad = jitorch.tensor(g.copy()), torch.tensor(g.copy())
        jopt.step()
        topt.step()
    np.testing.assert_allclose(_np(jp), _np(tp), **TOL[np.float32])


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam"])
def test_differentiable_update_is_recorded_by_autograd(name):
    grads = []
    for lib in (jitorch, torch):
        w = lib.tensor([1.0, -2.0, 0.5], requires_grad=True)
        p = w * 1.5
        opt = getattr(lib.optim, name)([p], lr=0.1, weight_decay=0.1, differentiable=True, betas=(0.5, 0.9))
        for k in range(7 if name == "RAdam" else 1):  # RAdam's rectified branch starts at the 6th step
            p.grad = w * (k + 2.0) - 0.25
            opt.step()
        (p * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append(_np(w.grad))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(), dict(weight_decay=0.1, decoupled_weight_decay=True)])
def test_differentiable_nadam_graph_spans_several_steps_like_torch(kwargs):
    # The update saved the exp_avg state for backward, which the next step's lerp_ changed in place: backward
    # through more than one step raised where torch's (scaling exp_avg out of place first) differentiates.
    results = []
    for lib in (jitorch, torch):
        w = lib.tensor([1.0, -2.0, 0.5], requires_grad=True)
        p = w * 1.5
        opt = lib.optim.NAdam([p], lr=0.1, differentiable=True, **kwargs)
        for k in range(3):
            p.grad = w * (k + 2.0) - 0.25
            opt.step()
        (p * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        results.append((_np(p), _np(w.grad)))
    for j, t in zip(*results):
        np.testing.assert_allclose(j, t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [("Adamax", dict(lr=-1.0)), ("NAdam", dict(eps=-1.0)),
                                  ("RAdam", dict(betas=(1.0, 0.9))), ("NAdam", dict(momentum_decay=-1.0)),
                                  ("RAdam", dict(weight_decay=-0.1)), ("Adamax", dict(betas=(0.9, 1.5)))],
                         ids=_case_id)
def test_invalid_hyperparameters_raise_torchs_errors(case):
    name, kwargs = case
    with pytest.raises(ValueError) as terr:
        getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError) as jerr:
        getattr(jitorch.optim, name)([jitorch.zeros(1, requires_grad=True)], **kwargs)
    assert str(jerr.value) == str(terr.value)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
                                  "LBFGS"])
def test_saved_param_groups_list_options_in_torchs_order(name):
    # state_dict()["param_groups"] is what checkpoints store and what users print and diff against torch's
    groups = []
    for lib in (jitorch, torch):
        opt = getattr(lib.optim, name)([lib.zeros(2, requires_grad=True)], lr=0.1)
        groups.append(list(opt.state_dict()["param_groups"][0].items()))
    assert groups[0] == groups[1]
