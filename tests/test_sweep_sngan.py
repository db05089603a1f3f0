"""Spectral-norm GAN research code, written once against ``lib`` and run with torch and jitorch:
``nn.utils.parametrizations.spectral_norm`` (power iterations in train mode, frozen in eval), a conv whose weight is
standardized by ``register_parametrization``, hinge losses, ``Adam(betas=(0, 0.9))`` and a gradient penalty through
``autograd.grad(create_graph=True)``."""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match


def make_gan(lib):
    nn, F = lib.nn, lib.nn.functional
    P = nn.utils.parametrize
    sn = nn.utils.parametrizations.spectral_norm

    class Standardize(nn.Module):
        def forward(self, w):
            mean = w.mean(dim=(1, 2, 3), keepdim=True)
            var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
            return (w - mean) / lib.sqrt(var + 1e-5)

    class G(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4 * 4 * 8)
            self.conv = nn.Conv2d(8, 8, 3, padding=1)
            P.register_parametrization(self.conv, "weight", Standardize())
            self.gn = nn.GroupNorm(2, 8)
            self.out = nn.ConvTranspose2d(8, 1, 4, stride=2, padding=1)

        def forward(self, z):
            h = self.fc(z).view(-1, 8, 4, 4)
            h = F.relu(self.gn(self.conv(h)))
            return lib.tanh(self.out(h))

    class D(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = sn(nn.Conv2d(1, 8, 3, stride=2, padding=1))
            self.c2 = sn(nn.Conv2d(8, 8, 3, padding=1), n_power_iterations=2)
            self.fc = sn(nn.Linear(8 * 4 * 4, 1), eps=1e-6)

        def forward(self, x):
            h = F.leaky_relu(self.c1(x), 0.1)
            h = F.leaky_relu(self.c2(h), 0.1)
            return self.fc(h.flatten(1)).squeeze(1)

    return G(), D()


def copy_gan(ref, lib):
    g, d = make_gan(lib)
    for src, dst in zip(ref, (g, d)):
        dst.load_state_dict({k: lib.tensor(v.detach().numpy().copy()) for k, v in src.state_dict().items()})
    return g, d


def gan_run(lib, ref, steps=3):
    g, d = copy_gan(ref, lib)
    rng = np.random.default_rng(0)
    real = lib.tensor(np.tanh(rng.normal(size=(6, 1, 8, 8))).astype(np.float32))
    zs = [lib.tensor(rng.normal(size=(6, 8)).astype(np.float32)) for _ in range(steps)]
    alpha = lib.tensor(rng.uniform(size=(6, 1, 1, 1)).astype(np.float32))
    opt_g = lib.optim.Adam(g.parameters(), lr=2e-4, betas=(0.0, 0.9))
    opt_d = lib.optim.Adam(d.parameters(), lr=4e-4, betas=(0.0, 0.9))
    F = lib.nn.functional
    out = {"d_loss": [], "g_loss": [], "gp": []}
    for z in zs:
        fake = g(z)
        opt_d.zero_grad()
        d_loss = F.relu(1 - d(real)).mean() + F.relu(1 + d(fake.detach())).mean()
        mix = (alpha * real + (1 - alpha) * fake.detach()).requires_grad_(True)
        (grad,) = lib.autograd.grad(d(mix).sum(), mix, create_graph=True)
        gp = ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
        (d_loss + 10 * gp).backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = -d(fake).mean()
        g_loss.backward()
        opt_g.step()
        out["d_loss"].append(d_loss.detach())
        out["g_loss"].append(g_loss.detach())
        out["gp"].append(gp.detach())
    out["d_grads"] = {n: p.grad.clone() for n, p in d.named_parameters()}
    out["g_grads"] = {n: p.grad.clone() for n, p in g.named_parameters()}
    d.eval()
    with lib.no_grad():
        u_before = d.c1.parametrizations.weight[0]._u.clone()
        score = d(real)
        out["eval"] = [score, d(real), d.c1.weight, d.c1.parametrizations.weight[0]._u - u_before,
                       g.conv.weight, g.conv.parametrizations.weight.original]
    out["state"] = dict(d.state_dict()) | {"g." + k: v for k, v in g.state_dict().items()}
    return out


def test_sngan_training_matches_torch():
    torch.manual_seed(0)
    ref = make_gan(torch)
    th, jt = gan_run(torch, ref), gan_run(jitorch, ref)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-5, what="sngan")


def test_spectral_norm_power_iteration_and_parametrization_api():
    rng = np.random.default_rng(2)
    w_np = rng.normal(size=(5, 3)).astype(np.float32)
    x_np = rng.normal(size=(2, 3)).astype(np.float32)
    res, names = [], []
    for lib in LIBS:
        nn = lib.nn
        torch.manual_seed(1)
        ref = torch.nn.Linear(3, 5)
        lin = nn.Linear(3, 5)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(w_np))
            lin.bias.copy_(lib.tensor(ref.bias.detach().numpy()))
        lin = nn.utils.parametrizations.spectral_norm(lin, n_power_iterations=3)
        with lib.no_grad():
            sn = lin.parametrizations.weight[0]
            sn._u.copy_(lib.tensor(np.ones(5, np.float32) / np.sqrt(5)))
            sn._v.copy_(lib.tensor(np.ones(3, np.float32) / np.sqrt(3)))
        ws = [lin.weight for _ in range(3)]  # each access in train mode runs power iterations
        lin.eval()
        w_eval = [lin.weight, lin.weight]
        x = lib.tensor(x_np)
        lin.train()
        y = lin(x)
        y.sum().backward()
        keys = sorted(lin.state_dict().keys())
        with nn.utils.parametrize.cached():
            cached_same = lin.weight is lin.weight
        res.append([*ws, *w_eval, sn._u, sn._v, lin.parametrizations.weight.original.grad,
                    nn.utils.parametrize.is_parametrized(lin, "weight"), cached_same,
                    lib.linalg.matrix_norm(w_eval[0].detach(), ord=2)])
        names.append(keys)
    assert names[0] == names[1]
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="spectral norm")
