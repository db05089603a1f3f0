"""Probabilistic regression with torch.distributions: a mixture density network (after hardmaru's pytorch MDN
notebooks) whose loss is -MixtureSameFamily(Categorical(logits), Independent(Normal(mu, sigma), 1)).log_prob(y),
and a Bayes-by-backprop layer (after Blundell et al. 2015 / the blitz-style BayesianLinear) with weights drawn by
Normal(mu, softplus(rho)).rsample() from fixed eps, an analytic kl_divergence to the prior, plus Beta/Gamma/
LowRankMultivariateNormal/TransformedDistribution log-probs and entropies and distribution-argument validation.

The reparameterisation noise comes from NumPy (fixed draws), so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import (Beta, Categorical, Gamma, Independent, LowRankMultivariateNormal, MixtureSameFamily,
                                 Normal, TransformedDistribution, kl_divergence)
from torch.distributions.transforms import AffineTransform, ExpTransform


class MDN(nn.Module):
    def __init__(self, d_in, hidden, n_gauss, d_out):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_gauss)
        self.mu = nn.Linear(hidden, n_gauss * d_out)
        self.sigma = nn.Linear(hidden, n_gauss * d_out)
        self.n_gauss, self.d_out = n_gauss, d_out

    def forward(self, x):
        h = self.body(x)
        mix = Categorical(logits=self.pi(h))
        mu = self.mu(h).view(-1, self.n_gauss, self.d_out)
        sigma = F.elu(self.sigma(h)).add(1 + 1e-3).view(-1, self.n_gauss, self.d_out)
        return MixtureSameFamily(mix, Independent(Normal(mu, sigma), 1))


class BayesianLinear(nn.Module):
    def __init__(self, d_in, d_out, prior_sigma=1.0):
        super().__init__()
        self.w_mu = nn.Parameter(torch.zeros(d_out, d_in))
        self.w_rho = nn.Parameter(torch.full((d_out, d_in), -3.0))
        self.b_mu = nn.Parameter(torch.zeros(d_out))
        self.b_rho = nn.Parameter(torch.full((d_out,), -3.0))
        self.prior = Normal(torch.tensor(0.0), torch.tensor(prior_sigma))

    def forward(self, x, eps_w, eps_b):
        q_w = Normal(self.w_mu, F.softplus(self.w_rho))
        q_b = Normal(self.b_mu, F.softplus(self.b_rho))
        w = self.w_mu + F.softplus(self.w_rho) * eps_w  # == q_w.rsample() with this eps
        b = self.b_mu + F.softplus(self.b_rho) * eps_b
        self.kl = kl_divergence(q_w, self.prior).sum() + kl_divergence(q_b, self.prior).sum()
        self.log_q = q_w.log_prob(w).sum() + q_b.log_prob(b).sum()
        return F.linear(x, w, b)


rng = np.random.RandomState(0)
n = 200
x_np = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
y_np = np.where(rng.rand(n, 1) < 0.5, np.sin(3 * x_np), -np.sin(3 * x_np) + 0.5) + 0.05 * rng.randn(n, 1)
x, y = torch.from_numpy(x_np), torch.from_numpy(y_np.astype(np.float32))

mdn = MDN(1, 24, 3, 1)
with torch.no_grad():
    for p in mdn.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.5).astype(np.float32)))
opt = torch.optim.Adam(mdn.parameters(), lr=4e-3)
mdn_losses = []
for step in range(60):
    dist = mdn(x)
    loss = -dist.log_prob(y).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    mdn_losses.append(loss.item())
with torch.no_grad():
    dist = mdn(x[:5])
    mix_mean = dist.mean.sum().item()
    mix_var = dist.variance.sum().item()
    cdf_entropy = dist.mixture_distribution.entropy().mean().item()

bnn = nn.ModuleList([BayesianLinear(1, 16), BayesianLinear(16, 1)])
with torch.no_grad():
    bnn[0].w_mu.copy_(torch.from_numpy(rng.randn(16, 1).astype(np.float32)))
    bnn[1].w_mu.copy_(torch.from_numpy((rng.randn(1, 16) * 0.3).astype(np.float32)))
opt = torch.optim.Adam(bnn.parameters(), lr=1e-2)
eps = [torch.from_numpy(rng.randn(40, *s).astype(np.float32)) for s in [(16, 1), (16,), (1, 16), (1,)]]
elbo_losses = []
for step in range(40):
    h = torch.relu(bnn[0](x, eps[0][step], eps[1][step]))
    pred = bnn[1](h, eps[2][step], eps[3][step])
    nll = -Normal(pred, 0.1).log_prob(y).sum()
    kl = sum(layer.kl for layer in bnn)
    loss = (nll + kl / 10) / n
    opt.zero_grad()
    loss.backward()
    opt.step()
    elbo_losses.append(loss.item())

beta, gamma = Beta(torch.tensor([2.0, 0.5]), torch.tensor([3.0, 0.5])), Gamma(torch.tensor(2.0), torch.tensor(1.5))
lowrank = LowRankMultivariateNormal(torch.zeros(3), torch.tensor([[1.0], [0.5], [-0.2]]), torch.tensor([0.5, 1.0, 2.0]))
lognormal = TransformedDistribution(Normal(0.0, 0.5), [ExpTransform(), AffineTransform(1.0, 2.0)])
try:
    Normal(torch.tensor(0.0), torch.tensor(-1.0))
    bad_scale = 0
except ValueError:
    bad_scale = 1
print(f"initial_loss={mdn_losses[0]:.6f}")
print(f"final_loss={mdn_losses[-1]:.6f}")
print(f"mix_mean={mix_mean:.6f}")
print(f"mix_var={mix_var:.6f}")
print(f"mix_entropy={cdf_entropy:.6f}")
print(f"elbo_first={elbo_losses[0]:.6f}")
print(f"elbo_last={elbo_losses[-1]:.6f}")
print(f"kl_last={sum(layer.kl for layer in bnn).item():.5f}")
print(f"beta_lp={beta.log_prob(torch.tensor([0.3, 0.9])).sum().item():.6f}")
print(f"beta_entropy={beta.entropy().sum().item():.6f}")
print(f"gamma_lp={gamma.log_prob(torch.tensor(1.2)).item():.6f}")
print(f"gamma_cdf={gamma.cdf(torch.tensor(1.2)).item():.6f}")
print(f"lowrank_lp={lowrank.log_prob(torch.tensor([0.3, -0.1, 1.0])).item():.6f}")
print(f"lowrank_entropy={lowrank.entropy().item():.6f}")
print(f"lognormal_lp={lognormal.log_prob(torch.tensor(2.5)).item():.6f}")
print(f"kl_beta={kl_divergence(beta, Beta(torch.ones(2), torch.ones(2))).sum().item():.6f}")
print(f"bad_scale_rejected={bad_scale}")
print(f"log2pi={math.log(2 * math.pi):.6f}")
