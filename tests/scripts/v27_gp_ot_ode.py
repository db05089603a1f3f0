"""Scientific-ML building blocks: exact Gaussian-process regression (RBF kernel, Cholesky, cholesky_solve,
log marginal likelihood maximized over softplus-constrained hyperparameters with LBFGS), entropic optimal transport
by log-domain Sinkhorn iterations (logsumexp), and a neural ODE integrated with a hand-written RK4 trained through
the solver.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(13)
torch.set_default_dtype(torch.float64)

# ---- GP regression ----
X = torch.from_numpy(np.sort(rng.uniform(-3, 3, 40))).unsqueeze(-1)
Y = torch.sin(2 * X).squeeze(-1) + 0.1 * torch.from_numpy(rng.normal(size=40))
Xs = torch.linspace(-3, 3, 50).unsqueeze(-1)
raw = nn.ParameterDict({name: nn.Parameter(torch.tensor(v)) for name, v in
                        [("lengthscale", 0.0), ("outputscale", 0.0), ("noise", -2.0)]})


def rbf(a, b, ls, os):
    return os * torch.exp(-0.5 * torch.cdist(a / ls, b / ls).pow(2))


def neg_mll():
    ls, os, noise = (F.softplus(raw[k]) for k in ("lengthscale", "outputscale", "noise"))
    K = rbf(X, X, ls, os) + (noise + 1e-6) * torch.eye(len(X))
    L = torch.linalg.cholesky(K)
    alpha = torch.cholesky_solve(Y.unsqueeze(-1), L)
    return (0.5 * Y @ alpha.squeeze(-1) + torch.log(torch.diagonal(L)).sum() + 0.5 * len(X) * math.log(2 * math.pi))


initial = neg_mll().item()
opt = torch.optim.LBFGS(raw.parameters(), lr=0.5, max_iter=30, line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    loss = neg_mll()
    loss.backward()
    return loss


opt.step(closure)
with torch.no_grad():
    ls, os, noise = (F.softplus(raw[k]) for k in ("lengthscale", "outputscale", "noise"))
    K = rbf(X, X, ls, os) + noise * torch.eye(len(X))
    Ks = rbf(Xs, X, ls, os)
    L = torch.linalg.cholesky(K)
    mean = Ks @ torch.cholesky_solve(Y.unsqueeze(-1), L)
    v = torch.linalg.solve_triangular(L, Ks.T, upper=False)
    var = os - (v * v).sum(0)
    _, logdet = torch.linalg.slogdet(K)
print(f"initial_loss={initial:.6f}")
print(f"final_loss={neg_mll().item():.6f}")
print(f"gp_lengthscale={ls.item():.5f}")
print(f"gp_noise={noise.item():.6f}")
print(f"gp_rmse={(mean.squeeze(-1) - torch.sin(2 * Xs).squeeze(-1)).pow(2).mean().sqrt().item():.6f}")
print(f"gp_var_mean={var.mean().item():.6f}")
print(f"gp_logdet={logdet.item():.5f}")
torch.set_default_dtype(torch.float32)

# ---- Sinkhorn optimal transport between two point clouds ----
a_pts = torch.from_numpy(rng.normal(size=(30, 2)).astype(np.float32))
b_pts = torch.from_numpy((rng.normal(size=(40, 2)) + [2.0, 0.0]).astype(np.float32)).requires_grad_(True)


def sinkhorn(x, y, eps=0.1, iters=100):
    C = torch.cdist(x, y, p=2) ** 2
    log_a = torch.full((x.shape[0],), -math.log(x.shape[0]))
    log_b = torch.full((y.shape[0],), -math.log(y.shape[0]))
    f, g = torch.zeros_like(log_a), torch.zeros_like(log_b)
    for _ in range(iters):
        f = -eps * torch.logsumexp((g[None, :] - C) / eps + log_b[None, :], dim=1)
        g = -eps * torch.logsumexp((f[:, None] - C) / eps + log_a[:, None], dim=0)
    P = torch.exp((f[:, None] + g[None, :] - C) / eps + log_a[:, None] + log_b[None, :])
    return (P * C).sum(), P


cost, P = sinkhorn(a_pts, b_pts)
cost.backward()
print(f"ot_cost={cost.item():.5f}")
print(f"ot_row_marginal_err={(P.sum(1) - 1 / 30).abs().max().item():.3e}")
print(f"ot_grad_norm={b_pts.grad.norm().item():.5f}")


# ---- Neural ODE through RK4 ----
class ODEFunc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 32), nn.Softplus(), nn.Linear(32, 2))

    def forward(self, t, y):
        return self.net(y)


def rk4(func, y0, ts):
    ys, y = [y0], y0
    for t0, t1 in zip(ts[:-1], ts[1:]):
        h = t1 - t0
        k1 = func(t0, y)
        k2 = func(t0 + h / 2, y + h / 2 * k1)
        k3 = func(t0 + h / 2, y + h / 2 * k2)
        k4 = func(t1, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ys.append(y)
    return torch.stack(ys)


true_A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
ts = torch.linspace(0, 2, 21)
y0 = torch.tensor([[2.0, 0.0]])
with torch.no_grad():
    true_y = rk4(lambda t, y: (y ** 3) @ true_A, y0, ts)
func = ODEFunc()
g = np.random.default_rng(0)
with torch.no_grad():
    for p in func.parameters():
        p.copy_(torch.from_numpy(g.normal(scale=0.1, size=tuple(p.shape)).astype(np.float32)))
opt = torch.optim.RMSprop(func.parameters(), lr=5e-3)
for it in range(30):
    opt.zero_grad()
    pred = rk4(func, y0, ts)
    loss = (pred - true_y).abs().mean()
    loss.backward()
    opt.step()
print(f"ode_loss={loss.item():.6f}")
print(f"ode_endpoint={pred[-1].sum().item():.5f}")
