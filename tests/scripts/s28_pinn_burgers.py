"""A physics-informed neural network for the viscous Burgers equation (after maziarraissi/PINNs and the
pytorch ports of it): collocation points with requires_grad_, u_t, u_x and u_xx by torch.autograd.grad with
create_graph=True and grad_outputs=torch.ones_like, Xavier-initialised tanh MLP with input normalisation from
registered buffers, Adam warm-up then LBFGS with strong Wolfe line search, plus a Laplacian via
torch.func.hessian / vmap for a 2-D Poisson residual as a cross-check.

Points and weights come from NumPy; training is deterministic, so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
from torch.func import hessian, vmap


class PINN(nn.Module):
    def __init__(self, layers, lb, ub):
        super().__init__()
        self.register_buffer("lb", torch.tensor(lb, dtype=torch.float32))
        self.register_buffer("ub", torch.tensor(ub, dtype=torch.float32))
        mods = []
        for i in range(len(layers) - 2):
            mods += [nn.Linear(layers[i], layers[i + 1]), nn.Tanh()]
        mods.append(nn.Linear(layers[-2], layers[-1]))
        self.net = nn.Sequential(*mods)

    def forward(self, x, t):
        h = torch.cat([x, t], dim=1)
        h = 2.0 * (h - self.lb) / (self.ub - self.lb) - 1.0
        return self.net(h)


def residual(model, x, t, nu):
    u = model(x, t)
    u_t = torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u), retain_graph=True, create_graph=True)[0]
    u_x = torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), retain_graph=True, create_graph=True)[0]
    u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), retain_graph=True, create_graph=True)[0]
    return u_t + u * u_x - nu * u_xx


rng = np.random.RandomState(0)
nu = 0.01 / math.pi
model = PINN([2, 16, 16, 16, 1], lb=[-1.0, 0.0], ub=[1.0, 1.0])
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, nn.Linear):
            fan_in, fan_out = m.in_features, m.out_features
            std = math.sqrt(2.0 / (fan_in + fan_out))  # Xavier normal, drawn by NumPy
            m.weight.copy_(torch.from_numpy((rng.randn(fan_out, fan_in) * std).astype(np.float32)))
            nn.init.zeros_(m.bias)
x_f = torch.from_numpy(rng.uniform(-1, 1, (200, 1)).astype(np.float32)).requires_grad_(True)
t_f = torch.from_numpy(rng.uniform(0, 1, (200, 1)).astype(np.float32)).requires_grad_(True)
x0 = torch.linspace(-1, 1, 40).unsqueeze(1)
t0 = torch.zeros_like(x0)
u0 = -torch.sin(math.pi * x0)
tb = torch.from_numpy(rng.uniform(0, 1, (20, 1)).astype(np.float32))
xb = torch.cat([-torch.ones(10, 1), torch.ones(10, 1)])


def loss_fn():
    f = residual(model, x_f, t_f, nu)
    mse_u = (model(x0, t0) - u0).pow(2).mean() + model(xb, tb).pow(2).mean()
    return mse_u + f.pow(2).mean(), mse_u, f.pow(2).mean()


adam = torch.optim.Adam(model.parameters(), lr=5e-3)
history = []
for it in range(40):
    adam.zero_grad()
    loss, mse_u, mse_f = loss_fn()
    loss.backward()
    adam.step()
    history.append(loss.item())
lbfgs = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=15, history_size=20, tolerance_grad=1e-9,
                          tolerance_change=1e-12, line_search_fn="strong_wolfe")


def closure():
    lbfgs.zero_grad()
    loss, _, _ = loss_fn()
    loss.backward()
    return loss


lbfgs.step(closure)
final, mse_u, mse_f = loss_fn()


def poisson_u(p):
    u_net = model(p[0:1].unsqueeze(0), p[1:2].unsqueeze(0)).squeeze()  # traced through vmap/hessian, weighted 0
    return torch.sin(math.pi * p[0]) * torch.sin(math.pi * p[1]) + u_net * 0


pts = torch.from_numpy(rng.uniform(0, 1, (6, 2)).astype(np.float32))
lap = vmap(lambda p: torch.trace(hessian(poisson_u)(p)))(pts)
exact = -2 * math.pi ** 2 * torch.sin(math.pi * pts[:, 0]) * torch.sin(math.pi * pts[:, 1])
print(f"initial_loss={history[0]:.6f}")
print(f"adam_loss={history[-1]:.6f}")
print(f"final_loss={final.item():.6f}")
print(f"mse_u={mse_u.item():.6f}")
print(f"mse_f={mse_f.item():.6f}")
print(f"lbfgs_evals={lbfgs.state[lbfgs._params[0]]['func_evals']}")
print(f"laplacian_err={(lap - exact).abs().max().item() < 1e-3:d}")
print(f"u_center={model(torch.zeros(1, 1), torch.full((1, 1), 0.5)).item():.6f}")
