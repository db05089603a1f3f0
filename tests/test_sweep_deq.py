"""Implicit-layer (deep equilibrium) research code, written once against ``lib`` and run with torch and jitorch: a
fixed point found under ``no_grad``, one differentiable step re-attached to the graph, and a backward hook on its output
that solves the adjoint fixed point with ``autograd.grad(..., grad_outputs=..., retain_graph=True)``."""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

DIM, IN = 12, 6


def make_deq(lib):
    nn = lib.nn

    class Cell(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Linear(DIM, DIM, bias=False)
            self.u = nn.Linear(IN, DIM)
            self.norm = nn.LayerNorm(DIM)

        def forward(self, z, x):
            return self.norm(lib.tanh(self.w(z) + self.u(x)))

    class DEQ(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = Cell()
            with lib.no_grad():
                self.f.w.weight.mul_(0.3)  # a contraction, so both fixed points converge
            self.head = nn.Linear(DIM, 3)
            self.hook_calls = 0
            self.adjoint_residuals = []

        def solve(self, fn, z0, iters=40):
            z = z0
            for _ in range(iters):
                z = fn(z)
            return z

        def forward(self, x):
            with lib.no_grad():
                z_star = self.solve(lambda z: self.f(z, x), lib.zeros(x.shape[0], DIM))
            z = self.f(z_star, x)  # one step with a graph to the parameters
            if z.requires_grad:
                z0 = z.clone().detach().requires_grad_()
                f0 = self.f(z0, x)

                def backward_hook(grad):
                    self.hook_calls += 1
                    # g = J^T g + grad, by iteration
                    def step(g):
                        return lib.autograd.grad(f0, z0, grad_outputs=g, retain_graph=True)[0] + grad
                    g = self.solve(step, grad, iters=30)
                    self.adjoint_residuals.append((step(g) - g).norm())
                    return g

                z.register_hook(backward_hook)
            return self.head(z), z

    return DEQ()


def deq_run(lib, ref, steps=3):
    model = make_deq(lib)
    copy_weights(ref, model)
    rng = np.random.default_rng(0)
    x, y = lib.tensor(rng.normal(size=(10, IN)).astype(np.float32)), lib.tensor(rng.integers(0, 3, 10))
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    out = {"losses": [], "z": []}
    for _ in range(steps):
        opt.zero_grad()
        logits, z = model(x)
        loss = lib.nn.functional.cross_entropy(logits, y)
        loss.backward()
        out["losses"].append(loss.detach())
        out["z"].append(z.detach())
        out["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
    out["hook_calls"] = model.hook_calls
    out["adjoint_ok"] = all(float(r) < 1e-4 for r in model.adjoint_residuals)
    with lib.no_grad():
        out["eval"] = model(x)[0]
    out["params"] = list(model.parameters())
    return out


def test_deq_with_implicit_backward_matches_torch():
    torch.manual_seed(0)
    ref = make_deq(torch)
    th, jt = deq_run(torch, ref), deq_run(jitorch, ref)
    assert th["adjoint_ok"] and th["hook_calls"] == 3
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-5, what="deq")


def test_vector_jacobian_products_with_grad_outputs_and_retained_graph():
    rng = np.random.default_rng(1)
    w_np = (0.4 * rng.normal(size=(4, 4))).astype(np.float32)
    z_np, v_np, x_np = (rng.normal(size=(3, 4)).astype(np.float32) for _ in range(3))
    res = []
    for lib in LIBS:
        w = lib.tensor(w_np, requires_grad=True)
        z = lib.tensor(z_np, requires_grad=True)
        x = lib.tensor(x_np)
        f = lib.tanh(z @ w + x)
        v = lib.tensor(v_np)
        g1, gw = lib.autograd.grad(f, (z, w), grad_outputs=v, retain_graph=True)
        g2 = lib.autograd.grad([f, f.sum(1)], z, grad_outputs=[v, lib.ones(3)], retain_graph=True)[0]
        seen = []
        h = f.register_hook(lambda g: seen.append(g.clone()) or g * 2)
        (gz,) = lib.autograd.grad(f, z, grad_outputs=v, retain_graph=True)
        h.remove()
        (gz_plain,) = lib.autograd.grad(f, z, grad_outputs=v, create_graph=True)
        hvp = lib.autograd.grad((gz_plain * v).sum(), w, retain_graph=True)[0]
        unused = lib.zeros(2, requires_grad=True)
        _, none, zeros = lib.autograd.grad((gz_plain * v).sum(), (w, unused, unused), allow_unused=True,
                                           materialize_grads=True)
        res.append([g1, gw, g2, gz, seen[0], gz_plain, hvp, none, zeros])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="vjp")
