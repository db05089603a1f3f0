"""Patch-based image processing with F.unfold / F.fold (after classic non-local-means / BM3D-style PyTorch code and
im2col-based layers): overlapping patch extraction with stride and dilation, a learned patch-wise linear denoiser,
overlap-averaging reconstruction by folding the patches and dividing by the folded ones-count, an im2col
convolution checked against F.conv2d, pooling variants used by older architectures (max_pool2d with ceil_mode and
return_indices + max_unpool2d, avg_pool2d with count_include_pad=False and divisor_override, lp_pool2d,
adaptive pools on sizes that do not divide, local_response_norm, F.pixel_unshuffle / pixel_shuffle), and
Tensor.unfold sliding windows for a 1-D median filter.

Data from NumPy and weights from torch.manual_seed, no randomness during training: metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.RandomState(0)
ys, xs = np.mgrid[0:20, 0:20]
clean_np = np.stack([np.sin(xs / (2 + k)) * np.cos(ys / (3 + k)) for k in range(6)])[:, None].astype(np.float32)
clean = torch.from_numpy(clean_np)
noisy = clean + torch.tensor(0.3 * rng.randn(*clean_np.shape), dtype=torch.float32)


class PatchDenoiser(nn.Module):
    def __init__(self, k=5, stride=2):
        super().__init__()
        self.k, self.stride = k, stride
        self.lin = nn.Linear(k * k, k * k)
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        b, c, h, w = x.shape
        cols = F.unfold(x, kernel_size=self.k, stride=self.stride, padding=2)  # B, k*k, L
        den = self.lin(cols.transpose(1, 2)).transpose(1, 2)
        den = cols + torch.tanh(self.gate) * (den - cols)
        out = F.fold(den, (h, w), kernel_size=self.k, stride=self.stride, padding=2)
        count = F.fold(torch.ones_like(cols), (h, w), kernel_size=self.k, stride=self.stride, padding=2)
        return out / count


torch.manual_seed(0)
model = PatchDenoiser()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
losses = []
for step in range(30):
    loss = F.mse_loss(model(noisy), clean)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
psnr = (10 * torch.log10(clean.pow(2).max() / F.mse_loss(model(noisy).detach(), clean))).item()

# im2col convolution with dilation against F.conv2d.
weight = torch.randn(4, 1, 3, 3)
cols = F.unfold(noisy, kernel_size=3, dilation=2, padding=2, stride=1)
im2col = (weight.view(4, -1) @ cols).view(6, 4, 20, 20)
conv_err = (im2col - F.conv2d(noisy, weight, dilation=2, padding=2)).abs().max().item()

# Pooling zoo.
x = noisy[:, :, :19, :19]
pooled, idx = F.max_pool2d(x, 3, stride=2, ceil_mode=True, return_indices=True)
unpooled = F.max_unpool2d(pooled, idx, 3, stride=2, output_size=x.shape[-2:])
avg_excl = F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
avg_div = F.avg_pool2d(x, 2, divisor_override=3)
lp = F.lp_pool2d(x.abs(), norm_type=3, kernel_size=2, stride=2)
ada_avg = F.adaptive_avg_pool2d(x, (5, 7))
ada_max, ada_idx = F.adaptive_max_pool2d(x, 4, return_indices=True)
lrn = F.local_response_norm(torch.cat([x] * 3, 1), size=3, alpha=1e-2, beta=0.75, k=2.0)
shuffled = F.pixel_shuffle(F.pixel_unshuffle(noisy, 2), 2)
sig = noisy[0, 0, 10]
med = F.pad(sig[None, None], (2, 2), mode="replicate")[0, 0].unfold(0, 5, 1).median(dim=-1).values
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"psnr={psnr:.6f}")
print(f"conv_ok={float(conv_err < 1e-4)}")
print(f"pooled_sum={pooled.sum().item():.6f}")
print(f"pooled_shape={pooled.shape[-1]}")
print(f"idx_sum={idx.sum().item()}")
print(f"unpooled_sum={unpooled.sum().item():.6f}")
print(f"avg_excl_sum={avg_excl.sum().item():.6f}")
print(f"avg_div_sum={avg_div.sum().item():.6f}")
print(f"lp_sum={lp.sum().item():.6f}")
print(f"ada_avg_sum={ada_avg.sum().item():.6f}")
print(f"ada_max_sum={ada_max.sum().item():.6f}")
print(f"ada_idx_sum={ada_idx.sum().item()}")
print(f"lrn_sum={lrn.sum().item():.6f}")
print(f"shuffle_ok={float(torch.equal(shuffled, noisy))}")
print(f"median_sum={med.sum().item():.6f}")
