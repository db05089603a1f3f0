"""Super-resolution research code, written once against ``lib`` and run with torch and jitorch: ESPCN with
``pixel_shuffle``, bicubic/bilinear ``interpolate`` baselines (antialiased downscaling too), PSNR and SSIM computed
with a Gaussian window through grouped ``conv2d``, and ``avg_pool2d``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

SCALE = 2


def make_espcn(lib, channels=3):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(channels, 16, 5, padding=2), nn.Tanh(), nn.Conv2d(16, 8, 3, padding=1), nn.Tanh(),
                         nn.Conv2d(8, channels * SCALE ** 2, 3, padding=1), nn.PixelShuffle(SCALE))


def gaussian_window(lib, size=7, sigma=1.5, channels=3):
    g = lib.exp(-((lib.arange(size, dtype=lib.float32) - size // 2) ** 2) / (2 * sigma ** 2))
    g = g / g.sum()
    return (g[:, None] @ g[None, :]).expand(channels, 1, size, size).contiguous()


def ssim(lib, x, y, window):
    f = lib.nn.functional
    c = x.shape[1]
    mu_x, mu_y = f.conv2d(x, window, groups=c), f.conv2d(y, window, groups=c)
    sxx = f.conv2d(x * x, window, groups=c) - mu_x ** 2
    syy = f.conv2d(y * y, window, groups=c) - mu_y ** 2
    sxy = f.conv2d(x * y, window, groups=c) - mu_x * mu_y
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    m = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x ** 2 + mu_y ** 2 + c1) * (sxx + syy + c2))
    return m.mean(dim=(1, 2, 3))


def psnr(lib, x, y):
    return 10 * lib.log10(1.0 / ((x - y) ** 2).mean(dim=(1, 2, 3)))


def images(n=2, size=24, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] / size
    base = np.stack([np.sin(6 * xx + c) * np.cos(4 * yy - c) for c in range(3)])
    return np.clip(0.5 + 0.4 * base[None] + 0.05 * rng.normal(size=(n, 3, size, size)), 0, 1).astype(np.float32)


def sr_run(lib, state, steps=3):
    f = lib.nn.functional
    hr = lib.tensor(images())
    lr_img = f.interpolate(hr, scale_factor=1 / SCALE, mode="bicubic", antialias=True, align_corners=False)
    model = make_espcn(lib)
    copy_weights(state, model)
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    window = gaussian_window(lib)
    out = {"loss": [], "lr_img": lr_img}
    for _ in range(steps):
        opt.zero_grad()
        sr = model(lr_img)
        loss = f.l1_loss(sr, hr) + 0.1 * (1 - ssim(lib, sr, hr, window).mean())
        loss = loss + 0.1 * f.mse_loss(f.avg_pool2d(sr, 2), f.avg_pool2d(hr, 2))
        loss.backward()
        out["loss"].append(loss.item())
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        opt.step()
    with lib.no_grad():
        sr = model(lr_img).clamp(0, 1)
        out["psnr"] = psnr(lib, sr, hr)
        out["ssim"] = ssim(lib, sr, hr, window)
        for mode in ("bilinear", "bicubic"):
            up = f.interpolate(lr_img, scale_factor=SCALE, mode=mode, align_corners=False).clamp(0, 1)
            out[f"psnr_{mode}"], out[f"ssim_{mode}"] = psnr(lib, up, hr), ssim(lib, up, hr, window)
    out["params"] = list(model.parameters())
    return out


def test_espcn_training_matches_torch():
    torch.manual_seed(0)
    reference = make_espcn(torch)
    assert_runs_match(sr_run(torch, reference), sr_run(jitorch, reference), rtol=1e-5, atol=1e-6, what="espcn")


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("size", [(10, 7), (37, 50)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_resize_baselines_and_gradients(mode, antialias, size, align_corners):
    x_np = images(1, 24, seed=1)
    g_np = np.random.default_rng(2).normal(size=(1, 3) + size).astype(np.float32)
    res = []
    for lib in LIBS:
        x = lib.tensor(x_np, requires_grad=True)
        y = lib.nn.functional.interpolate(x, size=size, mode=mode, antialias=antialias, align_corners=align_corners)
        y.backward(lib.tensor(g_np))
        res.append([y, x.grad])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what=f"resize {mode} aa={antialias} {size} {align_corners}")


@pytest.mark.parametrize("pool_kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                     dict(kernel_size=3, stride=2, padding=1, count_include_pad=False,
                                          ceil_mode=True),
                                     dict(kernel_size=2, divisor_override=3)])
def test_avg_pool_metrics(pool_kw):
    x_np = images(2, 15, seed=3)
    res = []
    for lib in LIBS:
        x = lib.tensor(x_np, requires_grad=True)
        y = lib.nn.functional.avg_pool2d(x, **pool_kw)
        (y * y).sum().backward()
        res.append([y, x.grad])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what=f"avg_pool2d {pool_kw}")
