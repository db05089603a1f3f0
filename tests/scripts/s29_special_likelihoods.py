"""Statistical likelihoods written with torch.special and torch.lgamma, as count-data / survival / circular models
in research code do (after scVI's negative-binomial and ZINB losses, DeepHit / Weibull-AFT survival code and
von Mises mixture code): a ZINB log-likelihood with lgamma / softplus / logsumexp-free log1p(exp) forms, a Weibull
survival model with censoring, a Student-t regression with torch.special.gammaln / digamma-based gradients, the
von Mises normaliser via torch.special.i0e, probit links via torch.special.ndtr / ndtri / log_ndtr, entropies with
special.entr / xlogy / xlog1py, logit / expit, multigammaln for a Wishart term, and polygamma for a Fisher scale.

Everything is float64, data from NumPy, weights from torch.manual_seed: metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import special

rng = np.random.RandomState(0)
n = 300
x = torch.tensor(rng.randn(n, 3))
mu_true = np.exp(1 + 0.5 * x[:, 0].numpy())
counts = rng.negative_binomial(3, 3 / (3 + mu_true)) * (rng.rand(n) > 0.2)
counts = torch.tensor(counts, dtype=torch.float64)


def zinb_log_prob(y, mu, theta, pi_logits, eps=1e-8):
    softplus_pi = F.softplus(-pi_logits)
    log_theta_eps = torch.log(theta + eps)
    log_theta_mu_eps = torch.log(theta + mu + eps)
    pi_theta_log = -pi_logits + theta * (log_theta_eps - log_theta_mu_eps)
    case_zero = F.softplus(pi_theta_log) - softplus_pi
    mul_case_zero = (y < eps).double() * case_zero
    case_non_zero = (-softplus_pi + pi_theta_log + y * (torch.log(mu + eps) - log_theta_mu_eps)
                     + torch.lgamma(y + theta) - torch.lgamma(theta) - torch.lgamma(y + 1))
    return mul_case_zero + (y > eps).double() * case_non_zero


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2)).double()
log_theta = nn.Parameter(torch.zeros(1, dtype=torch.float64))
opt = torch.optim.Adam(list(net.parameters()) + [log_theta], lr=0.02)
losses = []
for step in range(60):
    out = net(x)
    nll = -zinb_log_prob(counts, out[:, 0].exp(), log_theta.exp(), out[:, 1]).mean()
    opt.zero_grad()
    nll.backward()
    opt.step()
    losses.append(nll.item())

# Weibull AFT with right censoring.
t = torch.tensor(rng.weibull(1.5, n) * np.exp(0.3 * x[:, 1].numpy()))
event = torch.tensor(rng.rand(n) < 0.7, dtype=torch.float64)
beta = torch.zeros(3, dtype=torch.float64, requires_grad=True)
log_k = torch.zeros((), dtype=torch.float64, requires_grad=True)
opt2 = torch.optim.LBFGS([beta, log_k], lr=1, max_iter=50, line_search_fn="strong_wolfe")


def weibull_nll():
    opt2.zero_grad()
    k, lam = log_k.exp(), (x @ beta).exp()
    z = (t / lam) ** k
    loss = -(event * (torch.log(k) - torch.log(lam) + (k - 1) * torch.log(t / lam)) - z).mean()
    loss.backward()
    return loss


weibull_loss = opt2.step(weibull_nll).item()

# Student-t, von Mises, probit, entropies and assorted special functions.
nu = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
r = torch.tensor(rng.standard_t(4, 200))
t_lp = (special.gammaln((nu + 1) / 2) - special.gammaln(nu / 2) - 0.5 * torch.log(nu * math.pi)
        - (nu + 1) / 2 * torch.log1p(r ** 2 / nu)).sum()
t_lp.backward()
kappa = torch.tensor([0.5, 2.0, 20.0, 200.0], dtype=torch.float64)
vm_lognorm = math.log(2 * math.pi) + torch.log(special.i0e(kappa)) + kappa
p = torch.tensor([1e-6, 0.01, 0.3, 0.5, 0.99], dtype=torch.float64)
probit = special.ndtri(p)
roundtrip = (special.ndtr(probit) - p).abs().max()
log_tail = special.log_ndtr(torch.tensor([-30.0, -5.0, 0.0, 3.0], dtype=torch.float64))
q = torch.softmax(torch.tensor(rng.randn(5, 4)), -1)
ent = special.entr(q).sum(-1)
xl = special.xlogy(q, q).sum() + special.xlog1py(q, -q).sum()
print(f"initial_loss={losses[0]:.8f}")
print(f"final_loss={losses[-1]:.8f}")
print(f"theta={log_theta.exp().item():.8f}")
print(f"weibull_loss={weibull_loss:.8f}")
print(f"weibull_k={log_k.exp().item():.8f}")
print(f"t_lp={t_lp.item():.8f}")
print(f"nu_grad={nu.grad.item():.8f}")
print(f"vm_lognorm_sum={vm_lognorm.sum().item():.8f}")
print(f"probit_sum={probit.sum().item():.8f}")
print(f"probit_roundtrip_ok={float(roundtrip.item() < 1e-12)}")
print(f"log_tail_sum={log_tail.sum().item():.8f}")
print(f"entropy_sum={ent.sum().item():.8f}")
print(f"xlogy_sum={xl.item():.8f}")
print(f"logit_expit={special.expit(special.logit(p, eps=1e-3)).sum().item():.8f}")
print(f"multigammaln={special.multigammaln(torch.tensor([3.5, 7.0], dtype=torch.float64), 3).sum().item():.8f}")
print(f"trigamma={special.polygamma(1, torch.tensor([0.5, 4.0], dtype=torch.float64)).sum().item():.8f}")
print(f"digamma={special.digamma(torch.tensor([0.5, 4.0], dtype=torch.float64)).sum().item():.8f}")
print(f"i1e={special.i1e(kappa).sum().item():.8f}")
print(f"erfcx={special.erfcx(torch.tensor([-1.0, 0.0, 5.0, 30.0], dtype=torch.float64)).sum().item():.8f}")
print(f"sinc={special.sinc(torch.linspace(-2, 2, 9, dtype=torch.float64)).sum().item():.8f}")
