"""GPU-style tensor augmentations as torchvision.transforms.v2 / kornia implement them, used in a training loop:
rgb_to_grayscale, adjust_brightness/contrast/saturation via _blend, adjust_hue through torchvision's _rgb2hsv /
_hsv2rgb (torch.fmod, remainder, floor, one-hot masks and einsum), random resized crop with F.interpolate
(bilinear, antialias=True), horizontal flips with torch.flip on a boolean batch mask, CutMix boxes with
torch.distributions.Beta, Gaussian blur with a separable depthwise conv2d and reflect padding, and a small CNN
trained on the augmented batches with soft-target cross entropy.

Images, weights and most augmentation parameters come from NumPy, the CutMix ratios and biases from
torch.manual_seed's stream (which jitorch reproduces, Beta's gamma draws included), so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def rgb_to_grayscale(img):
    r, g, b = img.unbind(dim=-3)
    return (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype).unsqueeze(dim=-3)


def _blend(img1, img2, ratio):
    return (ratio * img1 + (1.0 - ratio) * img2).clamp(0, 1.0).to(img1.dtype)


def adjust_contrast(img, factor):
    mean = torch.mean(rgb_to_grayscale(img), dim=(-3, -2, -1), keepdim=True)
    return _blend(img, mean, factor)


def adjust_saturation(img, factor):
    return _blend(img, rgb_to_grayscale(img), factor)


def _rgb2hsv(img):
    r, g, b = img.unbind(dim=-3)
    maxc = torch.max(img, dim=-3).values
    minc = torch.min(img, dim=-3).values
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    cr_divisor = torch.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / cr_divisor, (maxc - g) / cr_divisor, (maxc - b) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = hr + hg + hb
    h = torch.fmod((h / 6.0 + 1.0), 1.0)
    return torch.stack((h, s, maxc), dim=-3)


def _hsv2rgb(img):
    h, s, v = img.unbind(dim=-3)
    i = torch.floor(h * 6.0)
    f = (h * 6.0) - i
    i = i.to(dtype=torch.int32)
    p = torch.clamp((v * (1.0 - s)), 0.0, 1.0)
    q = torch.clamp((v * (1.0 - s * f)), 0.0, 1.0)
    t = torch.clamp((v * (1.0 - s * (1.0 - f))), 0.0, 1.0)
    i = i % 6
    mask = i.unsqueeze(dim=-3) == torch.arange(6, device=i.device).view(-1, 1, 1)
    a1 = torch.stack((v, q, p, p, t, v), dim=-3)
    a2 = torch.stack((t, v, v, q, p, p), dim=-3)
    a3 = torch.stack((p, p, t, v, v, q), dim=-3)
    a4 = torch.stack((a1, a2, a3), dim=-4)
    return torch.einsum("...ijk, ...xijk -> ...xjk", mask.to(dtype=img.dtype), a4)


def adjust_hue(img, hue_factor):
    hsv = _rgb2hsv(img)
    h, s, v = hsv.unbind(dim=-3)
    h = (h + hue_factor) % 1.0
    return _hsv2rgb(torch.stack((h, s, v), dim=-3))


def gaussian_blur(img, kernel_size, sigma):
    ksize_half = (kernel_size - 1) * 0.5
    x = torch.linspace(-ksize_half, ksize_half, steps=kernel_size)
    kernel1d = torch.softmax(-0.5 * (x / sigma).pow(2), dim=0)
    c = img.shape[-3]
    kx = kernel1d[None, None, None, :].expand(c, 1, 1, kernel_size)
    ky = kernel1d[None, None, :, None].expand(c, 1, kernel_size, 1)
    pad = kernel_size // 2
    img = F.pad(img, [pad, pad, pad, pad], mode="reflect")
    return F.conv2d(F.conv2d(img, kx, groups=c), ky, groups=c)


def random_resized_crop(img, box, size):
    top, left, h, w = box
    return F.interpolate(img[..., top:top + h, left:left + w], size=size, mode="bilinear", align_corners=False,
                         antialias=True)


def augment(batch, rs):
    n = batch.shape[0]
    out = []
    for k in range(n):
        img = batch[k]
        top, left = rs.randint(0, 5), rs.randint(0, 5)
        h, w = rs.randint(11, 17 - top), rs.randint(11, 17 - left)
        img = random_resized_crop(img.unsqueeze(0), (top, left, h, w), (16, 16)).squeeze(0).clamp(0, 1)
        img = _blend(img, torch.zeros_like(img), float(rs.uniform(0.8, 1.2)))  # brightness
        img = adjust_contrast(img, float(rs.uniform(0.8, 1.2)))
        img = adjust_saturation(img, float(rs.uniform(0.7, 1.3)))
        img = adjust_hue(img, float(rs.uniform(-0.05, 0.05)))
        out.append(img)
    out = torch.stack(out)
    flip = torch.from_numpy(rs.rand(n) < 0.5)
    out = torch.where(flip[:, None, None, None], torch.flip(out, dims=[-1]), out)
    return gaussian_blur(out, 3, float(rs.uniform(0.3, 1.0)))


torch.manual_seed(0)  # biases keep the default init (jitorch reproduces torch's stream)
rng = np.random.RandomState(0)
n_cls = 3
labels = torch.from_numpy(rng.randint(0, n_cls, 24))
base = np.zeros((24, 3, 16, 16), dtype=np.float32)
for k, c in enumerate(labels.tolist()):
    base[k, c] += 0.6
    base[k, :, 4 + 2 * c:8 + 2 * c, :] += 0.3
images = torch.from_numpy(np.clip(base + 0.1 * rng.rand(24, 3, 16, 16).astype(np.float32), 0, 1))
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(16, n_cls))
with torch.no_grad():
    for p in model.parameters():
        if p.dim() > 1:
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.3).astype(np.float32)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
rs = np.random.RandomState(1)
beta_dist = torch.distributions.Beta(torch.tensor(1.0), torch.tensor(1.0))
losses = []
for step in range(15):
    x = augment(images, rs)
    y = F.one_hot(labels, n_cls).float()
    lam = float(beta_dist.sample())  # CutMix's ratio from torch's stream, the box centre from NumPy
    perm = torch.from_numpy(rs.permutation(24))
    cut = int(16 * np.sqrt(1 - lam))
    cy, cx = rs.randint(16), rs.randint(16)
    y1, y2, x1, x2 = max(cy - cut // 2, 0), min(cy + cut // 2, 16), max(cx - cut // 2, 0), min(cx + cut // 2, 16)
    x[:, :, y1:y2, x1:x2] = x[perm][:, :, y1:y2, x1:x2]
    lam = 1 - (y2 - y1) * (x2 - x1) / 256
    y = lam * y + (1 - lam) * y[perm]
    loss = torch.sum(-y * F.log_softmax(model(x), dim=-1), dim=-1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    acc = (model(images).argmax(1) == labels).float().mean().item()
    hsv_roundtrip = (_hsv2rgb(_rgb2hsv(images)) - images).abs().max().item()
    aug = augment(images[:4], np.random.RandomState(7))
beta_mean = torch.distributions.Beta(torch.tensor(2.0), torch.tensor(3.0)).mean.item()
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"hsv_roundtrip_ok={int(hsv_roundtrip < 1e-5)}")
print(f"aug_mean={aug.mean().item():.6f}")
print(f"aug_std={aug.std().item():.6f}")
print(f"gray_mean={rgb_to_grayscale(images).mean().item():.6f}")
print(f"hue_shift_sum={adjust_hue(images[:2], 0.25).sum().item():.4f}")
print(f"beta_mean={beta_mean:.6f}")
