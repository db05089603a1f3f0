"""Rprop, ASGD, Adafactor and SparseAdam against torch.optim 2.13, step for step (parameters and every state entry),
with the helpers and tolerances of test_optim.py; state-dict round trips; SparseAdam through a sparse embedding
(a sparse gradient in both: the touched rows update, the others keep their values)."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from optim_helpers import STEPS, TOL, _case_id, _np, _pair, _params, _reload, _train, _train_case

import jitorch

CASES = [
    ("Rprop", dict()), ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2))),
    ("Rprop", dict(lr=0.01, maximize=True)),
    ("ASGD", dict()), ("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.5, t0=5, weight_decay=0.1)),
    ("ASGD", dict(lr=0.02, t0=0, maximize=True)),
    ("Adafactor", dict()), ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-20, 1e-2), d=1.5)),
    ("Adafactor", dict(lr=0.01, weight_decay=0.1, maximize=True)),
]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_updates_match_torch_step_for_step(case, dtype):
    _train_case(*case, dtype)


@pytest.mark.parametrize("name", ["Rprop", "ASGD", "Adafactor"])
def test_state_dict_round_trip_continues_like_torch(name):
    rng = np.random.default_rng(8)
    jps, tps = _params(rng)
    kwargs = {"ASGD": dict(t0=3)}.get(name, {})
    jopt, topt = _pair(name, jps, tps, lr=0.02, **kwargs)
    _train(jopt, topt, jps, tps, rng, STEPS // 2, TOL[np.float32])
    jopt2, topt2, jps2, tps2, _, _ = _reload(jopt, topt, jps, tps, lambda j, t: _pair(name, j, t, lr=0.5),
                                             TOL[np.float32])
    _train(jopt2, topt2, jps2, tps2, rng, STEPS // 2, TOL[np.float32])


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_complex_parameters_update_as_real_pairs(name):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(np.complex64)
    jp, tp = jitorch.tensor(a.copy(), requires_grad=True), torch.tensor(a.copy(), requires_grad=True)
    _train(*_pair(name, [jp], [tp], lr=0.01), [jp], [tp], rng, STEPS, TOL[np.float32])


@pytest.mark.parametrize("kwargs", [dict(), dict(lr=0.05, betas=(0.5, 0.9), eps=1e-6, maximize=True)])
def test_sparse_adam_trains_a_sparse_embedding_like_torch(kwargs):
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((10, 3)).astype(np.float32)
    jemb = jitorch.nn.Embedding.from_pretrained(jitorch.tensor(w0.copy()), freeze=False, sparse=True)
    temb = torch.nn.Embedding.from_pretrained(torch.tensor(w0.copy()), freeze=False, sparse=True)
    jopt, topt = jitorch.optim.SparseAdam(jemb.parameters(), **kwargs), torch.optim.SparseAdam(temb.parameters(),
                                                                                              **kwargs)
    for step in range(8):
        idx = rng.integers(0, 6, (4,))  # rows 6..9 are never looked up: they and their moments must stay put
        g = rng.standard_normal((4, 3)).astype(np.float32)
        for emb, opt, lib in ((jemb, jopt, jitorch), (temb, topt, torch)):
            opt.zero_grad()
            emb(lib.tensor(idx)).backward(lib.tensor(g))
            opt.step()
        np.testing.assert_allclose(_np(jemb.weight), _np(temb.weight), err_msg=f"step {step}", **TOL[np.float32])
        jstate, tstate = jopt.state[jemb.weight], topt.state[temb.weight]
        assert jstate["step"] == tstate["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(_np(jstate[key]), _np(tstate[key]), **TOL[np.float32])
    np.testing.assert_array_equal(_np(jemb.weight)[6:], w0[6:])


@pytest.mark.parametrize("name,kwargs,error", [
    ("Rprop", dict(etas=(1.5, 1.2)), ValueError), ("Rprop", dict(lr=-1), ValueError),
    ("ASGD", dict(weight_decay=-1), ValueError), ("Adafactor", dict(beta2_decay=0.5), ValueError),
    ("Adafactor", dict(d=0.5), ValueError), ("Adafactor", dict(eps=(-1, 1e-3)), ValueError),
    ("SparseAdam", dict(lr=0.0), ValueError), ("SparseAdam", dict(betas=(1.0, 0.9)), ValueError),
])
def test_hyperparameter_checks_match_torch(name, kwargs, error):
    with pytest.raises(error):
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(error, match=str(next(iter(kwargs.values()))).split(",")[0].strip("(")):
        getattr(jitorch.optim, name)([jitorch.zeros(2, requires_grad=True)], **kwargs)


def test_sparse_adam_and_adafactor_refuse_complex_parameters_as_torch():
    for name, error in (("SparseAdam", ValueError),):
        with pytest.raises(error):
            getattr(torch.optim, name)([torch.zeros(2, dtype=torch.complex64, requires_grad=True)])
        with pytest.raises(error, match="Complex params"):
            getattr(jitorch.optim, name)([jitorch.zeros(2, dtype=jitorch.complex64, requires_grad=True)])
    p = jitorch.zeros(2, dtype=jitorch.complex64, requires_grad=True)
    p.grad = jitorch.ones(2, dtype=jitorch.complex64)
    with pytest.raises(RuntimeError, match="complex"):
        jitorch.optim.Adafactor([p]).step()


@pytest.mark.parametrize("name", ["Rprop", "ASGD", "Adafactor"])
def test_an_older_pickle_with_number_state_and_missing_flags_steps_again(name):
    import pickle

    p = jitorch.nn.Parameter(jitorch.ones(3))
    opt = getattr(jitorch.optim, name)([p], lr=0.01)
    p.grad = jitorch.ones(3)
    opt.step()
    for s in opt.state.values():
        for key in ("step", "eta", "mu"):
            if key in s:
                s[key] = float(s[key])  # older checkpoints kept these as Python numbers
    for group in opt.param_groups:
        group.pop("foreach", None)
    restored = pickle.loads(pickle.dumps(opt))
    assert all("foreach" in g for g in restored.param_groups)
    assert all(not isinstance(v, float) for s in restored.state.values() for v in s.values())
    restored.param_groups[0]["params"][0].grad = jitorch.ones(3)
    restored.step()
