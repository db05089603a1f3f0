"""Unsupervised optical flow and image registration with F.grid_sample (after PWC-Net / UnFlow / VoxelMorph utilities):
a backward-warp function building a pixel mesh with torch.meshgrid, normalising it to [-1, 1] for
align_corners=True, warping with padding_mode="border" and an occlusion mask from warping a ones tensor with
padding_mode="zeros", the census-free photometric loss (Charbonnier), an edge-aware smoothness term from image
gradients, a small flow CNN (its first layer an nn.LazyConv2d, shaped by the first batch) trained on synthetic
translations, a VoxelMorph-style 3-D spatial transformer (5-D grid_sample, trilinear), nearest-mode label warping,
reflection padding, bicubic mode, and an integration of a stationary velocity field by scaling and squaring.

Images come from NumPy; weights from torch.manual_seed; deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def mesh(h, w):
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    return torch.stack([xs, ys], 0)  # 2, H, W (x first)


def warp(img, flow, padding_mode="border", mode="bilinear"):
    b, _, h, w = img.shape
    coords = mesh(h, w).unsqueeze(0) + flow
    gx = 2.0 * coords[:, 0] / max(w - 1, 1) - 1.0
    gy = 2.0 * coords[:, 1] / max(h - 1, 1) - 1.0
    grid = torch.stack([gx, gy], dim=-1)
    return F.grid_sample(img, grid, mode=mode, padding_mode=padding_mode, align_corners=True)


def charbonnier(x, eps=1e-3, alpha=0.45):
    return ((x ** 2 + eps ** 2) ** alpha).mean()


def smoothness(flow, img, edge_weight=10.0):
    img_dx, img_dy = img[..., :, 1:] - img[..., :, :-1], img[..., 1:, :] - img[..., :-1, :]
    w_x = torch.exp(-edge_weight * img_dx.abs().mean(1, keepdim=True))
    w_y = torch.exp(-edge_weight * img_dy.abs().mean(1, keepdim=True))
    return (w_x * (flow[..., :, 1:] - flow[..., :, :-1]).abs()).mean() + \
        (w_y * (flow[..., 1:, :] - flow[..., :-1, :]).abs()).mean()


class FlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.LazyConv2d(16, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(16, 16, 3, padding=2,
                                 dilation=2), nn.LeakyReLU(0.1), nn.Conv2d(16, 2, 3, padding=1))

    def forward(self, a, b):
        return self.net(torch.cat([a, b], 1))


def blobs(rng, n, h=16, w=16):
    ys, xs = np.mgrid[0:h, 0:w]
    out = np.zeros((n, 1, h, w), np.float32)
    for i in range(n):
        for _ in range(3):
            cy, cx, s = rng.uniform(3, h - 3), rng.uniform(3, w - 3), rng.uniform(1.5, 3)
            out[i, 0] += np.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * s * s))
    return torch.from_numpy(out)


rng = np.random.RandomState(0)
torch.manual_seed(0)
model = FlowNet()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
losses = []
for step in range(20):
    src = blobs(rng, 4)
    shift = torch.tensor(rng.uniform(-1.5, 1.5, (4, 2, 1, 1)), dtype=torch.float32)
    tgt = warp(src, shift.expand(4, 2, 16, 16))
    flow = model(tgt, src)
    warped = warp(src, flow)
    valid = warp(torch.ones_like(src), flow, padding_mode="zeros").detach() > 0.999
    loss = charbonnier((warped - tgt) * valid) + 0.1 * smoothness(flow, tgt)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
with torch.no_grad():
    epe = (flow - shift).pow(2).sum(1).sqrt().mean().item()

# 3-D spatial transformer (VoxelMorph): 5-D grid, trilinear, plus nearest label warping.
vol = torch.tensor(rng.rand(1, 1, 6, 7, 8), dtype=torch.float32, requires_grad=True)
labels = (vol.detach() > 0.5).float()
disp = torch.tensor(0.3 * rng.randn(1, 3, 6, 7, 8), dtype=torch.float32, requires_grad=True)
d, h, w = 6, 7, 8
zz, yy, xx = torch.meshgrid(torch.linspace(-1, 1, d), torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
identity = torch.stack([xx, yy, zz], -1).unsqueeze(0)
scale = torch.tensor([2 / (w - 1), 2 / (h - 1), 2 / (d - 1)])
grid3 = identity + disp.permute(0, 2, 3, 4, 1) * scale
moved = F.grid_sample(vol, grid3, mode="bilinear", padding_mode="border", align_corners=True)
moved_lbl = F.grid_sample(labels, grid3, mode="nearest", align_corners=True)
moved.pow(2).sum().backward()

# Scaling and squaring of a stationary velocity field (diffeomorphic registration).
velocity = torch.tensor(0.5 * rng.randn(1, 2, 12, 12), dtype=torch.float32)
phi = velocity / 2 ** 5
for _ in range(5):
    phi = phi + warp(phi, phi)
img = blobs(rng, 1, 12, 12)
reflect = warp(img, torch.full((1, 2, 12, 12), 3.0), padding_mode="reflection")
bicubic = warp(img, torch.full((1, 2, 12, 12), 0.5), mode="bicubic")
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"epe={epe:.6f}")
print(f"moved_mean={moved.mean().item():.6f}")
print(f"label_frac={moved_lbl.mean().item():.6f}")
print(f"vol_grad={vol.grad.abs().sum().item():.6f}")
print(f"disp_grad={disp.grad.abs().sum().item():.6f}")
print(f"phi_norm={phi.norm().item():.6f}")
print(f"reflect_sum={reflect.sum().item():.6f}")
print(f"bicubic_sum={bicubic.sum().item():.6f}")
