"""MAML on sine regression, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and tasks.

The inner loop adapts a copy of the parameters through ``functional_call`` and ``autograd.grad(create_graph=True)``
(second order) or without the graph (first order); the outer Adam step uses the query losses' gradients. The
``torch.func`` form (``grad`` of an adapted loss, ``vmap`` over tasks) and a Hessian-vector product by double
backward are compared too.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy


def _tasks(count=3, seed=0):
    rng = np.random.default_rng(seed)
    tasks = []
    for _ in range(count):
        amplitude, phase = rng.uniform(0.5, 2), rng.uniform(0, 3)
        support, query = (rng.uniform(-3, 3, (10, 1)).astype(np.float32) for _ in range(2))
        tasks.append((support, (amplitude * np.sin(support + phase)).astype(np.float32),
                      query, (amplitude * np.sin(query + phase)).astype(np.float32)))
    return tasks


def _net(lib):
    lib.manual_seed(0)
    nn = lib.nn
    return nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 32), nn.Softplus(), nn.Linear(32, 1))


def _maml(lib, state, first_order, steps=3, inner_steps=2, inner_lr=0.01):
    F = lib.nn.functional
    model = load_numpy_state(lib, _net(lib), state)
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        outer = 0.0
        for task in _tasks():
            xs, ys, xq, yq = (lib.tensor(a) for a in task)
            fast = dict(model.named_parameters())
            for _ in range(inner_steps):
                loss = F.mse_loss(lib.func.functional_call(model, fast, (xs,)), ys)
                grads = lib.autograd.grad(loss, list(fast.values()), create_graph=not first_order)
                fast = {k: v - inner_lr * g for (k, v), g in zip(fast.items(), grads)}
            outer = outer + F.mse_loss(lib.func.functional_call(model, fast, (xq,)), yq)
        (outer / 3).backward()
        history.append([outer, {k: p.grad for k, p in model.named_parameters()}])
        opt.step()
    params = list(model.parameters())
    loss = model(lib.tensor(_tasks()[0][0])).pow(2).mean()
    grads = lib.autograd.grad(loss, params, create_graph=True)
    hvp = lib.autograd.grad(sum((g * lib.ones_like(g)).sum() for g in grads), params)
    return to_numpy(history), to_numpy(hvp), numpy_state(model)


@pytest.mark.parametrize("first_order", [False, True])
def test_maml_outer_gradients_match_torch(first_order):
    state = numpy_state(_net(torch))
    assert_close_tree(_maml(torch, state, first_order), _maml(jitorch, state, first_order), rtol=1e-5, atol=1e-6)


def _functional_maml(lib, state, inner_lr=0.01):
    F, f = lib.nn.functional, lib.func
    model = load_numpy_state(lib, _net(lib), state)
    params = {k: v.detach() for k, v in model.named_parameters()}
    xs, ys, xq, yq = (lib.tensor(np.stack([t[i] for t in _tasks()])) for i in range(4))

    def inner(p, x, y):
        return F.mse_loss(f.functional_call(model, p, (x,)), y)

    def adapted_loss(p, xs, ys, xq, yq):
        g = f.grad(inner)(p, xs, ys)
        return inner({k: p[k] - inner_lr * g[k] for k in p}, xq, yq)

    per_task = f.vmap(adapted_loss, in_dims=(None, 0, 0, 0, 0))
    meta_grad = f.grad(lambda p: per_task(p, xs, ys, xq, yq).mean())(params)
    return to_numpy([per_task(params, xs, ys, xq, yq), meta_grad])


def test_functional_maml_over_tasks_matches_torch():
    state = numpy_state(_net(torch))
    assert_close_tree(_functional_maml(torch, state), _functional_maml(jitorch, state), rtol=1e-5, atol=1e-6)
