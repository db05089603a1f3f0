"""WGAN-GP on a 2-D eight-Gaussians ring (after igul222/improved_wgan_training and eriklindernoren's PyTorch-GAN
wgan_gp.py): a critic without normalisation, the gradient penalty on random interpolates computed with
torch.autograd.grad(create_graph=True, retain_graph=True, grad_outputs=torch.ones_like(...)), n_critic critic steps
per generator step, Adam with betas=(0.5, 0.9), LeakyReLU / Softplus activations; plus the DRAGAN variant
(perturbed real points) and R1 regularisation (gradient norm on real data only), all differentiated twice.

Noise, interpolation coefficients and data come from NumPy, weights from torch.manual_seed, so every metric must
match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
from torch import autograd


def eight_gaussians(rng, n):
    centers = np.array([(math.cos(2 * math.pi * k / 8), math.sin(2 * math.pi * k / 8)) for k in range(8)]) * 2
    return torch.tensor(centers[rng.randint(0, 8, n)] + 0.05 * rng.randn(n, 2), dtype=torch.float32)


class Generator(nn.Module):
    def __init__(self, z_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(True), nn.Linear(hidden, hidden), nn.ReLU(True),
                                 nn.Linear(hidden, 2))

    def forward(self, z):
        return self.net(z)


class Critic(nn.Module):
    def __init__(self, hidden=32, act=None):
        super().__init__()
        act = act or nn.LeakyReLU(0.2)
        self.net = nn.Sequential(nn.Linear(2, hidden), act, nn.Linear(hidden, hidden), act, nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).view(-1)


def gradient_penalty(critic, real, fake, alpha):
    alpha = alpha.expand_as(real)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = critic(interpolates)
    grads = autograd.grad(outputs=out, inputs=interpolates, grad_outputs=torch.ones_like(out), create_graph=True,
                          retain_graph=True, only_inputs=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


def r1_penalty(critic, real):
    real = real.detach().requires_grad_()
    (grad,) = autograd.grad(critic(real).sum(), real, create_graph=True)
    return grad.pow(2).sum(1).mean()


rng = np.random.RandomState(0)
torch.manual_seed(0)
G, D = Generator(), Critic()
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.9))
lam, n_critic, batch = 10.0, 3, 64
w_dists, gps, g_losses = [], [], []
for it in range(15):
    for p in D.parameters():
        p.requires_grad_(True)
    for _ in range(n_critic):
        real = eight_gaussians(rng, batch)
        z = torch.tensor(rng.randn(batch, 4), dtype=torch.float32)
        with torch.no_grad():
            fake = G(z)
        d_real, d_fake = D(real).mean(), D(fake).mean()
        gp = gradient_penalty(D, real, fake, torch.tensor(rng.rand(batch, 1), dtype=torch.float32))
        d_loss = d_fake - d_real + lam * gp
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
    w_dists.append((d_real - d_fake).item())
    gps.append(gp.item())
    for p in D.parameters():
        p.requires_grad_(False)
    z = torch.tensor(rng.randn(batch, 4), dtype=torch.float32)
    g_loss = -D(G(z)).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    g_losses.append(g_loss.item())

# DRAGAN: penalty around perturbed real points; and R1 on a Softplus critic (smooth second derivatives).
torch.manual_seed(1)
D2 = Critic(act=nn.Softplus(beta=2.0))
opt2 = torch.optim.RMSprop(D2.parameters(), lr=5e-4)
r1s = []
for it in range(8):
    real = eight_gaussians(rng, batch)
    perturbed = real + 0.5 * real.std() * torch.tensor(rng.rand(batch, 2), dtype=torch.float32)
    dragan = gradient_penalty(D2, real, perturbed, torch.tensor(rng.rand(batch, 1), dtype=torch.float32))
    r1 = r1_penalty(D2, real)
    loss = nn.functional.softplus(-D2(real)).mean() + dragan + 0.5 * r1
    opt2.zero_grad()
    loss.backward()
    opt2.step()
    r1s.append(r1.item())
with torch.no_grad():
    samples = G(torch.tensor(rng.randn(512, 4), dtype=torch.float32))
print(f"w_dist_first={w_dists[0]:.6f}")
print(f"w_dist_last={w_dists[-1]:.6f}")
print(f"gp_last={gps[-1]:.6f}")
print(f"g_loss_last={g_losses[-1]:.6f}")
print(f"r1_first={r1s[0]:.6f}")
print(f"r1_last={r1s[-1]:.6f}")
print(f"sample_radius={samples.norm(dim=1).mean().item():.6f}")
