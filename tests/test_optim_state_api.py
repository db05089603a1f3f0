"""Optimizer ``state_dict``/``load_state_dict``, construction errors and parameter groups, ``zero_grad``, closures,
hooks, differentiable updates, repr, subclasses and deepcopy, checked against PyTorch 2.13.
"""
import copy
import inspect
import warnings

import numpy as np
import pytest
import torch

import jitorch

from optim_helpers import CASES, STEPS, TOL, _case_id, _np, _pair, _params, _reload, _train


# -- state_dict / load_state_dict -------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [CASES[2], CASES[12], CASES[17], CASES[23], CASES[26], CASES[30]], ids=_case_id)
def test_state_dict_round_trip_continues_like_torch(case):
    name, kwargs = case
    rng = np.random.default_rng(8)
    jps, tps = _params(rng)
    jopt, topt = getattr(jitorch.optim, name)(jps, **kwargs), getattr(torch.optim, name)(tps, **kwargs)
    _train(jopt, topt, jps, tps, rng, STEPS // 2, TOL[np.float32])
    # Fresh optimizers (other defaults) over copies of the weights take over from the loaded state.
    jopt2, topt2, jps2, tps2, _, _ = _reload(jopt, topt, jps, tps, lambda j, t: _pair(name, j, t, lr=0.123),
                                             TOL[np.float32])
    assert jopt2.param_groups[0]["lr"] == topt2.param_groups[0]["lr"] == kwargs.get("lr", topt.defaults["lr"])
    assert jopt2.param_groups[0]["params"] == jps2
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
