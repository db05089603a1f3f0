"""NAdam, Adamax, RAdam and ASGD through their fused kernels (`jitorch.optim._fused_variants`) against torch.optim 2.13
over many steps: option combinations the per-optimizer tests leave out, parameters large enough to be split over
threads, state dicts loaded mid-training, the unfused update taking over for a group the kernels cannot run (mixed
dtypes), and the version counters an in-place update bumps."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from optim_helpers import STEPS, TOL, _case_id, _pair, _params, _reload, _train, _train_case

import jitorch

CASES = [
    ("Adamax", dict(lr=0.05, betas=(0.4, 0.9), weight_decay=0.1, maximize=True)),
    ("NAdam", dict(lr=0.02, betas=(0.4, 0.95), weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("NAdam", dict(lr=0.02, weight_decay=0.05, momentum_decay=0.02, maximize=True)),
    ("RAdam", dict(lr=0.02, betas=(0.5, 0.9), weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.02, betas=(0.5, 0.9), weight_decay=0.1)),  # rectified from the 6th step, L2 decay
    ("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.6, t0=4, weight_decay=0.05, maximize=True)),  # averaging from step 5
    ("ASGD", dict(lr=0.03, lambd=0.0, t0=0)),
]
# Every state entry, the step counts and NAdam's mu_product / ASGD's eta and mu included, is compared by _train.


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_option_combinations_match_torch_step_for_step(case, dtype):
    _train_case(*case, dtype, seed=11)


@pytest.mark.parametrize("case", CASES[::2], ids=_case_id)
def test_large_parameters_split_over_threads_match_torch(case):
    _train_case(*case, seed=5, steps=8, shapes=((300, 250), (70001,), (5,)))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_state_dict_loaded_mid_training_continues_like_torch(case, dtype):
    name, kwargs = case
    rng = np.random.default_rng(8)
    jps, tps = _params(rng, dtype)
    jopt, topt = _pair(name, jps, tps, **kwargs)
    _train(jopt, topt, jps, tps, rng, 7, TOL[dtype])
    jopt2, topt2, jps2, tps2, _, _ = _reload(jopt, topt, jps, tps, lambda j, t: _pair(name, j, t, lr=0.5), TOL[dtype])
    _train(jopt2, topt2, jps2, tps2, rng, 9, TOL[dtype])


@pytest.mark.parametrize("case", CASES[::2], ids=_case_id)
def test_group_of_mixed_dtypes_takes_the_unfused_update_like_torch(case):
    name, kwargs = case
    rng = np.random.default_rng(2)
    j32, t32 = _params(rng, np.float32, shapes=((4, 3), (3,)))
    j64, t64 = _params(rng, np.float64, shapes=((2, 5), ()))
    jps, tps = j32 + j64, t32 + t64
    tol = TOL[np.float32]
    _train(*_pair(name, jps, tps, **kwargs), jps, tps, rng, STEPS, tol)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "ASGD"])
def test_update_in_place_invalidates_saved_parameters_like_torch(name):
    errors = []
    for lib in (jitorch, torch):
        w = lib.tensor([1.0, -2.0, 0.5], requires_grad=True)
        opt = getattr(lib.optim, name)([w], lr=0.1)
        loss = (w * w).sum()  # saves w for the backward
        w.grad = lib.tensor([0.5, 0.25, -1.0])
        version = w._version
        opt.step()
        assert w._version > version
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            loss.backward()
        errors.append(str(info.value))
    assert "version" in errors[0]


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "ASGD"])
def test_parameters_of_another_shape_in_a_loaded_state_are_refused(name):
    jp = jitorch.zeros(3, requires_grad=True)
    opt = getattr(jitorch.optim, name)([jp], lr=0.1)
    jp.grad = jitorch.ones(3)
    opt.step()
    sd = opt.state_dict()
    jq = jitorch.zeros(4, requires_grad=True)
    opt2 = getattr(jitorch.optim, name)([jq], lr=0.1)
    opt2.load_state_dict(sd)
    jq.grad = jitorch.ones(4)
    with pytest.raises(RuntimeError, match="shape"):
        opt2.step()
