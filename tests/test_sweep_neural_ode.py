"""Neural ODEs trained by backpropagating through a fixed-step solver, run with ``lib=torch`` and ``lib=jitorch``.

Time-dependent dynamics (an MLP times ``cos(t)``) integrated by RK4 (a Python float step added to a 0-d time tensor)
and by Euler on a ``linspace`` grid with the trajectory stacked; three Adam steps with gradient clipping; then
``autograd.functional`` ``jacobian`` (plain and ``create_graph``/``vectorize``), ``vjp``, ``jvp`` and ``hessian`` of
the dynamics, FFJORD's exact Jacobian trace by ``autograd.grad(create_graph=True)`` with its parameter gradient, and
``func.vmap(func.jacrev(...))`` per-sample Jacobians.
"""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from sweep_helpers import assert_close_tree, copy_weights, to_numpy


def _dynamics(lib):
    nn = lib.nn

    class Dynamics(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 3))

        def forward(self, t, y):
            return self.net(y) * lib.cos(t)
    return Dynamics()


def _rk4(f, lib, y, t0, t1, n):
    h = (t1 - t0) / n
    t = lib.tensor(t0)
    for _ in range(n):
        k1 = f(t, y)
        k2 = f(t + h / 2, y + h / 2 * k1)
        k3 = f(t + h / 2, y + h / 2 * k2)
        k4 = f(t + h, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + h
    return y


def _euler(f, lib, y, n):
    ts = lib.linspace(0, 1, n + 1)
    trajectory = [y]
    for i in range(n):
        y = y + (ts[i + 1] - ts[i]) * f(ts[i], y)
        trajectory.append(y)
    return lib.stack(trajectory)


def _run(lib, start):
    f = _dynamics(lib)
    copy_weights(start, f)
    rng = np.random.default_rng(0)
    y0 = lib.tensor(rng.standard_normal((8, 3)).astype(np.float32))
    target = lib.tensor(rng.standard_normal((8, 3)).astype(np.float32))
    opt = lib.optim.Adam(f.parameters(), lr=1e-2)
    out = {}
    for step in range(3):
        opt.zero_grad()
        trajectory = _euler(f, lib, y0, 5)
        loss = ((_rk4(f, lib, y0, 0.0, 1.0, 10) - target) ** 2).mean() + trajectory.pow(2).mean(dim=(1, 2)).sum() * 0.1
        loss.backward()
        out[f"loss{step}"] = loss.item()
        out[f"grads{step}"] = [p.grad.clone() for p in f.parameters()]
        lib.nn.utils.clip_grad_norm_(f.parameters(), 1.0)
        opt.step()
    out["params"] = [p.detach().clone() for p in f.parameters()]

    def field(y):
        return f(lib.tensor(0.3), y)
    y, v = y0[0].clone(), lib.ones(3)
    F = lib.autograd.functional
    out["jacobian"] = F.jacobian(field, y)
    out["jacobian_vectorized"] = F.jacobian(field, y, create_graph=True, vectorize=True)
    out["vjp"] = list(F.vjp(field, y, v))
    out["jvp"] = list(F.jvp(field, y, v))
    out["hessian"] = F.hessian(lambda y: field(y).sum(), y)
    yb = y0.clone().requires_grad_(True)
    dy = f(lib.tensor(0.5), yb)
    trace = sum(lib.autograd.grad(dy[:, i].sum(), yb, create_graph=True)[0][:, i] for i in range(3))
    out["trace"] = trace
    # The last bias does not reach the trace: allow_unused with materialize_grads gives it zeros.
    out["trace_grads"] = list(lib.autograd.grad(trace.sum(), list(f.parameters()), allow_unused=True,
                                                materialize_grads=True))
    out["per_sample_jacobians"] = lib.func.vmap(lib.func.jacrev(lambda y: f.net(y)))(y0)
    return to_numpy(out)


def test_neural_ode_training_and_jacobians_match_torch():
    torch.manual_seed(0)
    start = _dynamics(torch)
    assert_close_tree(_run(torch, start), _run(jitorch, start), rtol=1e-4, atol=1e-5)
