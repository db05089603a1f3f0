"""Volumetric (medical-imaging) research code, written once against ``lib`` and run with torch and jitorch: a small
3-D U-Net (``Conv3d``, ``BatchNorm3d``, ``MaxPool3d``, a ``ConvTranspose3d`` or a trilinear ``F.interpolate`` decoder,
``align_corners`` both ways), skips center-cropped by slicing (valid convolutions) and joined by ``torch.cat``, a
soft Dice loss over ``sum(dim=(2, 3, 4))`` added to ``cross_entropy`` on (N, C, D, H, W) logits with ``weight=`` and
``ignore_index``; forward values, gradients under random upstream gradients, Adam steps, evaluation-mode BatchNorm
and a ``jitorch.compile``d model against eager jitorch. Spatial transformers and flow warping are in
``test_sweep_volumetric_warp.py``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights

CLASSES, IGNORE = 3, -100


def make_unet3d(lib, up="transpose", align_corners=False, base=4, pad=1):
    nn, F = lib.nn, lib.nn.functional

    def block(cin, cout):
        return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=pad, bias=False), nn.BatchNorm3d(cout),
                             nn.ReLU(inplace=True), nn.Conv3d(cout, cout, 3, padding=pad, bias=False),
                             nn.BatchNorm3d(cout), nn.ReLU(inplace=True))

    def center_crop(skip, like):
        # the original U-Net's crop of the encoder features to the decoder's (smaller) size
        d, h, w = like.shape[2:]
        sd, sh, sw = [(s - t) // 2 for s, t in zip(skip.shape[2:], (d, h, w))]
        return skip[:, :, sd:sd + d, sh:sh + h, sw:sw + w]

    class Up(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            # valid convolutions and BatchNorm after: a bias here gets a zero gradient (rounding noise Adam scales up)
            self.up = nn.ConvTranspose3d(cin, cin // 2, 2, stride=2, bias=pad > 0) if up == "transpose" else None
            self.conv = block(cin // 2 + cout if up == "transpose" else cin + cout, cout)

        def forward(self, x, skip):
            if self.up is not None:
                x = self.up(x)
            else:
                x = F.interpolate(x, scale_factor=2, mode="trilinear", align_corners=align_corners)
            return self.conv(lib.cat([center_crop(skip, x), x], dim=1))

    class UNet3D(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc1 = block(1, base)
            self.pool = nn.MaxPool3d(2)
            self.enc2 = block(base, 2 * base)
            self.up = Up(2 * base, base)
            self.head = nn.Conv3d(base, CLASSES, 1)

        def forward(self, x):
            e1 = self.enc1(x)
            e2 = self.enc2(self.pool(e1))
            return self.head(self.up(e2, e1))

    return UNet3D()


def volumes(n=2, size=(12, 12, 12), seed=0):
    """Noisy volumes of spheres whose class sets the intensity; one face of each volume is unlabelled."""
    rng = np.random.default_rng(seed)
    zz, yy, xx = np.mgrid[:size[0], :size[1], :size[2]]
    labels = np.zeros((n,) + size, np.int64)
    for i in range(n):
        for c in range(1, CLASSES):
            cz, cy, cx = rng.uniform(0, size[0]), rng.uniform(0, size[1]), rng.uniform(0, size[2])
            labels[i][(zz - cz) ** 2 + (yy - cy) ** 2 + (xx - cx) ** 2 < rng.uniform(3, 5) ** 2] = c
    imgs = labels[:, None].astype(np.float32) + 0.4 * rng.normal(size=(n, 1) + size).astype(np.float32)
    labels[:, 0] = IGNORE
    return imgs, labels


def crop_like(lib, t, shape):
    d, h, w = shape
    sd, sh, sw = [(s - x) // 2 for s, x in zip(t.shape[-3:], shape)]
    return t[..., sd:sd + d, sh:sh + h, sw:sw + w]


def dice_ce_loss(lib, logits, target, weight, smooth=1e-5):
    """nnU-Net style: soft Dice per sample and class over ``dim=(2, 3, 4)`` plus weighted cross entropy."""
    F = lib.nn.functional
    valid = (target != IGNORE).unsqueeze(1).to(logits.dtype)
    probs = logits.softmax(dim=1) * valid
    one_hot = F.one_hot(target.clamp(min=0), CLASSES).permute(0, 4, 1, 2, 3).to(logits.dtype) * valid
    inter = (probs * one_hot).sum(dim=(2, 3, 4))
    denom = probs.sum(dim=(2, 3, 4)) + one_hot.sum(dim=(2, 3, 4))
    dice = 1 - ((2 * inter + smooth) / (denom + smooth))[:, 1:].mean()
    ce = F.cross_entropy(logits, target, weight=weight, ignore_index=IGNORE)
    return dice + ce, {"dice": dice, "ce": ce}


def unet_run(lib, ref, steps=3, **kw):
    imgs, labels = volumes(size=(12, 12, 12) if kw.get("pad", 1) else (20, 18, 20))
    model = make_unet3d(lib, **kw)
    copy_weights(ref, model)
    x = lib.tensor(imgs)
    out = model(x)
    target = crop_like(lib, lib.tensor(labels), out.shape[2:])
    weight = lib.tensor([0.2, 1.0, 1.5])
    loss, parts = dice_ce_loss(lib, out, target, weight)
    upstream = lib.tensor(np.random.default_rng(3).normal(size=out.shape).astype(np.float32))
    xg = x.clone().requires_grad_()
    out2 = model(xg)
    grads = lib.autograd.grad([out2, loss], [xg] + list(model.parameters()), [upstream, None])
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        step_loss, _ = dice_ce_loss(lib, out, target, weight)
        step_loss.backward()
        opt.step()
        losses.append(step_loss.detach())
    model.eval()
    with lib.no_grad():
        pred = model(x).argmax(1)
    return {"out": out2.detach(), "parts": parts, "grads": list(grads), "losses": losses, "pred": pred,
            "params": [p.detach() for p in model.parameters()],
            "buffers": [b for n, b in model.named_buffers() if "running" in n]}


@pytest.mark.parametrize("kw", [dict(up="transpose"), dict(up="interp", align_corners=False),
                                dict(up="interp", align_corners=True), dict(up="transpose", pad=0)],
                         ids=["transpose", "trilinear", "trilinear-ac", "valid-crop"])
def test_unet3d_training_matches_torch(kw):
    torch.manual_seed(0)
    ref = make_unet3d(torch, **kw)
    th, jt = unet_run(torch, ref, **kw), unet_run(jitorch, ref, **kw)
    assert_runs_match(th, jt, rtol=2e-4, atol=2e-5)
