"""torch.func as papers and tutorials write it, against torch: the model-ensembling tutorial (a meta-device base,
dropout and the randomness modes), per-example gradients through batch norm, the empirical-NTK tutorial's two
methods, a second-order MAML step, tied weights under functional_call, and jacfwd's randomness flag."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same

RNG = np.random.default_rng(11)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _t(lib, a):
    return lib.from_numpy(np.array(a, copy=True))


def _same_tree(got, want, tol=1e-5):
    got_leaves = jitorch.utils._pytree.tree_flatten(got)[0]
    want_leaves = torch.utils._pytree.tree_flatten(want)[0]
    assert len(got_leaves) == len(want_leaves)
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        assert_same(g, w, atol=tol, rtol=tol, what=f"leaf {i}")


def _loaded(lib, module, seed):
    """``module`` with standard normal parameters from ``seed`` (the same in both libraries)."""
    rng = np.random.default_rng(seed)
    with lib.no_grad():
        for p in module.parameters():
            p.copy_(_t(lib, 0.5 * rng.standard_normal(tuple(p.shape)).astype(np.float32)))
    return module


def _mlp(lib, p_drop=0.0, batch_norm=False):
    nn = lib.nn
    layers = [nn.Linear(5, 8)] + ([nn.BatchNorm1d(8)] if batch_norm else []) + \
        [nn.ReLU(), nn.Dropout(p_drop), nn.Linear(8, 3)]
    return nn.Sequential(*layers)


X = _arr(4, 5)
Y = RNG.integers(0, 3, (4,))
NTK_X1, NTK_X2 = _arr(3, 4), _arr(2, 4)


def _ensemble(lib, p_drop=0.0, randomness="error", train=False):
    models = [_loaded(lib, _mlp(lib, p_drop), seed).train(train) for seed in range(3)]
    params, buffers = lib.func.stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def fmodel(params, buffers, x):
        return lib.func.functional_call(base, (params, buffers), (x,))
    return lib.func.vmap(fmodel, in_dims=(0, 0, None), randomness=randomness)(params, buffers, _t(lib, X))


def test_ensembling_tutorial_with_a_meta_base_and_eval_dropout():
    _same_tree(_ensemble(jitorch, 0.5), _ensemble(torch, 0.5))


def test_ensembling_with_training_dropout_follows_the_randomness_flag():
    for lib in (torch, jitorch):
        with pytest.raises(RuntimeError, match="randomness error mode"):
            _ensemble(lib, 0.5, "error", True)
    jitorch.manual_seed(0)
    same = _ensemble(jitorch, 0.5, "same", True)
    different = _ensemble(jitorch, 0.5, "different", True)
    assert tuple(same.shape) == tuple(different.shape) == (3, 4, 3)
    # 'same': every model sees the first model's mask, so the zeros of the hidden layer match; check through a
    # model whose output is its masked input (identity weights)
    ones = jitorch.ones(3, 200)
    masks = jitorch.func.vmap(lambda r: jitorch.nn.functional.dropout(r, 0.5), randomness="same")(ones) == 0
    assert all(jitorch.equal(masks[0], m) for m in masks)
    masks = jitorch.func.vmap(lambda r: jitorch.nn.functional.dropout(r, 0.5), randomness="different")(ones) == 0
    assert not jitorch.equal(masks[0], masks[1])


def _per_example(lib, batch_norm=False, replace=False, has_aux=False):
    model = _loaded(lib, _mlp(lib, batch_norm=batch_norm), 7)
    if batch_norm:
        with lib.no_grad():
            model[1].running_mean.copy_(_t(lib, np.linspace(-1, 1, 8).astype(np.float32)))
            model[1].running_var.copy_(_t(lib, np.linspace(0.5, 2, 8).astype(np.float32)))
        model.eval()
    x = _t(lib, X)
    if replace:  # per-sample inputs of 3 rows each, normalized over their own rows
        model.train()
        lib.func.replace_all_batch_norm_modules_(model)
        x = _t(lib, np.stack([X[:3], X[1:], X[:3] * 2, X[1:] - 1]))
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss(params, buffers, xb, yb):
        xb = xb if replace else xb.unsqueeze(0)
        out = lib.func.functional_call(model, (params, buffers), (xb,))
        value = lib.nn.functional.cross_entropy(out, yb.expand(out.shape[0]))
        return (value, out) if has_aux else value
    per_sample = lib.func.grad(loss, has_aux=has_aux)
    return lib.func.vmap(per_sample, in_dims=(None, None, 0, 0))(params, buffers, x, _t(lib, Y))


@pytest.mark.parametrize("batch_norm,replace,has_aux", [(False, False, True), (True, False, False),
                                                        (True, True, False)])
def test_per_example_gradients_through_batch_norm(batch_norm, replace, has_aux):
    _same_tree(_per_example(jitorch, batch_norm, replace, has_aux), _per_example(torch, batch_norm, replace, has_aux),
               tol=1e-4)


def test_grad_and_value_with_an_argnums_tuple_and_aux_per_sample():
    def make(lib):
        def f(w, b, x):
            y = ((w * x).sum() + b).tanh()
            return y, {"pre": (w * x).sum()}
        g = lib.func.grad_and_value(f, argnums=(0, 1), has_aux=True)
        return lib.func.vmap(g, in_dims=(None, None, 0))(_t(lib, X[0]), lib.tensor(0.3), _t(lib, X))
    _same_tree(make(jitorch), make(torch))


def _ntk_jacobians(lib):
    nn = lib.nn
    net = _loaded(lib, nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)), 5)
    params = {k: v.detach() for k, v in net.named_parameters()}
    rng = np.random.default_rng(5)
    x1, x2 = (_t(lib, rng.standard_normal(s).astype(np.float32)) for s in ((3, 2, 6, 6), (2, 2, 6, 6)))

    def fnet_single(params, x):
        return lib.func.functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)
    jac = lib.func.vmap(lib.func.jacrev(fnet_single), (None, 0))
    j1 = [j.flatten(2) for j in jac(params, x1).values()]
    j2 = [j.flatten(2) for j in jac(params, x2).values()]
    full = lib.stack([lib.einsum("Naf,Mbf->NMab", a, b) for a, b in zip(j1, j2)]).sum(0)
    trace = lib.stack([lib.einsum("Naf,Maf->NM", a, b) for a, b in zip(j1, j2)]).sum(0)
    return full, trace


def test_empirical_ntk_by_jacobian_contraction():
    _same_tree(_ntk_jacobians(jitorch), _ntk_jacobians(torch), tol=1e-4)


def _ntk_vjp_jvp(lib):
    net = _loaded(lib, lib.nn.Linear(4, 3), 1)
    params = {k: v.detach() for k, v in net.named_parameters()}
    x1, x2 = _t(lib, NTK_X1), _t(lib, NTK_X2)

    def fnet_single(params, x):
        return lib.func.functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)

    def ntk(a, b):
        out, vjp_fn = lib.func.vjp(lambda p: fnet_single(p, a), params)

        def ntk_slice(vec):
            return lib.func.jvp(lambda p: fnet_single(p, b), (params,), vjp_fn(vec))[1]
        return lib.func.vmap(ntk_slice)(lib.eye(out.numel(), dtype=out.dtype))
    return lib.func.vmap(lib.func.vmap(ntk, (None, 0)), (0, None))(x1, x2)


def test_empirical_ntk_by_vjp_and_jvp():
    _same_tree(_ntk_vjp_jvp(jitorch), _ntk_vjp_jvp(torch), tol=1e-4)


def _maml(lib):
    net = _loaded(lib, lib.nn.Sequential(lib.nn.Linear(2, 8), lib.nn.Tanh(), lib.nn.Linear(8, 1)), 3)
    rng = np.random.default_rng(3)
    x, y = _t(lib, rng.standard_normal((6, 2)).astype(np.float32)), _t(lib, rng.standard_normal((6, 1)).astype(
        np.float32))
    params = dict(net.named_parameters())

    def loss(p, xb, yb):
        return lib.nn.functional.mse_loss(lib.func.functional_call(net, p, (xb,)), yb)
    inner = lib.func.grad(loss)(params, x[:3], y[:3])  # stays differentiable: the parameters require grad
    adapted = {k: params[k] - 0.5 * inner[k] for k in params}
    query = loss(adapted, x[3:], y[3:])
    meta_grads = lib.autograd.grad(query, list(params.values()), _t(lib, np.float32(1.7)))
    # the same meta-gradient through grad of grad (the inner step inside the transform)
    detached = {k: v.detach() for k, v in params.items()}

    def adapted_loss(p):
        g = lib.func.grad(loss)(p, x[:3], y[:3])
        return loss({k: p[k] - 0.5 * g[k] for k in p}, x[3:], y[3:])
    return query, meta_grads, lib.func.grad(adapted_loss)(detached)


def test_maml_second_order_meta_gradients():
    _same_tree(_maml(jitorch), _maml(torch), tol=1e-5)


def _tied(lib, tie_weights):
    nn = lib.nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False)
            self.b = self.a

        def forward(self, x):
            return self.b(self.a(x))
    model = Tied()
    with lib.no_grad():
        model.a.weight.copy_(_t(lib, X[:3, :3]))
    w = _t(lib, X[1:4, 1:4]).requires_grad_()
    out = lib.func.functional_call(model, {"b.weight": w}, (_t(lib, X[:2, :3]),), tie_weights=tie_weights)
    return out, lib.autograd.grad(out, w, _t(lib, X[2:4, 2:5]))


@pytest.mark.parametrize("tie_weights", [True, False])
def test_functional_call_through_tied_weights(tie_weights):
    _same_tree(_tied(jitorch, tie_weights), _tied(torch, tie_weights))


def test_jacfwd_refuses_random_draws_unless_randomness_allows_them():
    for lib in (torch, jitorch):
        x = _t(lib, X[0])
        for fn in (lambda v: lib.nn.functional.dropout(v, 0.5) * v, lambda v: lib.randn(5) * v):
            with pytest.raises(RuntimeError, match="called random operation while in randomness error mode"):
                lib.func.jacfwd(fn)(x)
            with pytest.raises(RuntimeError, match="randomness error mode"):
                lib.func.hessian(lambda v: fn(v).sum())(x)
            assert tuple(lib.func.jacfwd(fn, randomness="different")(x).shape) == (5, 5)
    # p=0 dropout draws nothing: allowed in 'error' mode, and the Jacobian is torch's
    _same_tree(jitorch.func.jacfwd(lambda v: jitorch.nn.functional.dropout(v, 0.0) * v)(_t(jitorch, X[0])),
               torch.func.jacfwd(lambda v: torch.nn.functional.dropout(v, 0.0) * v)(_t(torch, X[0])))
