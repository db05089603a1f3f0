"""Exact Gaussian-process regression trained by maximising the marginal likelihood (after the GPyTorch "simple
GP regression" tutorial and classic hand-written GP code): an RBF + periodic kernel with positive hyperparameters
through softplus/log-exp, the Cholesky factor (torch.linalg.cholesky with jitter), alpha via torch.cholesky_solve,
log-determinant from the diagonal of L, the predictive mean/variance through torch.linalg.solve_triangular,
torch.cdist for distances, Adam on the hyperparameters, MultivariateNormal(scale_tril=...) log_prob as a check,
and a Nyström approximation with torch.linalg.eigh / pinv.

Data come from NumPy; training is deterministic (float64), so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import MultivariateNormal


class ExactGP(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))
        self.raw_outputscale = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))
        self.raw_period = nn.Parameter(torch.tensor(math.log(math.e - 1), dtype=torch.float64))
        self.raw_per_lengthscale = nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
        self.log_noise = nn.Parameter(torch.tensor(-2.0, dtype=torch.float64))
        self.mean_const = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def kernel(self, x1, x2):
        ls, os_ = F.softplus(self.raw_lengthscale), F.softplus(self.raw_outputscale)
        dist = torch.cdist(x1 / ls, x2 / ls, p=2.0)
        rbf = torch.exp(-0.5 * dist.pow(2))
        period, pls = F.softplus(self.raw_period), F.softplus(self.raw_per_lengthscale)
        diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs().sum(-1)
        periodic = torch.exp(-2.0 * torch.sin(math.pi * diff / period).pow(2) / pls.pow(2))
        return os_ * rbf + 0.5 * periodic

    def neg_mll(self, x, y):
        n = x.shape[0]
        K = self.kernel(x, x) + (self.log_noise.exp() + 1e-6) * torch.eye(n, dtype=x.dtype)
        L = torch.linalg.cholesky(K)
        r = (y - self.mean_const).unsqueeze(-1)
        alpha = torch.cholesky_solve(r, L)
        data_fit = 0.5 * (r * alpha).sum()
        complexity = torch.log(torch.diagonal(L)).sum()
        return (data_fit + complexity + 0.5 * n * math.log(2 * math.pi)) / n, L

    @torch.no_grad()
    def predict(self, x, y, x_star):
        _, L = self.neg_mll(x, y)
        K_s = self.kernel(x, x_star)
        alpha = torch.cholesky_solve((y - self.mean_const).unsqueeze(-1), L)
        mean = self.mean_const + (K_s.transpose(0, 1) @ alpha).squeeze(-1)
        v = torch.linalg.solve_triangular(L, K_s, upper=False)
        var = torch.diagonal(self.kernel(x_star, x_star)) - v.pow(2).sum(0)
        return mean, var.clamp_min(1e-10)


rng = np.random.RandomState(0)
x_np = np.sort(rng.uniform(0, 6, 40))[:, None]
y_np = np.sin(2 * x_np[:, 0]) + 0.3 * np.cos(2 * math.pi * x_np[:, 0]) + 0.1 * rng.randn(40)
x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
x_star = torch.linspace(0, 6, 25, dtype=torch.float64).unsqueeze(-1)
y_star = torch.sin(2 * x_star[:, 0]) + 0.3 * torch.cos(2 * math.pi * x_star[:, 0])

gp = ExactGP()
opt = torch.optim.Adam(gp.parameters(), lr=0.05)
losses = []
for it in range(60):
    opt.zero_grad()
    loss, L = gp.neg_mll(x, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
mean, var = gp.predict(x, y, x_star)
with torch.no_grad():
    _, L = gp.neg_mll(x, y)
    mvn = MultivariateNormal(gp.mean_const.expand(40), scale_tril=L)
    mvn_nll = -mvn.log_prob(y).item() / 40
    K = L @ L.T
    evals, evecs = torch.linalg.eigh(K)
    m = 10  # Nyström with 10 inducing points
    idx = torch.arange(0, 40, 4)
    K_nm, K_mm = K[:, idx], K[idx][:, idx]
    nystrom = K_nm @ torch.linalg.pinv(K_mm, hermitian=True) @ K_nm.T
    sign, logdet = torch.linalg.slogdet(K)
print(f"initial_loss={losses[0]:.8f}")
print(f"final_loss={losses[-1]:.8f}")
print(f"mvn_nll={mvn_nll:.8f}")
print(f"noise={gp.log_noise.exp().item():.8f}")
print(f"lengthscale={F.softplus(gp.raw_lengthscale).item():.8f}")
print(f"period={F.softplus(gp.raw_period).item():.8f}")
print(f"rmse={(mean - y_star).pow(2).mean().sqrt().item():.8f}")
print(f"mean_var={var.mean().item():.8f}")
print(f"top_eig={evals[-1].item():.8f}")
print(f"logdet={logdet.item():.8f}")
print(f"nystrom_err={(K - nystrom).norm().item() / K.norm().item():.8f}")
