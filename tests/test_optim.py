"""jitorch.optim against torch.optim 2.13: the same initial weights and gradients (through NumPy), step for step.

Updates are compared after every one of 20 steps, parameters and every state entry. Float32 tolerances are a few
ulps per step: PyTorch's kernels fuse ``a + alpha * b`` and ``lerp`` into FMAs, NumPy rounds the product first.
"""
import copy
import inspect
import warnings

import numpy as np
import pytest
import torch

import jitorch

STEPS = 20
SHAPES = ((4, 3), (3,), (2, 2, 2), ())
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05, maximize=True)),
    ("SGD", dict(lr=0.1, foreach=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, maximize=True)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, amsgrad=True, weight_decay=0.05, maximize=True)),
    ("Adam", dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, foreach=False, capturable=False)),
    ("Adam", dict(lr=0.01, fused=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.2, amsgrad=True)),
    ("AdamW", dict(lr=0.01, betas=(0.5, 0.9), maximize=True)),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1, maximize=True, eps=1e-6)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1)),
    ("Adagrad", dict(lr=0.1, weight_decay=0.1, maximize=True, eps=1e-6)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.95)),
    ("Adadelta", dict(weight_decay=0.1, maximize=True, eps=1e-5)),
]


def _case_id(case):
    name, kwargs = case
    return name + "".join(f"-{k}={v}" for k, v in kwargs.items())


def _params(rng, dtype=np.float32, shapes=SHAPES):
    """The same leaves in both frameworks (plain tensors: optimizers take any tensors)."""
    arrays = [np.asarray(rng.standard_normal(s)).astype(dtype) for s in shapes]
    return ([jitorch.tensor(a.copy(), requires_grad=True) for a in arrays],
            [torch.tensor(a.copy(), requires_grad=True) for a in arrays])


def _feed_grads(jps, tps, rng, step):
    """Random gradients for both; the second parameter gets none every third step (it must be skipped)."""
    for i, (jp, tp) in enumerate(zip(jps, tps)):
        if i == 1 and step % 3 == 2:
            jp.grad = tp.grad = None
            continue
        g = np.asarray(rng.standard_normal(tuple(tp.shape))).astype(tp.detach().numpy().dtype)
        jp.grad = jitorch.tensor(g.copy())
        tp.grad = torch.tensor(g.copy())


def _np(t):
    return np.asarray(t.detach().numpy())


def _assert_close(j, t, tol, what):
    if isinstance(t, torch.Tensor):
        assert isinstance(j, jitorch.Tensor), f"{what}: not a tensor"
        assert str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], f"{what}: {j.dtype} != {t.dtype}"
        assert tuple(j.shape) == tuple(t.shape), what
        np.testing.assert_allclose(_np(j), _np(t), err_msg=what, **tol)
    else:
        assert j == t, f"{what}: {j!r} != {t!r}"


def _assert_same(jopt, topt, jps, tps, tol, when=""):
    for i, (jp, tp) in enumerate(zip(jps, tps)):
        _assert_close(jp, tp, tol, f"param {i} {when}")
        jstate, tstate = jopt.state.get(jp, {}), topt.state.get(tp, {})
        assert sorted(jstate) == sorted(tstate), f"state keys of param {i} {when}: {sorted(jstate)}"
        for key in tstate:
            _assert_close(jstate[key], tstate[key], tol, f"state[{key!r}] of param {i} {when}")


def _train(jopt, topt, jps, tps, rng, steps, tol):
    for step in range(steps):
        _feed_grads(jps, tps, rng, step)
        jopt.step()
        topt.step()
        _assert_same(jopt, topt, jps, tps, tol, f"after step {step + 1}")


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


# -- state_dict / load_state_dict -------------------------------------------------------------------------------------
def _strip_tensors(sd):
    """A state dict with tensors replaced by (dtype name, shape): comparable across frameworks."""
    if isinstance(sd, (jitorch.Tensor, torch.Tensor)):
        return (str(sd.dtype).split(".")[-1], tuple(sd.shape))
    if isinstance(sd, dict):
        return {k: _strip_tensors(v) for k, v in sd.items()}
    if isinstance(sd, (list, tuple)):
        return type(sd)(_strip_tensors(v) for v in sd)
    return sd


@pytest.mark.parametrize("case", [CASES[2], CASES[12], CASES[17], CASES[23], CASES[26], CASES[30]], ids=_case_id)
def test_state_dict_round_trip_continues_like_torch(case):
    name, kwargs = case
    rng = np.random.default_rng(8)
    jps, tps = _params(rng)
    jopt, topt = getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs)
    _train(jopt, topt, jps, tps, rng, STEPS // 2, TOL[np.float32])
    jsd, tsd = copy.deepcopy(jopt.state_dict()), copy.deepcopy(topt.state_dict())
    assert _strip_tensors(jsd) == _strip_tensors(tsd)
    # Fresh optimizers (other defaults) over copies of the weights take over from the loaded state.
    jps2 = [jitorch.tensor(_np(p).copy(), requires_grad=True) for p in jps]
    tps2 = [torch.tensor(_np(p).copy(), requires_grad=True) for p in tps]
    jopt2, topt2 = getattr(jitorch.optim, name)(jps2, lr=0.123), getattr(torch.optim, name)(tps2, lr=0.123)
    jopt2.load_state_dict(jsd)
    topt2.load_state_dict(tsd)
    assert jopt2.param_groups[0]["lr"] == topt2.param_groups[0]["lr"] == kwargs.get("lr", topt.defaults["lr"])
    assert jopt2.param_groups[0]["params"] == jps2
    _assert_same(jopt2, topt2, jps2, tps2, TOL[np.float32], "after loading")
    _train(jopt2, topt2, jps2, tps2, rng, STEPS // 2, TOL[np.float32])


def test_load_state_dict_casts_state_to_the_parameters_dtype_but_keeps_step():
    rng = np.random.default_rng(9)
    results = []
    for lib in (jitorch, torch):
        p64 = lib.tensor(rng.standard_normal(3), requires_grad=True)
        opt64 = lib.optim.Adam([p64])
        p64.grad = lib.ones(3, dtype=lib.float64)
        opt64.step()
        p32 = lib.zeros(3, requires_grad=True)
        opt32 = lib.optim.Adam([p32])
        opt32.load_state_dict(opt64.state_dict())
        results.append({k: str(v.dtype).split(".")[-1] for k, v in opt32.state[p32].items()})
    assert results[0] == results[1] == {"step": "float32", "exp_avg": "float32", "exp_avg_sq": "float32"}


def test_load_state_dict_validates_group_sizes():
    def make(lib, sizes):
        return lib.optim.SGD([{"params": [lib.zeros(1, requires_grad=True) for _ in range(n)]} for n in sizes], lr=1.0)

    for saved, target in (((1,), (1, 1)), ((2,), (1,))):
        messages = []
        for lib in (jitorch, torch):
            with pytest.raises(ValueError) as err:
                make(lib, target).load_state_dict(make(lib, saved).state_dict())
            messages.append(str(err.value))
        assert messages[0] == messages[1]


def test_state_is_a_defaultdict_keyed_by_parameter_and_step_is_a_float32_scalar():
    p = jitorch.zeros(2, requires_grad=True)
    opt = jitorch.optim.Adam([p])
    assert opt.state[p] == {} and p in opt.state  # a defaultdict, as torch's
    p.grad = jitorch.ones(2)
    version = p._version
    opt.step()
    step = opt.state[p]["step"]
    assert step.dim() == 0 and step.dtype is jitorch.float32 and step.item() == 1.0 and not step.is_cuda
    assert p._version > version, "an in-place update bumps the version counter"


# -- construction errors and parameter groups -------------------------------------------------------------------------
ERROR_CASES = [
    ("SGD", dict(lr=-1.0)), ("SGD", dict(momentum=-0.1)), ("SGD", dict(weight_decay=-1)),
    ("SGD", dict(nesterov=True)), ("SGD", dict(momentum=0.9, dampening=0.1, nesterov=True)),
    ("SGD", dict(fused=True, foreach=True)), ("SGD", dict(fused=True, differentiable=True)),
    ("Adam", dict(lr=-0.5)), ("Adam", dict(eps=-1.0)), ("Adam", dict(betas=(1.0, 0.999))),
    ("Adam", dict(betas=(0.9, -0.1))), ("Adam", dict(weight_decay=-1.0)), ("AdamW", dict(lr=-2.0)),
    ("Adam", dict(fused=True, foreach=True)),
    ("RMSprop", dict(lr=-1.0)), ("RMSprop", dict(alpha=-1.0)), ("RMSprop", dict(momentum=-1.0)),
    ("RMSprop", dict(eps=-1.0)), ("Adagrad", dict(lr_decay=-1.0)), ("Adagrad", dict(initial_accumulator_value=-1)),
    ("Adadelta", dict(rho=1.5)), ("Adadelta", dict(lr=-1.0)), ("LBFGS", dict(lr=-1.0)),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=_case_id)
def test_invalid_hyperparameters_raise_torchs_errors(case):
    name, kwargs = case
    with pytest.raises(Exception) as terr:
        getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)], **kwargs)
    with pytest.raises(type(terr.value)) as jerr:
        getattr(jitorch.optim, name)([jitorch.zeros(1, requires_grad=True)], **kwargs)
    assert str(jerr.value) == str(terr.value)


@pytest.mark.parametrize("params", ["empty", "tensor", "non_leaf", "not_a_tensor", "set"])
def test_invalid_params_raise_torchs_errors(params):
    def build(lib):
        x = lib.ones(2, requires_grad=True)
        return {"empty": [], "tensor": x, "non_leaf": [x * 2], "not_a_tensor": [1.0], "set": {"params": {x}}}[params]

    with pytest.raises(Exception) as terr:
        spec = build(torch)
        torch.optim.SGD([spec] if isinstance(spec, dict) else spec)
    with pytest.raises(type(terr.value)) as jerr:
        spec = build(jitorch)
        jitorch.optim.SGD([spec] if isinstance(spec, dict) else spec)
    assert str(jerr.value).replace("jitorch", "torch") == str(terr.value)


def test_add_param_group_and_duplicates():
    a, b = jitorch.zeros(1, requires_grad=True), jitorch.zeros(2, requires_grad=True)
    opt = jitorch.optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert opt.param_groups[1]["params"] == [b] and opt.param_groups[1]["momentum"] == 0.9
    assert opt.param_groups[1]["lr"] == 0.5
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.warns(UserWarning, match="duplicate parameters"):
        jitorch.optim.SGD([a, a], lr=0.1)


def test_named_parameters_are_saved_as_param_names():
    jopt = jitorch.optim.SGD([("w", jitorch.zeros(1, requires_grad=True))], lr=0.1)
    topt = torch.optim.SGD([("w", torch.zeros(1, requires_grad=True))], lr=0.1)
    assert jopt.state_dict()["param_groups"] == topt.state_dict()["param_groups"]


def test_signatures_expose_torchs_options():
    for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "LBFGS"):
        jsig = inspect.signature(getattr(jitorch.optim, name))
        tsig = inspect.signature(getattr(torch.optim, name))
        assert [(p.name, p.default, p.kind) for p in jsig.parameters.values()] == \
            [(p.name, p.default, p.kind) for p in tsig.parameters.values()], name
    assert "fused" in inspect.signature(jitorch.optim.AdamW).parameters


# -- zero_grad, closures, hooks -----------------------------------------------------------------------------------
def test_zero_grad():
    p = jitorch.ones(2, requires_grad=True)
    opt = jitorch.optim.SGD([p], lr=0.1)
    (p * 3).sum().backward()
    grad = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is grad and p.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert p.grad is None


def test_step_with_closure_runs_it_with_grad_enabled_and_returns_its_loss():
    p = jitorch.ones(2, requires_grad=True)
    opt = jitorch.optim.SGD([p], lr=0.5)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with jitorch.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 2.0 and p.tolist() == [0.0, 0.0]


def test_step_hooks():
    calls = []
    p = jitorch.ones(1, requires_grad=True)
    opt = jitorch.optim.Adam([p])
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", o is opt, args[0] is opt)))
    post = opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", o is opt)))
    glob = jitorch.optim.optimizer.register_optimizer_step_pre_hook(lambda o, a, k: calls.append(("global",)))
    opt.step()
    assert calls == [("global",), ("pre", True, True), ("post", True)]
    for handle in (pre, post, glob):
        handle.remove()
    opt.step()
    assert len(calls) == 3


@pytest.mark.parametrize("case", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
                                  ("Adam", dict(lr=0.1, amsgrad=True, weight_decay=0.1)),
                                  ("RMSprop", dict(lr=0.1, centered=True, momentum=0.5)),
                                  ("Adagrad", dict(lr=0.1)), ("Adadelta", dict(lr=0.5))], ids=_case_id)
def test_differentiable_updates_are_recorded_by_autograd(case):
    # Meta-learning style: the parameter and the gradients fed in are functions of an outer leaf ``w``.
    name, kwargs = case
    grads = []
    for lib in (jitorch, torch):
        w = lib.tensor([1.0, -2.0, 0.5], requires_grad=True)
        p = w * 1.5
        opt = getattr(lib.optim, name)([p], differentiable=True, **kwargs)
        # PyTorch's own differentiable Adam/RMSprop/... modify saved state in place on later steps: one step there.
        for k in range(3 if name == "SGD" else 1):
            p.grad = w * (k + 1.0) - 0.25
            opt.step()
        (p * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append(_np(w.grad))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)


def test_repr_matches_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jrepr = repr(jitorch.optim.Adam([jitorch.zeros(1, requires_grad=True)], lr=0.01))
        trepr = repr(torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.01))
    assert jrepr == trepr


def test_user_defined_optimizer_subclass():
    # The usual pattern of custom optimizers: per-group options, ``self.state`` and tensor ops under no_grad.
    class SignSGD(jitorch.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr})

        @jitorch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self.state[p]["count"] = self.state[p].get("count", 0) + 1
                        p.add_(p.grad.sign(), alpha=-group["lr"])

    class Clipped(SignSGD):
        def step(self, closure=None):
            return super().step(closure)

    calls = []
    p = jitorch.tensor([1.0, -1.0], requires_grad=True)
    opt = Clipped([p], lr=0.25)
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append("pre"))
    p.grad = jitorch.tensor([3.0, -0.5])
    opt.step()
    assert p.tolist() == [0.75, -0.75] and opt.state[p] == {"count": 1}
    assert calls == ["pre"], "a subclass calling super().step() runs the hooks once"
    assert opt.state_dict()["state"] == {0: {"count": 1}}


def test_deepcopy_of_an_optimizer_copies_its_state():
    p = jitorch.ones(2, requires_grad=True)
    opt = jitorch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = jitorch.ones(2)
    opt.step()
    clone = copy.deepcopy(opt)
    (cp,) = clone.param_groups[0]["params"]
    assert cp is not p and cp.tolist() == p.tolist()
    assert clone.state[cp]["momentum_buffer"].tolist() == [1.0, 1.0]
    assert clone.state[cp]["momentum_buffer"] is not opt.state[p]["momentum_buffer"]
