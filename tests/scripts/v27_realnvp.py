"""RealNVP normalizing flow on 2-D two-moons (affine coupling layers with alternating masks) trained by maximum
likelihood against a MultivariateNormal base, plus the same density through torch.distributions'
TransformedDistribution with an AffineTransform / ComposeTransform and an Independent Normal.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import math

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import (AffineTransform, ComposeTransform, Independent, MultivariateNormal, Normal,
                                 TanhTransform, TransformedDistribution)

rng = np.random.default_rng(2)


def two_moons(n):
    t = rng.uniform(0, math.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(t), 1 - np.cos(t))
    y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    return torch.from_numpy((np.stack([x, y], 1) + rng.normal(scale=0.08, size=(n, 2))).astype(np.float32))


class Coupling(nn.Module):
    def __init__(self, mask, hidden=32):
        super().__init__()
        self.register_buffer("mask", mask)
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 4))
        self.scale = nn.Parameter(torch.zeros(2))

    def forward(self, x):  # data -> latent, with log|det J|
        xm = x * self.mask
        s, t = self.net(xm).chunk(2, dim=-1)
        s = self.scale * torch.tanh(s) * (1 - self.mask)
        t = t * (1 - self.mask)
        z = xm + (1 - self.mask) * (x * torch.exp(s) + t)
        return z, s.sum(-1)

    def inverse(self, z):
        zm = z * self.mask
        s, t = self.net(zm).chunk(2, dim=-1)
        s = self.scale * torch.tanh(s) * (1 - self.mask)
        t = t * (1 - self.mask)
        return zm + (1 - self.mask) * (z - t) * torch.exp(-s)


class RealNVP(nn.Module):
    def __init__(self, n_layers=4):
        super().__init__()
        masks = [torch.tensor([1.0, 0.0]) if i % 2 == 0 else torch.tensor([0.0, 1.0]) for i in range(n_layers)]
        self.layers = nn.ModuleList(Coupling(m) for m in masks)
        self.base = MultivariateNormal(torch.zeros(2), covariance_matrix=torch.eye(2))

    def log_prob(self, x):
        log_det = torch.zeros(x.shape[0])
        for layer in self.layers:
            x, ld = layer(x)
            log_det = log_det + ld
        return self.base.log_prob(x) + log_det

    def inverse(self, z):
        for layer in reversed(self.layers):
            z = layer.inverse(z)
        return z


data = two_moons(256)
flow = RealNVP()
g = np.random.default_rng(0)
with torch.no_grad():
    for name, p in flow.named_parameters():
        if name.endswith("scale"):
            p.fill_(1.0)
        else:
            p.copy_(torch.from_numpy(g.normal(scale=0.2, size=tuple(p.shape)).astype(np.float32)))
optimizer = torch.optim.Adam(flow.parameters(), lr=5e-3)
with torch.no_grad():
    initial = -flow.log_prob(data).mean().item()
for step in range(60):
    batch = data[(step * 64) % 256:(step * 64) % 256 + 64]
    loss = -flow.log_prob(batch).mean()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(flow.parameters(), 5.0)
    optimizer.step()
with torch.no_grad():
    final = -flow.log_prob(data).mean().item()
    z = torch.from_numpy(np.random.default_rng(1).normal(size=(5, 2)).astype(np.float32))
    roundtrip = (flow.layers[0](flow.layers[0].inverse(z))[0] - z).abs().max().item()
    x_gen = flow.inverse(z)
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"roundtrip_err_small={float(roundtrip < 1e-5):.1f}")
print(f"sample_mean={x_gen.mean().item():.5f}")

# Gaussian fitted by moments as a TransformedDistribution: N(0, I) pushed through x = mu + L z.
mu = data.mean(0)
cov = torch.cov(data.T)
L = torch.linalg.cholesky(cov)
mvn = MultivariateNormal(mu, scale_tril=L)
print(f"mvn_nll={-mvn.log_prob(data).mean().item():.6f}")
print(f"mvn_entropy={mvn.entropy().item():.6f}")
std = data.std(0)
base = Independent(Normal(torch.zeros(2), torch.ones(2)), 1)
diag = TransformedDistribution(base, ComposeTransform([AffineTransform(loc=mu, scale=std)]))
print(f"diag_nll={-diag.log_prob(data).mean().item():.6f}")
print(f"diag_batch_event={len(diag.batch_shape)}{len(diag.event_shape)}")
squashed = TransformedDistribution(Normal(torch.tensor(0.3), torch.tensor(0.8)), [TanhTransform(cache_size=1)])
u = torch.linspace(-0.9, 0.9, 7)
print(f"tanh_normal_logprob_sum={squashed.log_prob(u).sum().item():.6f}")
print(f"kl_mvn_diag={torch.distributions.kl_divergence(mvn, MultivariateNormal(mu, torch.diag(std ** 2))).item():.6f}")
