"""Tiny U-Net for binary segmentation of synthetic discs: ConvTranspose2d and bilinear up-sampling decoders, skip
concatenation, GroupNorm, Dice + BCEWithLogits loss, AdamW with separate no-decay parameter groups.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(27)


def make_discs(n, size=16):
    yy, xx = np.mgrid[:size, :size]
    images = np.zeros((n, 1, size, size), np.float32)
    masks = np.zeros((n, 1, size, size), np.float32)
    for i in range(n):
        cy, cx = rng.uniform(4, size - 4, 2)
        r = rng.uniform(2, 5)
        disc = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        masks[i, 0] = disc
        images[i, 0] = disc * rng.uniform(0.5, 1.0) + rng.normal(scale=0.3, size=(size, size))
    return torch.from_numpy(images), torch.from_numpy(masks)


def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout), nn.SiLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout), nn.SiLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, base=8):
        super().__init__()
        self.enc1 = conv_block(1, base)
        self.enc2 = conv_block(base, base * 2)
        self.bottleneck = conv_block(base * 2, base * 4)
        self.up2 = nn.ConvTranspose2d(base * 4, base * 2, kernel_size=2, stride=2)
        self.dec2 = conv_block(base * 4, base * 2)
        self.reduce1 = nn.Conv2d(base * 2, base, 1)
        self.dec1 = conv_block(base * 2, base)
        self.head = nn.Conv2d(base, 1, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        b = self.bottleneck(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], dim=1))
        up1 = F.interpolate(self.reduce1(d2), scale_factor=2, mode="bilinear", align_corners=True)
        d1 = self.dec1(torch.cat((up1, e1), 1))
        return self.head(d1)


def init_from_numpy(model, seed):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                bound = 1 / math.sqrt(p[0].numel())
                p.copy_(torch.from_numpy(g.uniform(-bound, bound, size=tuple(p.shape)).astype(np.float32)))
            elif name.endswith("bias"):
                p.zero_()


def dice_loss(logits, target, eps=1.0):
    prob = torch.sigmoid(logits)
    inter = (prob * target).sum(dim=(1, 2, 3))
    union = prob.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3))
    return (1 - (2 * inter + eps) / (union + eps)).mean()


def iou(logits, target):
    pred = logits > 0
    truth = target.bool()
    inter = (pred & truth).sum().float()
    union = (pred | truth).sum().float()
    return (inter / union.clamp(min=1)).item()


images, masks = make_discs(48)
model = UNet()
init_from_numpy(model, 0)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim <= 1 else decay).append(p)
optimizer = torch.optim.AdamW([
    {"params": decay, "weight_decay": 1e-2},
    {"params": no_decay, "weight_decay": 0.0},
], lr=3e-3, betas=(0.9, 0.99))
pos_weight = torch.tensor([2.0])
bce = nn.BCEWithLogitsLoss(pos_weight=pos_weight)

with torch.no_grad():
    logits = model(images)
    initial = (bce(logits, masks) + dice_loss(logits, masks)).item()

model.train()
for epoch in range(6):
    for i in range(0, len(images), 16):
        x, y = images[i:i + 16], masks[i:i + 16]
        optimizer.zero_grad(set_to_none=True)
        out = model(x)
        loss = bce(out, y) + dice_loss(out, y)
        loss.backward()
        optimizer.step()

model.eval()
with torch.no_grad():
    logits = model(images)
    final = (bce(logits, masks) + dice_loss(logits, masks)).item()
    assert logits.shape == masks.shape
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"iou={iou(logits, masks):.6f}")
print(f"head_weight_norm={model.head.weight.norm().item():.6f}")
print(f"up_weight_mean={model.up2.weight.mean().item():.6f}")
