"""Mixture-density-network research code, written once against ``lib`` and run with torch and jitorch:
``MixtureSameFamily`` over ``Categorical`` with ``Normal`` and ``Independent(Normal)`` components, log-prob gradients,
a hand-written mixture log-likelihood through ``logsumexp``, ``softplus`` and ``elu + 1`` scales."""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

K, D = 5, 2


def make_mdn(lib):
    nn, F = lib.nn, lib.nn.functional

    class MDN(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
            self.pi = nn.Linear(32, K)
            self.mu = nn.Linear(32, K * D)
            self.sigma = nn.Linear(32, K * D)

        def forward(self, x):
            h = self.body(x)
            logits = self.pi(h)
            mu = self.mu(h).view(-1, K, D)
            sigma_elu = F.elu(self.sigma(h)).view(-1, K, D) + 1 + 1e-4
            sigma_sp = F.softplus(self.sigma(h), beta=2.0, threshold=5.0).view(-1, K, D) + 1e-4
            return logits, mu, sigma_elu, sigma_sp

    return MDN()


def mdn_nll(lib, logits, mu, sigma_elu, sigma_sp, y):
    d = lib.distributions
    mix = d.MixtureSameFamily(d.Categorical(logits=logits), d.Independent(d.Normal(mu, sigma_elu), 1))
    nll_lib = -mix.log_prob(y).mean()
    # the same likelihood by hand, with the softplus scales
    comp = -0.5 * ((y.unsqueeze(1) - mu) / sigma_sp) ** 2 - lib.log(sigma_sp) - 0.5 * np.log(2 * np.pi)
    log_w = lib.log_softmax(logits, dim=-1)
    nll_hand = -lib.logsumexp(log_w + comp.sum(-1), dim=-1).mean()
    # a univariate mixture on the first coordinate, from probs
    uni = d.MixtureSameFamily(d.Categorical(probs=lib.softmax(logits, -1)), d.Normal(mu[..., 0], sigma_sp[..., 0]))
    nll_uni = -uni.log_prob(y[:, 0]).mean()
    return nll_lib, nll_hand, nll_uni, mix


def data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    y = np.concatenate([np.sin(3 * x) + 0.1 * rng.normal(size=(n, 1)),
                        np.where(rng.uniform(size=(n, 1)) < 0.5, x, -x) + 0.05 * rng.normal(size=(n, 1))], 1)
    return x, y.astype(np.float32)


def mdn_run(lib, ref, steps=4):
    model = make_mdn(lib)
    copy_weights(ref, model)
    x, y = (lib.tensor(a) for a in data())
    opt = lib.optim.Adam(model.parameters(), lr=3e-3)
    out = {"losses": []}
    for _ in range(steps):
        opt.zero_grad()
        nll_lib, nll_hand, nll_uni, mix = mdn_nll(lib, *model(x), y)
        (nll_lib + nll_hand + 0.5 * nll_uni).backward()
        out["losses"].append(lib.stack([nll_lib, nll_hand, nll_uni]).detach())
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        opt.step()
    with lib.no_grad():
        _, _, _, mix = mdn_nll(lib, *model(x), y)
        out["moments"] = [mix.mean, mix.variance, mix.mixture_distribution.probs,
                          mix.component_distribution.base_dist.scale]
        out["shapes"] = [tuple(mix.batch_shape), tuple(mix.event_shape)]
        out["cdf"] = lib.distributions.MixtureSameFamily(
            mix.mixture_distribution, lib.distributions.Normal(mix.component_distribution.base_dist.loc[..., 0],
                                                               mix.component_distribution.base_dist.scale[..., 0])
        ).cdf(y[:, 0])
        lib.manual_seed(0)
        out["sample_shape"] = tuple(mix.sample((3,)).shape)
    out["params"] = list(model.parameters())
    return out


def test_mdn_training_matches_torch():
    torch.manual_seed(0)
    ref = make_mdn(torch)
    th, jt = mdn_run(torch, ref), mdn_run(jitorch, ref)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-5, what="mdn")


def test_mixture_log_prob_gradients_wrt_all_parameters():
    rng = np.random.default_rng(1)
    logits_np = rng.normal(size=(6, K)).astype(np.float32)
    mu_np = rng.normal(size=(6, K, D)).astype(np.float32)
    s_np = rng.normal(size=(6, K, D)).astype(np.float32)
    y_np = rng.normal(size=(6, D)).astype(np.float32)
    g_np = rng.normal(size=6).astype(np.float32)
    res = []
    for lib in LIBS:
        F, d = lib.nn.functional, lib.distributions
        logits, mu, s = (lib.tensor(a, requires_grad=True) for a in (logits_np, mu_np, s_np))
        y = lib.tensor(y_np, requires_grad=True)
        scale = F.elu(s) + 1
        mix = d.MixtureSameFamily(d.Categorical(logits=logits), d.Independent(d.Normal(mu, scale), 1))
        lp = mix.log_prob(y)
        lp.backward(lib.tensor(g_np))
        post = mix._pad(y) if hasattr(mix, "_pad") else None
        res.append([lp, logits.grad, mu.grad, s.grad, y.grad, F.softplus(lib.tensor(s_np), beta=0.5),
                    lib.logsumexp(lib.tensor([[-np.inf, -np.inf], [0.0, -np.inf]]), 1), tuple(post.shape)])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="mixture grads")
