"""A breadth sweep of jitorch.optim against torch.optim 2.13: every optimizer with its flags, on the same seeded
parameters and gradients, several steps; parameters and the whole state dict compared after the last step.

What `test_optim*.py` already covers one flag at a time (step-for-step values, hyperparameter errors, capture) is
crossed here: foreach on and off, maximize with weight decay, per-group overrides, a parameter without gradients,
``zero_grad(set_to_none=False)``, complex parameters; then ``differentiable=True`` (gradients through several steps),
state dicts carried from one library into the other, hooks, and LBFGS's state. Float32 tolerances are a few ulps per
step (PyTorch fuses ``a + alpha * b`` into FMAs); float64 ones near exact.
"""
import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same

STEPS = 5
SHAPES = ((4, 3), (3,), (2, 2, 2), ())
F32 = dict(rtol=3e-5, atol=3e-6)

OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01, betas=(0.8, 0.95))),
    ("Adamax", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, momentum_decay=0.008, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01, decoupled_weight_decay=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.2)),
    ("Adadelta", dict(lr=0.5, rho=0.8)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)),
    ("Rprop", dict(lr=0.01, etas=(0.3, 1.5), step_sizes=(1e-4, 0.2))),
    ("ASGD", dict(lr=0.01, t0=2, lambd=1e-3, alpha=0.5)),
    ("Adafactor", dict(lr=0.01, beta2_decay=-0.5, d=2.0, eps=(None, 1e-3))),
]
NO_FOREACH = ("Adafactor",)  # torch's Adafactor has foreach, but no complex support (tested elsewhere)
VARIANTS = ["plain", "foreach", "single", "maximize-wd", "groups", "no-grad", "keep-grads", "float64", "complex"]


def _variant_kwargs(name, kwargs, variant):
    kw = dict(kwargs)
    if variant == "foreach":
        kw["foreach"] = True
    elif variant == "single":
        kw["foreach"] = False
    elif variant == "maximize-wd":
        kw.update(maximize=True) if name == "Rprop" else kw.update(maximize=True, weight_decay=0.1)  # (no decay)
    return kw


def _run(lib, name, kwargs, variant, steps=STEPS):
    """Parameters and optimizer after ``steps`` steps on gradients drawn from one seed (through NumPy)."""
    rng = np.random.default_rng(0)
    dtype = np.float64 if variant == "float64" else np.float32
    arrays = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    if variant == "complex":
        arrays = [(a + 1j * rng.standard_normal(a.shape)).astype(np.complex64) for a in arrays]
    params = [lib.tensor(a.copy(), requires_grad=True) for a in arrays]
    groups = params
    if variant == "groups":
        groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.003, "weight_decay": 0.2}]
    opt = getattr(lib.optim, name)(groups, **_variant_kwargs(name, kwargs, variant))
    grads = np.random.default_rng(1)
    for _ in range(steps):
        if variant == "keep-grads":
            opt.zero_grad(set_to_none=False)
        for i, p in enumerate(params):
            g = grads.standard_normal(tuple(p.shape)).astype(dtype)
            if variant == "complex":
                g = (g + 1j * grads.standard_normal(g.shape)).astype(np.complex64)
            if variant in ("no-grad", "keep-grads") and i == 1:
                continue  # never given a gradient: no state, never moved (a zeroed one only in keep-grads)
            if variant == "keep-grads" and p.grad is not None:
                p.grad.add_(lib.tensor(g))
            else:
                p.grad = lib.tensor(g)
        opt.step()
    return params, opt


def assert_state_dicts_match(jt_sd, th_sd, tol, what="state_dict"):
    """Keys in order, `step` tensors with their dtype, numbers, flags and tensors of two state dicts."""
    if isinstance(th_sd, torch.Tensor):
        assert_same(jt_sd, th_sd, what=what, **tol)
    elif isinstance(th_sd, dict):
        assert isinstance(jt_sd, dict), what
        assert list(jt_sd) == list(th_sd), f"{what}: keys {list(jt_sd)} != torch {list(th_sd)}"
        for key in th_sd:
            assert_state_dicts_match(jt_sd[key], th_sd[key], tol, f"{what}[{key!r}]")
    elif isinstance(th_sd, (list, tuple)):
        assert type(jt_sd) is type(th_sd) and len(jt_sd) == len(th_sd), f"{what}: {jt_sd!r} != torch {th_sd!r}"
        for i, (a, b) in enumerate(zip(jt_sd, th_sd)):
            assert_state_dicts_match(a, b, tol, f"{what}[{i}]")
    elif isinstance(th_sd, float):
        assert type(jt_sd) is float and np.isclose(jt_sd, th_sd, rtol=1e-12, atol=0), f"{what}: {jt_sd} != {th_sd}"
    else:
        assert type(jt_sd) is type(th_sd) and jt_sd == th_sd, f"{what}: {jt_sd!r} != torch {th_sd!r}"


def _cases():
    for name, kwargs in OPTIMIZERS:
        for variant in VARIANTS:
            if variant in ("complex", "foreach") and name in NO_FOREACH:
                continue
            yield pytest.param(name, kwargs, variant, id=f"{name}-{variant}")


@pytest.mark.parametrize("name, kwargs, variant", list(_cases()))
def test_optimizer_matches_torch_after_several_steps(name, kwargs, variant):
    jt_params, jt_opt = _run(jitorch, name, kwargs, variant)
    th_params, th_opt = _run(torch, name, kwargs, variant)
    tol = dict(rtol=1e-12, atol=1e-13) if variant == "float64" else F32
    for i, (a, b) in enumerate(zip(jt_params, th_params)):
        assert_same(a.detach(), b.detach(), what=f"{name} param {i}", **tol)
    assert_state_dicts_match(jt_opt.state_dict(), th_opt.state_dict(), tol)
    assert repr(jt_opt) == repr(th_opt)


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", dict(lr=0.1, fused=True, momentum=0.9)), ("Adam", dict(lr=0.01, fused=True, maximize=True)),
    ("AdamW", dict(lr=0.01, fused=True, amsgrad=True)), ("Adagrad", dict(lr=0.1, fused=True)),
    ("LBFGS", dict(lr=0.5)),
])
def test_fused_and_closure_optimizers_match_torch(name, kwargs):
    def run(lib):
        params = [lib.tensor(np.linspace(-1, 1, int(np.prod(s))).reshape(s), requires_grad=True) for s in SHAPES]
        opt = getattr(lib.optim, name)(params, **kwargs)
        weights = [1.0 + 0.5 * i for i in range(len(params))]

        def closure():
            opt.zero_grad()
            loss = sum(w * ((p - 0.3) ** 4).sum() for w, p in zip(weights, params))
            loss.backward()
            return loss
        for _ in range(4):
            opt.step(closure)
        return params, opt

    (jt_params, jt_opt), (th_params, th_opt) = run(jitorch), run(torch)
    for a, b in zip(jt_params, th_params):
        assert_same(a.detach(), b.detach(), rtol=1e-10, atol=1e-12)
    assert_state_dicts_match(jt_opt.state_dict(), th_opt.state_dict(), dict(rtol=1e-10, atol=1e-12))


def test_lbfgs_strong_wolfe_state_lists_al_where_torch_does():
    """PyTorch stores ``al`` during the first step's second iteration, so it precedes ``d`` in the state dict."""
    def run(lib):
        x = lib.tensor([1.5, -0.5, 2.0], requires_grad=True)
        opt = lib.optim.LBFGS([x], lr=0.5, line_search_fn="strong_wolfe", history_size=3)

        def closure():
            opt.zero_grad()
            loss = ((x - lib.tensor([0.1, 0.2, 0.3])) ** 4).sum() + (x ** 2).sum()
            loss.backward()
            return loss
        opt.step(closure)
        return opt.state_dict()

    jt_sd, th_sd = run(jitorch), run(torch)
    assert list(th_sd["state"][0])[:3] == ["func_evals", "n_iter", "al"]
    assert_state_dicts_match(jt_sd, th_sd, dict(rtol=1e-5, atol=1e-6))


DIFFERENTIABLE = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.01)), ("Adam", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)), ("Adamax", dict(lr=0.01)), ("NAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)), ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adadelta", dict()), ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)), ("Rprop", dict(lr=0.01)),
    ("ASGD", dict(lr=0.01, t0=1)),
]
# torch's differentiable Adamax divides by its exp_inf buffer without a copy: a second step breaks its backward
# (a version-counter error), so Adamax is compared over one step.
ONE_STEP = ("Adamax",)


def _differentiable_run(lib, name, kwargs):
    """Three differentiable steps on non-leaf copies of leaves; the leaves' gradients of a weighted sum."""
    rng = np.random.default_rng(0)
    leaves = [lib.tensor(rng.standard_normal(s), requires_grad=True) for s in ((3, 2), (4,))]
    params = [leaf.clone() for leaf in leaves]
    opt = getattr(lib.optim, name)(params, differentiable=True, **kwargs)
    grads = np.random.default_rng(1)
    for _ in range(1 if name in ONE_STEP else 3):
        for p in params:
            p.grad = lib.tensor(grads.standard_normal(tuple(p.shape)))
        opt.step()
    loss = sum((p * lib.tensor(np.linspace(-1, 1, p.numel()).reshape(tuple(p.shape)))).sum() for p in params)
    loss.backward()
    return params, [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("name, kwargs", DIFFERENTIABLE, ids=lambda v: v if isinstance(v, str) else "")
def test_differentiable_steps_and_their_gradients_match_torch(name, kwargs):
    """Adam's differentiable update is torch's capturable formula: bias corrections rounded through the float32
    step tensor, visible in float64 parameters."""
    (jt_params, jt_grads), (th_params, th_grads) = (_differentiable_run(lib, name, kwargs) for lib in (jitorch, torch))
    for a, b in zip(jt_params + jt_grads, th_params + th_grads):
        assert_same(a.detach(), b.detach(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop",
                                  "Rprop", "ASGD"])
def test_foreach_with_differentiable_fails_its_step_as_torch(name):
    def attempt(lib):
        p = lib.zeros(3, requires_grad=True).clone()
        opt = getattr(lib.optim, name)([p], foreach=True, differentiable=True)
        p.grad = lib.ones(3)
        with pytest.raises(AssertionError) as info:
            opt.step()
        return str(info.value)

    assert attempt(jitorch) == attempt(torch) == "_foreach ops don't support autograd"


def _to_library(value, lib):
    """A state dict's tensors rebuilt in ``lib`` through NumPy (complex ones through their real view)."""
    if isinstance(value, (torch.Tensor, jitorch.Tensor)):
        value = value.detach()
        array = (value.numpy() if not value.is_complex() else
                 value.numpy().view(np.float32 if value.dtype in (torch.complex64, jitorch.complex64) else np.float64))
        return lib.tensor(np.asarray(array).copy())
    if isinstance(value, dict):
        return {k: _to_library(v, lib) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_library(v, lib) for v in value)
    return value


@pytest.mark.parametrize("name, kwargs", OPTIMIZERS + [("Adam", dict(lr=0.01, fused=True)), ("SGD", dict(lr=0.1))],
                         ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("direction", ["jitorch-to-torch", "torch-to-jitorch"])
def test_state_dict_carried_across_libraries_continues_like_the_source(name, kwargs, direction):
    src, dst = (jitorch, torch) if direction == "jitorch-to-torch" else (torch, jitorch)
    src_params, src_opt = _run(src, name, kwargs, "plain", steps=3)
    dst_params = [dst.tensor(p.detach().numpy().copy(), requires_grad=True) for p in src_params]
    dst_opt = getattr(dst.optim, name)(dst_params, **kwargs)
    dst_opt.load_state_dict(_to_library(src_opt.state_dict(), dst))

    def compare(a_sd, b_sd):
        jt_sd, th_sd = (a_sd, b_sd) if src is jitorch else (b_sd, a_sd)
        assert_state_dicts_match(jt_sd, th_sd, F32)

    compare(src_opt.state_dict(), dst_opt.state_dict())
    grads = np.random.default_rng(5)
    for _ in range(3):
        for p, q in zip(src_params, dst_params):
            g = grads.standard_normal(tuple(p.shape)).astype(np.float32)
            p.grad, q.grad = src.tensor(g), dst.tensor(g)
        src_opt.step()
        dst_opt.step()
    compare(src_opt.state_dict(), dst_opt.state_dict())


def test_hooks_add_param_group_and_saved_groups_match_torch():
    def run(lib):
        params = [lib.zeros(2, requires_grad=True), lib.ones(3, requires_grad=True)]
        opt = lib.optim.Adam([params[0]], lr=0.1)
        opt.add_param_group({"params": [params[1]], "lr": 0.5, "betas": (0.5, 0.6)})
        log = []
        pre = opt.register_step_pre_hook(lambda o, args, kwargs: log.append(("pre", len(args), kwargs)))
        opt.register_step_post_hook(lambda o, args, kwargs: log.append(("post", len(args), kwargs)))
        opt.register_state_dict_pre_hook(lambda o: log.append("state_dict pre"))

        def add_entry(o, sd):
            log.append("state_dict post")
            sd["extra"] = 1
        opt.register_state_dict_post_hook(add_entry)
        opt.register_load_state_dict_pre_hook(lambda o, sd: log.append(("load pre", sorted(sd))))
        opt.register_load_state_dict_post_hook(lambda o: log.append("load post"))
        for p in params:
            p.grad = lib.ones_like(p)
        opt.step()
        saved = opt.state_dict()
        opt.load_state_dict(saved)
        pre.remove()
        opt.step()
        with pytest.raises(ValueError) as info:
            opt.add_param_group({"params": [params[0]]})
        return log, saved, repr(opt), str(info.value), params

    jt_log, jt_saved, jt_repr, jt_error, jt_params = run(jitorch)
    th_log, th_saved, th_repr, th_error, th_params = run(torch)
    assert jt_log == th_log and jt_repr == th_repr and jt_error == th_error
    assert_state_dicts_match(jt_saved, th_saved, F32)
    for a, b in zip(jt_params, th_params):
        assert_same(a.detach(), b.detach(), **F32)
