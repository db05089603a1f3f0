"""jitorch.optim against torch.optim 2.13: the same initial weights and gradients (through NumPy), step for step.

Updates are compared after every one of 20 steps, parameters and every state entry. Float32 tolerances are a few
ulps per step: PyTorch's kernels fuse ``a + alpha * b`` and ``lerp`` into FMAs, NumPy rounds the product first.
"""
import copy
import warnings

import numpy as np
import pytest
import torch

import jitorch

from optim_helpers import CASES, STEPS, TOL, _assert_close, _assert_same, _case_id, _np, _params, _train


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_updates_match_torch_step_for_step(case):
    name, kwargs = case
    rng = np.random.default_rng(0)
    jps, tps = _params(rng)
    _train(getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs), jps, tps, rng,
           STEPS, TOL[np.float32])


@pytest.mark.parametrize("case", [CASES[5], CASES[12], CASES[17], CASES[23], CASES[27], CASES[30]], ids=_case_id)
def test_float64_updates_match_torch(case):
    name, kwargs = case
    rng = np.random.default_rng(1)
    jps, tps = _params(rng, np.float64)
    _train(getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs), jps, tps, rng,
           STEPS, TOL[np.float64])


@pytest.mark.parametrize("name", ["Adam", "RMSprop", "Adagrad", "Adadelta", "SGD"])
def test_complex_parameters_update_as_real_views(name):
    kwargs = {"SGD": dict(lr=0.1, momentum=0.9), "RMSprop": dict(lr=0.01, centered=True)}.get(name, dict(lr=0.01))
    rng = np.random.default_rng(2)
    arrays = [(rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(np.complex64) for s in ((3, 2), (4,))]
    jps = [jitorch.tensor(a.copy(), requires_grad=True) for a in arrays]
    tps = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
    jopt, topt = getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs)
    for _ in range(STEPS):
        for jp, tp in zip(jps, tps):
            g = (rng.standard_normal(jp.shape) + 1j * rng.standard_normal(jp.shape)).astype(np.complex64)
            jp.grad, tp.grad = jitorch.tensor(g.copy()), torch.tensor(g.copy())
        jopt.step()
        topt.step()
        _assert_same(jopt, topt, jps, tps, TOL[np.float32])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_adam_computes_in_float32(dtype):
    # Half-precision state rounds once per op, after a float32 computation, as PyTorch's kernels do.
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6, 5)).astype(np.float32)
    jp = jitorch.tensor(data, requires_grad=True).to(getattr(jitorch, dtype)).detach().requires_grad_()
    tp = torch.tensor(data).to(getattr(torch, dtype)).requires_grad_()
    jopt, topt = jitorch.optim.Adam([jp], lr=0.01), torch.optim.Adam([tp], lr=0.01)
    for _ in range(STEPS):
        g = rng.standard_normal((6, 5)).astype(np.float32)
        jp.grad = jitorch.tensor(g).to(jp.dtype)
        tp.grad = torch.tensor(g).to(tp.dtype)
        jopt.step()
        topt.step()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == "bfloat16" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(jp.float().detach().numpy(), tp.float().detach().numpy(), **tol)
    np.testing.assert_allclose(jopt.state[jp]["exp_avg_sq"].float().numpy(),
                               topt.state[tp]["exp_avg_sq"].float().numpy(), **tol)


def test_per_group_options_and_writable_lr():
    rng = np.random.default_rng(4)
    jps, tps = _params(rng)

    def groups(ps):
        return [{"params": ps[:2], "weight_decay": 0.3, "betas": (0.8, 0.95), "eps": 1e-5},
                {"params": ps[2:], "lr": 0.05, "amsgrad": True}]

    jopt, topt = jitorch.optim.AdamW(groups(jps), lr=0.01), torch.optim.AdamW(groups(tps), lr=0.01)
    assert [sorted(g) for g in jopt.param_groups] == [sorted(g) for g in topt.param_groups]
    _train(jopt, topt, jps, tps, rng, STEPS // 2, TOL[np.float32])
    for jg, tg in zip(jopt.param_groups, topt.param_groups):
        jg["lr"] = tg["lr"] = tg["lr"] * 0.5
        jg["weight_decay"] = tg["weight_decay"] = 0.01
    _train(jopt, topt, jps, tps, rng, STEPS // 2, TOL[np.float32])


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_tensor_lr(name):
    rng = np.random.default_rng(5)
    jps, tps = _params(rng)
    kwargs = {"SGD": dict(momentum=0.9)}.get(name, {})
    jopt = getattr(jitorch.optim, name)(jps, lr=jitorch.tensor(0.01), **kwargs)
    topt = getattr(torch.optim, name)(tps, lr=torch.tensor(0.01), **kwargs)
    _train(jopt, topt, jps, tps, rng, 5, TOL[np.float32])


def _model_loss(lib, w, b, x, y):
    return (((x * w).sum(-1) + b - y) ** 2).mean()


@pytest.mark.parametrize("case", [CASES[3], CASES[12], CASES[17], CASES[23], CASES[27], CASES[30]], ids=_case_id)
def test_training_a_model_with_autograd_matches_torch(case):
    # Gradients come from each framework's own backward here, and zero_grad runs between steps.
    name, kwargs = case
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    jps, tps = _params(rng, shapes=((3,), ()))
    jopt, topt = getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs)
    for _ in range(STEPS):
        for lib, opt, ps in ((jitorch, jopt, jps), (torch, topt, tps)):
            opt.zero_grad()
            _model_loss(lib, *ps, lib.tensor(x), lib.tensor(y)).backward()
            opt.step()
        _assert_same(jopt, topt, jps, tps, dict(rtol=1e-4, atol=1e-5))


def _lbfgs_run(lib, dtype, line_search_fn, history_size, steps=STEPS, resume_at=None):
    """Fit a small regularized least-squares problem; returns [(loss, x, s, func_evals)] per step and the state.

    With ``resume_at``, the optimizer is rebuilt from a deep copy of its state dict at that step.
    """
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((10, 4)).astype(dtype), rng.standard_normal(10).astype(dtype)
    x = lib.tensor(rng.standard_normal(4).astype(dtype), requires_grad=True)
    s = lib.tensor(dtype(0.5), requires_grad=True)
    def make():
        return lib.optim.LBFGS([x, s], lr=1.0 if line_search_fn else 0.5, max_iter=4, history_size=history_size,
                               line_search_fn=line_search_fn)

    opt = make()
    am, bm = lib.tensor(a), lib.tensor(b)

    def closure():
        opt.zero_grad()
        loss = (((am * x).sum(-1) + s - bm) ** 2).mean() + (x ** 4).sum() * 0.05 + s * s * 0.1
        loss.backward()
        return loss

    trace = []
    for step in range(steps):
        if step == resume_at:
            state = copy.deepcopy(opt.state_dict())
            opt = make()
            opt.load_state_dict(state)
        loss = opt.step(closure)
        trace.append((float(loss.detach()), _np(x).copy(), float(s.detach()), opt.state[x]["func_evals"]))
    return trace, opt.state[x]


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("history_size,resume_at", [(3, None), (100, None), (3, 7)])
def test_lbfgs_matches_torch_step_for_step(line_search_fn, history_size, resume_at):
    # Float64: the same iterations, function evaluations and line-search branches as PyTorch.
    (jtrace, jstate), (ttrace, tstate) = (_lbfgs_run(lib, np.float64, line_search_fn, history_size,
                                                     resume_at=resume_at) for lib in (jitorch, torch))
    for k, ((jl, jx, js, jn), (tl, tx, ts, tn)) in enumerate(zip(jtrace, ttrace)):
        np.testing.assert_allclose(jl, tl, rtol=1e-10, err_msg=f"loss at step {k}")
        np.testing.assert_allclose(jx, tx, rtol=1e-8, atol=1e-10, err_msg=f"x at step {k}")
        np.testing.assert_allclose(js, ts, rtol=1e-8, atol=1e-10, err_msg=f"s at step {k}")
        assert jn == tn, f"function evaluations at step {k}: {jn} != torch {tn}"
    assert sorted(jstate) == sorted(tstate)
    assert jstate["n_iter"] == tstate["n_iter"] and len(jstate["old_dirs"]) == len(tstate["old_dirs"])
    for key in ("d", "prev_flat_grad", "H_diag"):
        _assert_close(jstate[key], tstate[key], dict(rtol=1e-6, atol=1e-9), key)
    for jv, tv in zip(jstate["ro"], tstate["ro"]):
        _assert_close(jv, tv, dict(rtol=1e-6), "ro")


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_float32_converges_as_torch(line_search_fn):
    # Float32 near the optimum is ulp noise (PyTorch's own CPU kernels disagree there): compare the approach and
    # the final loss, not which of the noise-level branches each run takes.
    (jtrace, _), (ttrace, _) = (_lbfgs_run(lib, np.float32, line_search_fn, 5) for lib in (jitorch, torch))
    for k in range(2):
        np.testing.assert_allclose(jtrace[k][1], ttrace[k][1], rtol=1e-5, atol=1e-6, err_msg=f"x at step {k}")
        assert jtrace[k][3] == ttrace[k][3]
    np.testing.assert_allclose(jtrace[-1][0], ttrace[-1][0], rtol=1e-5)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_reads_its_losses_without_the_scalar_conversion_warning(line_search_fn, monkeypatch):
    # torch's LBFGS converts the closure's loss to a float under no_grad (its step's mode): float() of a tensor
    # that requires grad in grad mode warns, and a step that warned stopped programs run with -W error
    monkeypatch.setattr(jitorch._tensor_values, "_SCALAR_OF_GRAD_WARNED", [])  # the warning is once per process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _lbfgs_run(jitorch, np.float64, line_search_fn, 3, steps=2)


def test_lbfgs_rejects_groups_and_unknown_line_search():
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        jitorch.optim.LBFGS([{"params": [jitorch.zeros(1, requires_grad=True)]},
                             {"params": [jitorch.zeros(1, requires_grad=True)]}])
    x = jitorch.ones(2, requires_grad=True)
    opt = jitorch.optim.LBFGS([x], line_search_fn="armijo")

    def closure():
        opt.zero_grad()
        loss = (x ** 2).sum()
        loss.backward()
        return loss

    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(closure)
