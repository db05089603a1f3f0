"""Normalizing-flow research code, written once against ``lib`` and run with torch and jitorch: RealNVP coupling
layers with masks trained by maximum likelihood, ``torch.distributions`` (Normal, MultivariateNormal with
``scale_tril``, Independent, TransformedDistribution with AffineTransform), log-det-Jacobians, ``slogdet``,
``solve_triangular`` and ``logsumexp``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

DIM = 4


def make_flow(lib, n_layers=4, hidden=16):
    nn = lib.nn

    class Coupling(nn.Module):
        def __init__(self, mask):
            super().__init__()
            self.register_buffer("mask", mask)
            self.s = nn.Sequential(nn.Linear(DIM, hidden), nn.Tanh(), nn.Linear(hidden, DIM), nn.Tanh())
            self.t = nn.Sequential(nn.Linear(DIM, hidden), nn.ReLU(), nn.Linear(hidden, DIM))

        def forward(self, x):  # data -> latent
            xm = x * self.mask
            s = self.s(xm) * (1 - self.mask)
            t = self.t(xm) * (1 - self.mask)
            z = xm + (1 - self.mask) * (x - t) * lib.exp(-s)
            return z, -s.sum(dim=1)

        def inverse(self, z):
            zm = z * self.mask
            s = self.s(zm) * (1 - self.mask)
            t = self.t(zm) * (1 - self.mask)
            return zm + (1 - self.mask) * (z * lib.exp(s) + t)

    class RealNVP(nn.Module):
        def __init__(self):
            super().__init__()
            masks = [lib.tensor([(i + k) % 2 for i in range(DIM)], dtype=lib.float32) for k in range(n_layers)]
            self.layers = nn.ModuleList([Coupling(m) for m in masks])
            self.loc = nn.Parameter(lib.zeros(DIM))
            self.log_scale = nn.Parameter(lib.zeros(DIM))

        def base(self):
            normal = lib.distributions.Normal(self.loc, self.log_scale.exp())
            return lib.distributions.Independent(normal, 1)

        def log_prob(self, x):
            log_det = lib.zeros(x.shape[0])
            for layer in self.layers:
                x, ld = layer(x)
                log_det = log_det + ld
            return self.base().log_prob(x) + log_det

        def sample_from(self, z):
            for layer in reversed(self.layers):
                z = layer.inverse(z)
            return z

    return RealNVP()


def two_moons(n, seed):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, np.pi, n)
    top = rng.uniform(size=n) < 0.5
    x = np.where(top, np.cos(t), 1 - np.cos(t))
    y = np.where(top, np.sin(t), 0.5 - np.sin(t))
    pts = np.stack([x, y, x * y, x - y], 1) + 0.05 * rng.normal(size=(n, DIM))
    return pts.astype(np.float32)


def flow_run(lib, state=None, steps=4):
    data = lib.tensor(two_moons(64, 0))
    z_np = np.random.default_rng(1).normal(size=(8, DIM)).astype(np.float32)
    model = make_flow(lib)
    if state is not None:
        copy_weights(state, model)
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    out = {"nll": []}
    for _ in range(steps):
        opt.zero_grad()
        nll = -model.log_prob(data).mean()
        nll.backward()
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        opt.step()
        out["nll"].append(nll.item())
    with lib.no_grad():
        z = lib.tensor(z_np)
        x = model.sample_from(z)
        out["roundtrip"] = [x, model.layers[0](x)[0], model.log_prob(x)]
    out["params"] = list(model.parameters())
    return out


def test_realnvp_training_matches_torch():
    torch.manual_seed(0)
    reference = make_flow(torch)
    th = flow_run(torch, state=reference)
    jt = flow_run(jitorch, state=reference)
    params = th.pop("params"), jt.pop("params")
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-6, what="realnvp")
    # Adam divides by sqrt(v): a weight whose gradient is rounding-level small moves by up to lr in either library
    assert_runs_match(*params, rtol=1e-5, atol=1e-5, what="realnvp params")


def test_distributions_and_linear_algebra_of_a_gaussian_flow():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(DIM, DIM)).astype(np.float32)
    cov = (a @ a.T + DIM * np.eye(DIM)).astype(np.float32)
    loc_np = rng.normal(size=DIM).astype(np.float32)
    x_np = rng.normal(size=(5, DIM)).astype(np.float32)
    res = []
    for lib in LIBS:
        d = lib.distributions
        loc = lib.tensor(loc_np, requires_grad=True)
        chol = lib.linalg.cholesky(lib.tensor(cov))
        tril = chol.clone().requires_grad_(True)
        mvn = d.MultivariateNormal(loc, scale_tril=tril)
        x = lib.tensor(x_np)
        lp = mvn.log_prob(x)
        # the same density by hand: triangular solve and slogdet
        diff = (x - loc).T
        sol = lib.linalg.solve_triangular(tril, diff, upper=False)
        sign, logabs = lib.linalg.slogdet(tril @ tril.T)
        by_hand = -0.5 * (sol ** 2).sum(0) - 0.5 * logabs - 0.5 * DIM * np.log(2 * np.pi)
        affine = d.TransformedDistribution(d.Independent(d.Normal(lib.zeros(DIM), lib.ones(DIM)), 1),
                                           [d.transforms.AffineTransform(loc, tril.diagonal())])
        lp_affine = affine.log_prob(x)
        mixture = lib.logsumexp(lib.stack([lp, lp_affine, by_hand]) + lib.log(lib.tensor(1 / 3)), dim=0)
        total = mixture.sum() + mvn.entropy() + lp.sum()
        total.backward()
        res.append([lp, by_hand, sign, lp_affine, mixture, mvn.covariance_matrix, mvn.precision_matrix,
                    loc.grad, tril.grad, mvn.mean])
    assert_runs_match(*res, rtol=1e-5, atol=1e-5, what="gaussian flow")


@pytest.mark.parametrize("event_dims", [0, 1])
def test_transformed_distribution_log_prob_and_sampling_shapes(event_dims):
    rng = np.random.default_rng(5)
    y_np = rng.normal(size=(3, 2, DIM)).astype(np.float32)
    res = []
    for lib in LIBS:
        d = lib.distributions
        scale = lib.tensor(np.linspace(0.5, 2.0, DIM).astype(np.float32), requires_grad=True)
        base = d.Normal(lib.zeros(DIM), lib.ones(DIM))
        if event_dims:
            base = d.Independent(base, 1)
        flow = d.TransformedDistribution(base, [d.transforms.AffineTransform(1.0, scale, event_dim=event_dims),
                                                d.transforms.TanhTransform(cache_size=1)])
        y = lib.tensor(np.tanh(y_np))
        lp = flow.log_prob(y)
        lp.sum().backward()
        lib.manual_seed(0)
        res.append([lp, scale.grad, tuple(flow.batch_shape), tuple(flow.event_shape),
                    tuple(flow.rsample((7,)).shape)])
    assert_runs_match(*res, rtol=1e-5, atol=1e-5, what="transformed")
