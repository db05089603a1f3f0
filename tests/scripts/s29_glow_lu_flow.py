"""A Glow-style normalizing flow on 2x4x4 "images" (after rosinality/glow-pytorch and chaiyujin/glow-pytorch):
ActNorm with data-dependent initialisation on the first batch (a buffer flag flipped once), an invertible 1x1
convolution in LU-decomposed form (scipy-free: torch.linalg.lu for P, L, U, then a learnable log|s| with a fixed
sign, triu / tril masks and a frozen permutation), the same layer in plain form with torch.slogdet, squeeze by
F.pixel_unshuffle, affine coupling with a zero-initialised last conv and sigmoid scale, log-likelihood in bits per
dim, and exact inversion (torch.linalg.inv, torch.inverse, torch.linalg.solve_triangular, torch.lu_unpack from
torch.linalg.lu_factor) checked by reconstruction.

Data from NumPy, weights from torch.manual_seed: every metric must match torch (float64 throughout).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


class ActNorm(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, ch, 1, 1))
        self.log_scale = nn.Parameter(torch.zeros(1, ch, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    def forward(self, x):
        if self.initialized.item() == 0:
            with torch.no_grad():
                flat = x.permute(1, 0, 2, 3).reshape(x.shape[1], -1)
                self.loc.data.copy_(-flat.mean(1).view(1, -1, 1, 1))
                self.log_scale.data.copy_(torch.log(1 / (flat.std(1) + 1e-6)).view(1, -1, 1, 1))
                self.initialized.fill_(1)
        h, w = x.shape[-2:]
        return self.log_scale.exp() * (x + self.loc), h * w * self.log_scale.sum()

    def reverse(self, y):
        return y / self.log_scale.exp() - self.loc


class InvConv2dLU(nn.Module):
    def __init__(self, ch):
        super().__init__()
        q, _ = torch.linalg.qr(torch.randn(ch, ch))
        P, L, U = torch.linalg.lu(q)
        s = torch.diag(U)
        self.register_buffer("w_p", P)
        self.register_buffer("u_mask", torch.triu(torch.ones(ch, ch), 1))
        self.register_buffer("l_mask", self.u_mask.T.clone())
        self.register_buffer("s_sign", torch.sign(s))
        self.register_buffer("l_eye", torch.eye(ch))
        self.w_l, self.w_u = nn.Parameter(L), nn.Parameter(torch.triu(U, 1))
        self.w_s = nn.Parameter(torch.log(torch.abs(s)))

    def weight(self):
        return self.w_p @ (self.w_l * self.l_mask + self.l_eye) @ (self.w_u * self.u_mask
                                                                   + torch.diag(self.s_sign * torch.exp(self.w_s)))

    def forward(self, x):
        h, w = x.shape[-2:]
        return F.conv2d(x, self.weight().unsqueeze(2).unsqueeze(3)), h * w * self.w_s.sum()

    def reverse(self, y):
        return F.conv2d(y, torch.linalg.inv(self.weight()).unsqueeze(2).unsqueeze(3))


class InvConv2d(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.weight = nn.Parameter(torch.linalg.qr(torch.randn(ch, ch))[0])

    def forward(self, x):
        h, w = x.shape[-2:]
        return F.conv2d(x, self.weight[:, :, None, None]), h * w * torch.slogdet(self.weight)[1]

    def reverse(self, y):
        return F.conv2d(y, self.weight.inverse()[:, :, None, None])


class AffineCoupling(nn.Module):
    def __init__(self, ch, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(ch // 2, hidden, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(hidden, ch, 3, padding=1))
        self.net[-1].weight.data.zero_()
        self.net[-1].bias.data.zero_()

    def forward(self, x):
        a, b = x.chunk(2, 1)
        log_s, t = self.net(a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        return torch.cat([a, (b + t) * s], 1), torch.log(s).flatten(1).sum(1)

    def reverse(self, y):
        a, b = y.chunk(2, 1)
        log_s, t = self.net(a).chunk(2, 1)
        return torch.cat([a, b / torch.sigmoid(log_s + 2) - t], 1)


class Glow(nn.Module):
    def __init__(self, ch=8, n_flows=3):
        super().__init__()
        self.flows = nn.ModuleList()
        for i in range(n_flows):
            self.flows.extend([ActNorm(ch), InvConv2dLU(ch) if i % 2 == 0 else InvConv2d(ch), AffineCoupling(ch)])

    def forward(self, x):
        z, logdet = F.pixel_unshuffle(x, 2), torch.zeros(x.shape[0])
        for f in self.flows:
            z, ld = f(z)
            logdet = logdet + ld
        return z, logdet

    def reverse(self, z):
        for f in reversed(self.flows):
            z = f.reverse(z)
        return F.pixel_shuffle(z, 2)


rng = np.random.RandomState(0)
base = rng.randn(2, 4, 4)
data = torch.from_numpy(np.stack([np.roll(base, s, axis=2) for s in range(4)] * 8) + 0.1 * rng.randn(32, 2, 4, 4))
torch.manual_seed(0)
model = Glow()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
n_dims = data[0].numel()
bpds = []
for step in range(25):
    z, logdet = model(data)
    log_pz = (-0.5 * z.pow(2) - 0.5 * math.log(2 * math.pi)).flatten(1).sum(1)
    loss = -(log_pz + logdet).mean() / (n_dims * math.log(2))
    opt.zero_grad()
    loss.backward()
    opt.step()
    bpds.append(loss.item())

with torch.no_grad():
    z, logdet = model(data)
    recon_err = (model.reverse(z) - data).abs().max().item()
    W = model.flows[1].weight()
    LU, piv = torch.linalg.lu_factor(W)
    P, L, U = torch.lu_unpack(LU, piv)
    y = torch.linalg.solve_triangular(U, torch.linalg.solve_triangular(L, P.T @ torch.eye(8), upper=False), upper=True)
    lu_inv_err = (y - torch.linalg.inv(W)).abs().max().item()
    logdet_lu = model.flows[1].w_s.sum().item()
print(f"initial_loss={bpds[0]:.8f}")
print(f"final_loss={bpds[-1]:.8f}")
print(f"recon_ok={float(recon_err < 1e-9)}")
print(f"lu_inv_ok={float(lu_inv_err < 1e-9)}")
print(f"logdet_lu={logdet_lu:.8f}")
print(f"slogdet_lu={torch.linalg.slogdet(W)[1].item():.8f}")
print(f"actnorm_init={model.flows[0].initialized.item()}")
print(f"z_std={z.std().item():.8f}")
print(f"default_dtype_ok={float(z.dtype == torch.float64)}")
