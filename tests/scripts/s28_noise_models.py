"""Self-supervised denoising with physical noise models, sampled from torch's own random stream (after the
Noise2Noise / Noise2Void training scripts and photon-limited imaging code): Poisson shot noise via torch.poisson at
a photon budget, Binomial thinning to split one noisy image into two independent halves (Noise2Noise without a
second exposure), multiplicative Gamma speckle (SAR despeckling), rotations drawn from a VonMises distribution and
applied with F.affine_grid / grid_sample, Dirichlet-weighted mixup of three images, Beta-distributed blend factors,
and a small conv denoiser with nn.RReLU activations (random slopes in training).

Images and weights come from NumPy; every noise draw comes from torch.manual_seed's CPU stream, which jitorch
reproduces (ATen's serial Poisson, Binomial and Gamma samplers included), so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Beta, Binomial, Dirichlet, Gamma, VonMises


def make_clean(rng, n, size=12):
    yy, xx = np.mgrid[:size, :size] / size
    imgs = []
    for _ in range(n):
        cx, cy, r = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.15, 0.3)
        disk = ((xx - cx) ** 2 + (yy - cy) ** 2 < r ** 2).astype(np.float32)
        imgs.append(0.2 + 0.6 * disk + 0.2 * np.sin(6 * xx + rng.uniform(0, 3)) ** 2)
    return torch.from_numpy(np.stack(imgs)[:, None].astype(np.float32))


def rotate(imgs, angles):
    cos, sin = torch.cos(angles), torch.sin(angles)
    theta = torch.stack([torch.stack([cos, -sin, torch.zeros_like(cos)], 1),
                         torch.stack([sin, cos, torch.zeros_like(cos)], 1)], 1)
    grid = F.affine_grid(theta, list(imgs.shape), align_corners=False)
    return F.grid_sample(imgs, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


class Denoiser(nn.Module):
    def __init__(self, ch=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, ch, 3, padding=1), nn.RReLU(0.1, 0.3),
                                 nn.Conv2d(ch, ch, 3, padding=1), nn.RReLU(0.1, 0.3), nn.Conv2d(ch, 1, 3, padding=1))

    def forward(self, x):
        return x - self.net(x)  # residual: predict the noise


torch.manual_seed(0)
rng = np.random.RandomState(0)
clean = make_clean(rng, 8)
model = Denoiser()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
peak = 30.0
angle_dist = VonMises(torch.tensor(0.0), torch.tensor(4.0))
speckle = Gamma(torch.tensor(8.0), torch.tensor(8.0))
mix_w = Dirichlet(torch.full((3,), 0.7))
blend = Beta(torch.tensor(0.5), torch.tensor(0.5))
losses = []
for step in range(15):
    x = rotate(clean, angle_dist.sample((8,)))
    w = mix_w.sample((8,))  # Dirichlet mixup of each image with two shuffled ones
    perm1, perm2 = torch.roll(torch.arange(8), 1), torch.roll(torch.arange(8), 3)
    x = w[:, 0, None, None, None] * x + w[:, 1, None, None, None] * x[perm1] + w[:, 2, None, None, None] * x[perm2]
    photons = torch.poisson(x.clamp(min=0) * peak)
    half = Binomial(photons, probs=torch.full_like(photons, 0.5)).sample()  # binomial thinning
    inp, tgt = half / (peak / 2), (photons - half) / (peak / 2)
    inp = inp * speckle.sample(inp.shape) if step % 3 == 0 else inp
    lam = blend.sample()
    loss = F.mse_loss(model(inp), tgt) + 0.1 * lam * F.l1_loss(model(inp), tgt)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    noisy = torch.poisson(clean * peak) / peak
    den = model(noisy)
    psnr_noisy = -10 * math.log10(F.mse_loss(noisy, clean).item())
    psnr_den = -10 * math.log10(F.mse_loss(den, clean).item())
    rrelu_eval = model.net[1](torch.tensor([-1.0, 2.0]))
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_7={losses[7]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"psnr_noisy={psnr_noisy:.5f}")
print(f"psnr_denoised={psnr_den:.5f}")
print(f"photon_total={int(photons.sum().item())}")
print(f"thinned_total={int(half.sum().item())}")
print(f"rrelu_eval_slope={-rrelu_eval[0].item():.6f}")
print(f"next_rand={torch.rand(1).item():.6f}")
