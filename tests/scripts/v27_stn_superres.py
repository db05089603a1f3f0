"""Image-to-image pieces: a spatial transformer network (F.affine_grid + F.grid_sample, the localization head
initialized to the identity), an ESPCN super-resolution net (PixelShuffle, PSNR), and a CycleGAN-style residual
generator (ReflectionPad2d, InstanceNorm2d, ConvTranspose2d with output_padding, bicubic nn.Upsample, Tanh).

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(8)


def numpy_init(module, seed, scale=0.15):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.from_numpy(g.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))


# Smooth random 16x16 images.
base = rng.normal(size=(32, 1, 4, 4)).astype(np.float32)
hr = F.interpolate(torch.from_numpy(base), size=(16, 16), mode="bicubic", align_corners=False)
lr = F.avg_pool2d(hr, 2)


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.localization = nn.Sequential(nn.Conv2d(1, 4, 5), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        self.fc_loc = nn.Sequential(nn.Linear(4 * 6 * 6, 16), nn.ReLU(True), nn.Linear(16, 3 * 2))

    def forward(self, x):
        theta = self.fc_loc(self.localization(x).view(-1, 4 * 6 * 6)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False), theta


stn = STN()
numpy_init(stn, 0)
with torch.no_grad():
    stn.fc_loc[2].weight.zero_()
    stn.fc_loc[2].bias.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
# Target: images rotated by 10 degrees; the STN learns to undo nothing but to match them.
angle = math.radians(10)
rot = torch.tensor([[math.cos(angle), -math.sin(angle), 0.0], [math.sin(angle), math.cos(angle), 0.0]])
target = F.grid_sample(hr, F.affine_grid(rot.expand(32, 2, 3), hr.shape, align_corners=False), align_corners=False)
with torch.no_grad():
    out, _ = stn(hr)
    assert torch.allclose(out, hr, atol=1e-5)  # identity at init
opt = torch.optim.Adam(stn.parameters(), lr=1e-2)
for _ in range(25):
    out, theta = stn(hr)
    loss = F.mse_loss(out, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"stn_loss={loss.item():.6f}")
print(f"stn_theta_mean={theta.mean().item():.6f}")
nearest = F.grid_sample(hr, F.affine_grid(rot.expand(32, 2, 3), hr.shape, align_corners=True), mode="nearest",
                        padding_mode="zeros", align_corners=True)
print(f"nearest_zeros_sum={nearest.sum().item():.5f}")
reflect = F.grid_sample(hr, F.affine_grid(1.3 * rot.expand(32, 2, 3), hr.shape, align_corners=False),
                        padding_mode="reflection", align_corners=False)
print(f"reflection_sum={reflect.sum().item():.5f}")


class ESPCN(nn.Module):
    def __init__(self, scale=2):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.Tanh(), nn.Conv2d(16, 8, 3, padding=1),
                                  nn.Tanh(), nn.Conv2d(8, scale ** 2, 3, padding=1), nn.PixelShuffle(scale))

    def forward(self, x):
        return self.body(x)


def psnr(a, b, peak):
    return 10 * torch.log10(peak ** 2 / F.mse_loss(a, b))


sr = ESPCN()
numpy_init(sr, 1)
peak = hr.abs().max()
initial = F.mse_loss(sr(lr), hr).item()
opt = torch.optim.Adam(sr.parameters(), lr=3e-3)
for _ in range(30):
    loss = F.l1_loss(sr(lr), hr)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    up = sr(lr)
    print(f"initial_loss={initial:.6f}")
    print(f"final_loss={F.mse_loss(up, hr).item():.6f}")
    print(f"psnr_sr={psnr(up, hr, peak).item():.4f}")
    print(f"psnr_bicubic={psnr(F.interpolate(lr, scale_factor=2, mode='bicubic', align_corners=False), hr, peak):.4f}")
    unshuffled = F.pixel_unshuffle(up, 2)
    print(f"unshuffle_roundtrip={float(torch.equal(F.pixel_shuffle(unshuffled, 2), up)):.1f}")


class ResnetBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3), nn.InstanceNorm2d(dim, affine=True),
                                   nn.ReLU(True), nn.ReplicationPad2d(1), nn.Conv2d(dim, dim, 3),
                                   nn.InstanceNorm2d(dim))

    def forward(self, x):
        return x + self.block(x)


generator = nn.Sequential(
    nn.ReflectionPad2d(3), nn.Conv2d(1, 8, 7), nn.InstanceNorm2d(8), nn.ReLU(True),
    nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.InstanceNorm2d(16), nn.ReLU(True),
    ResnetBlock(16), ResnetBlock(16),
    nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1), nn.InstanceNorm2d(8), nn.ReLU(True),
    nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True), nn.Conv2d(8, 8, 3, padding=1),
    nn.LeakyReLU(0.2), nn.AvgPool2d(2), nn.ReflectionPad2d(3), nn.Conv2d(8, 1, 7), nn.Tanh(),
)
numpy_init(generator, 2)
opt = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
x_in, x_out = hr[:8], torch.flip(hr[:8], dims=[3]).tanh()
for step in range(8):
    fake = generator(x_in)
    loss = F.l1_loss(fake, x_out)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"gen_l1={loss.item():.6f}")
print(f"gen_out_std={fake.std().item():.6f}")
