"""Optical-flow research code (PWC-Net / unsupervised-flow style), written once against ``lib`` and run with torch
and jitorch: backward warping from a ``meshgrid(indexing='ij')`` base grid plus the flow, normalized to [-1, 1] for
``grid_sample``; a correlation cost volume by ``F.pad`` and shifted slices and the same by ``F.unfold``; ``avg_pool2d``
image pyramids; coarse flow upsampled by ``interpolate(scale_factor=2, mode='bilinear')`` times 2; first- and
second-order smoothness on ``x[:, :, 1:] - x[:, :, :-1]`` and a Charbonnier photometric loss; SGD steps and a
``jitorch.compile``d flow net against eager jitorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights


def warp(lib, img, flow, align_corners=True, padding_mode="zeros"):
    """Sample ``img`` at each pixel moved by ``flow`` (``(N, 2, H, W)``, x then y, in pixels)."""
    n, _, h, w = img.shape
    ys, xs = lib.meshgrid(lib.arange(h, dtype=img.dtype), lib.arange(w, dtype=img.dtype), indexing="ij")
    base = lib.stack([xs, ys], dim=0).unsqueeze(0)  # (1, 2, H, W)
    coords = base + flow
    if align_corners:
        gx = 2.0 * coords[:, 0] / max(w - 1, 1) - 1.0
        gy = 2.0 * coords[:, 1] / max(h - 1, 1) - 1.0
    else:
        gx = (2.0 * coords[:, 0] + 1.0) / w - 1.0
        gy = (2.0 * coords[:, 1] + 1.0) / h - 1.0
    grid = lib.stack([gx, gy], dim=-1)
    out = lib.nn.functional.grid_sample(img, grid, mode="bilinear", padding_mode=padding_mode,
                                        align_corners=align_corners)
    # the occlusion mask of UnFlow-style losses: where a sample of ones lost weight to the zero padding
    mask = lib.nn.functional.grid_sample(lib.ones_like(img[:, :1]), grid, align_corners=align_corners)
    return out, (mask > 0.999).to(img.dtype)


def cost_volume_pad(lib, f1, f2, max_disp=2):
    """Correlation of ``f1`` with ``f2`` shifted by every displacement up to ``max_disp``, through ``F.pad``."""
    h, w = f1.shape[2:]
    padded = lib.nn.functional.pad(f2, [max_disp] * 4)
    costs = []
    for dy in range(2 * max_disp + 1):
        for dx in range(2 * max_disp + 1):
            costs.append((f1 * padded[:, :, dy:dy + h, dx:dx + w]).mean(dim=1, keepdim=True))
    return lib.nn.functional.leaky_relu(lib.cat(costs, dim=1), 0.1)


def cost_volume_unfold(lib, f1, f2, max_disp=2):
    """The same correlation as ``cost_volume_pad``: the neighbourhoods of ``f2`` as ``F.unfold`` columns."""
    n, c, h, w = f1.shape
    k = 2 * max_disp + 1
    cols = lib.nn.functional.unfold(f2, kernel_size=k, padding=max_disp).view(n, c, k * k, h, w)
    return lib.nn.functional.leaky_relu((f1.unsqueeze(2) * cols).mean(dim=1), 0.1)


def charbonnier(x, eps=1e-3, alpha=0.45):
    return ((x ** 2 + eps ** 2) ** alpha).mean()


def smoothness(flow, second_order=False):
    dx = flow[:, :, :, 1:] - flow[:, :, :, :-1]
    dy = flow[:, :, 1:] - flow[:, :, :-1]
    if second_order:
        dx = dx[:, :, :, 1:] - dx[:, :, :, :-1]
        dy = dy[:, :, 1:] - dy[:, :, :-1]
    return dx.abs().mean() + dy.abs().mean()


def make_flow_net(lib, corr="pad", ch=8, levels=2):
    nn, F = lib.nn, lib.nn.functional
    volume = cost_volume_pad if corr == "pad" else cost_volume_unfold

    class FlowNet(nn.Module):
        """Coarse-to-fine: at each pyramid level warp image 2 by the upsampled flow, correlate, refine."""

        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1), nn.LeakyReLU(0.1),
                                          nn.Conv2d(ch, ch, 3, padding=1), nn.LeakyReLU(0.1))
            self.estimator = nn.Sequential(nn.Conv2d(25 + ch + 2, 16, 3, padding=1), nn.LeakyReLU(0.1),
                                           nn.Conv2d(16, 2, 3, padding=1))

        def forward(self, im1, im2):
            pyramid = [(im1, im2)]
            for _ in range(levels - 1):
                a, b = pyramid[-1]
                pyramid.append((F.avg_pool2d(a, 2), F.avg_pool2d(b, 2)))
            flow, flows = None, []
            for a, b in reversed(pyramid):
                n, _, h, w = a.shape
                if flow is None:
                    flow = a.new_zeros(n, 2, h, w)
                else:
                    flow = F.interpolate(flow, scale_factor=2, mode="bilinear", align_corners=False) * 2
                fa, fb = self.features(a), self.features(b)
                fb_warped, _ = warp(lib, fb, flow)
                cost = volume(lib, fa, fb_warped)
                flow = flow + self.estimator(lib.cat([cost, fa, flow], dim=1))
                flows.append(flow)
            return flows

    return FlowNet()


def flow_loss(lib, flows, im1, im2):
    F = lib.nn.functional
    total, parts = 0.0, []
    for level, flow in enumerate(flows):
        scale = 2 ** (len(flows) - 1 - level)
        a, b = (F.avg_pool2d(im1, scale), F.avg_pool2d(im2, scale)) if scale > 1 else (im1, im2)
        warped, mask = warp(lib, b, flow)
        photo = charbonnier((warped - a) * mask)
        smooth = smoothness(flow) + 0.5 * smoothness(flow, second_order=True)
        parts += [photo, smooth]
        total = total + photo + 0.1 * smooth
    return total, parts


def frames(n=2, h=16, w=20, seed=0):
    """Smooth random images and the same images shifted by a sub-pixel translation."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:h, :w].astype(np.float32)
    im1, im2 = [], []
    for _ in range(n):
        f = rng.uniform(0.2, 0.6, (3, 2))
        p = rng.uniform(0, 6.28, (3, 2))
        dx, dy = rng.uniform(-1.5, 1.5, 2)
        im1.append(np.stack([np.sin(f[c, 0] * xx + p[c, 0]) * np.cos(f[c, 1] * yy + p[c, 1]) for c in range(3)]))
        im2.append(np.stack([np.sin(f[c, 0] * (xx + dx) + p[c, 0]) * np.cos(f[c, 1] * (yy + dy) + p[c, 1])
                             for c in range(3)]))
    return np.asarray(im1, np.float32), np.asarray(im2, np.float32)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_warp_by_flow_matches_torch(align_corners, padding_mode):
    im1, _ = frames()
    flow = np.random.default_rng(1).normal(0, 2.0, (2, 2, 16, 20)).astype(np.float32)

    def run(lib):
        img, fl = lib.tensor(im1, requires_grad=True), lib.tensor(flow, requires_grad=True)
        out, mask = warp(lib, img, fl, align_corners, padding_mode)
        upstream = lib.tensor(np.random.default_rng(2).normal(size=out.shape).astype(np.float32))
        return [out, mask, *lib.autograd.grad(out, [img, fl], upstream)]
    assert_runs_match(run(torch), run(jitorch), rtol=1e-5, atol=1e-5)


def test_cost_volumes_by_pad_and_by_unfold_match_torch_and_each_other():
    rng = np.random.default_rng(3)
    f1, f2 = rng.normal(size=(2, 2, 4, 7, 9)).astype(np.float32)

    def run(lib):
        a, b = lib.tensor(f1, requires_grad=True), lib.tensor(f2, requires_grad=True)
        by_pad, by_unfold = cost_volume_pad(lib, a, b), cost_volume_unfold(lib, a, b)
        upstream = lib.tensor(rng_up.normal(size=by_pad.shape).astype(np.float32))
        grads = lib.autograd.grad([by_pad, by_unfold], [a, b], [upstream, upstream])
        return [by_pad, by_unfold, *grads]
    rng_up = np.random.default_rng(4)
    th = run(torch)
    rng_up = np.random.default_rng(4)
    jt = run(jitorch)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jt[0].detach().numpy(), jt[1].detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("corr", ["pad", "unfold"])
def test_flow_net_training_matches_torch(corr):
    im1, im2 = frames()
    torch.manual_seed(0)
    ref = make_flow_net(torch, corr)

    def run(lib):
        model = make_flow_net(lib, corr)
        copy_weights(ref, model)
        opt = lib.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        a, b = lib.tensor(im1), lib.tensor(im2)
        out = {"losses": [], "parts": []}
        for _ in range(3):
            opt.zero_grad()
            flows = model(a, b)
            loss, parts = flow_loss(lib, flows, a, b)
            loss.backward()
            opt.step()
            out["losses"].append(loss.detach())
            out["parts"].append([p.detach() for p in parts])
        out["flows"] = [f.detach() for f in flows]
        out["params"] = [p.detach() for p in model.parameters()]
        return out
    assert_runs_match(run(torch), run(jitorch), rtol=2e-4, atol=1e-5)


def test_compiled_flow_net_matches_eager_jitorch():
    im1, im2 = frames(seed=5)
    torch.manual_seed(1)
    ref = make_flow_net(torch, "pad")
    results = []
    for compiled in (False, True):
        model = make_flow_net(jitorch, "pad")
        copy_weights(ref, model)
        step_model = jitorch.compile(model) if compiled else model
        opt = jitorch.optim.SGD(model.parameters(), lr=1e-2)
        a, b = jitorch.tensor(im1), jitorch.tensor(im2)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss, _ = flow_loss(jitorch, step_model(a, b), a, b)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        grads_out = [p.grad for p in model.parameters()]
        results.append({"losses": losses, "grads": grads_out, "params": [p.detach() for p in model.parameters()]})
    assert_runs_match(results[0], results[1], rtol=1e-4, atol=1e-6)
