"""NeRF-style implicit model, written once against ``lib`` and run with torch and jitorch: positional encoding, an
MLP with a skip concat, volume rendering (exclusive cumprod of transmittance), hierarchical sampling by
``searchsorted`` over deterministic bins, and ``grid_sample`` feature grids; outputs, losses and parameters after a
few Adam steps must agree."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights


def encode(lib, x, n_freq):
    freqs = 2.0 ** lib.arange(n_freq, dtype=x.dtype)
    xb = x[..., None, :] * freqs[:, None]  # (..., F, 3)
    enc = lib.cat([lib.sin(xb), lib.cos(xb)], dim=-1).flatten(-2)
    return lib.cat([x, enc], dim=-1)


def make_mlp(lib, n_freq=4, width=32):
    nn = lib.nn
    d_in = 3 + 3 * 2 * n_freq

    class NeRF(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_freq = n_freq
            self.l0 = nn.Linear(d_in, width)
            self.l1 = nn.Linear(width, width)
            self.l2 = nn.Linear(width + d_in, width)  # skip concat
            self.sigma = nn.Linear(width, 1)
            self.rgb = nn.Sequential(nn.Linear(width, width // 2), nn.ReLU(), nn.Linear(width // 2, 3))

        def forward(self, pts):
            e = encode(lib, pts, self.n_freq)
            h = lib.relu(self.l0(e))
            h = lib.relu(self.l1(h))
            h = lib.relu(self.l2(lib.cat([h, e], -1)))
            sigma = lib.nn.functional.softplus(self.sigma(h)[..., 0] - 1.0)
            return sigma, lib.sigmoid(self.rgb(h))

    return NeRF()


def render(lib, model, rays_o, rays_d, t):
    pts = rays_o[:, None, :] + rays_d[:, None, :] * t[..., None]
    sigma, rgb = model(pts)
    delta = lib.cat([t[:, 1:] - t[:, :-1], lib.full_like(t[:, :1], 1e10)], -1)
    delta = delta * rays_d.norm(dim=-1, keepdim=True)
    alpha = 1.0 - lib.exp(-sigma * delta)
    trans = lib.cumprod(lib.cat([lib.ones_like(alpha[:, :1]), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    w = alpha * trans
    color = (w[..., None] * rgb).sum(-2)
    depth = (w * t).sum(-1)
    acc = w.sum(-1)
    return color, depth, acc, w


def sample_pdf(lib, bins, weights, n_samples):
    weights = weights + 1e-5
    pdf = weights / weights.sum(-1, keepdim=True)
    cdf = lib.cumsum(pdf, -1)
    cdf = lib.cat([lib.zeros_like(cdf[:, :1]), cdf], -1)
    u = lib.linspace(0.0, 1.0, n_samples).expand(cdf.shape[0], n_samples).contiguous()
    inds = lib.searchsorted(cdf, u, right=True)
    below = lib.clamp(inds - 1, min=0)
    above = lib.clamp(inds, max=cdf.shape[-1] - 1)
    g = lib.stack([below, above], -1)
    shape = (g.shape[0], g.shape[1], cdf.shape[-1])
    cdf_g = lib.gather(cdf[:, None, :].expand(shape), 2, g)
    bins_g = lib.gather(bins[:, None, :].expand(shape), 2, g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = lib.where(denom < 1e-5, lib.ones_like(denom), denom)
    tt = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + tt * (bins_g[..., 1] - bins_g[..., 0])


def nerf_run(lib, state=None, steps=3):
    rng = np.random.default_rng(0)
    n_rays, n_coarse, n_fine = 16, 12, 10
    rays_o = lib.tensor(rng.normal(size=(n_rays, 3)).astype(np.float32) * 0.1)
    rays_d = lib.tensor(rng.normal(size=(n_rays, 3)).astype(np.float32))
    target = lib.tensor(rng.uniform(size=(n_rays, 3)).astype(np.float32))
    lib.manual_seed(0)
    model = make_mlp(lib)
    if state is not None:
        copy_weights(state, model)
    opt = lib.optim.Adam(model.parameters(), lr=5e-3)
    t = lib.linspace(2.0, 6.0, n_coarse).expand(n_rays, n_coarse)
    out = {"loss": [], "fine_t": None}
    for _ in range(steps):
        opt.zero_grad()
        color, depth, acc, w = render(lib, model, rays_o, rays_d, t)
        mids = 0.5 * (t[:, 1:] + t[:, :-1])
        t_fine = sample_pdf(lib, mids, w[:, 1:-1].detach(), n_fine)
        t_all, _ = lib.sort(lib.cat([t, t_fine], -1), -1)
        color_f, depth_f, _, _ = render(lib, model, rays_o, rays_d, t_all)
        loss = ((color - target) ** 2).mean() + ((color_f - target) ** 2).mean() + 1e-3 * depth_f.mean()
        loss.backward()
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        opt.step()
        out["loss"].append(loss.item())
        out["fine_t"] = t_fine
        out["acc"] = acc
    out["params"] = list(model.parameters())
    return out, model


def test_nerf_training_matches_torch():
    th, th_model = nerf_run(torch)
    jt, _ = nerf_run(jitorch, state=_initial(th_model))
    params = th.pop("params"), jt.pop("params")
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-6, what="nerf")
    # Adam divides by sqrt(v): a weight whose gradient is rounding-level small moves by up to lr in either library
    assert_runs_match(*params, rtol=1e-5, atol=1e-5, what="nerf params")


def _initial(model):
    torch.manual_seed(0)
    return make_mlp(torch)


def _grid_sample_both(grid_shape, points_shape, seed, **kw):
    """grid_sample of a feature grid at points in both libraries: output and both gradients compared."""
    rng = np.random.default_rng(seed)
    grid_np = rng.normal(size=grid_shape).astype(np.float32)
    pts_np = rng.uniform(-1.3, 1.3, size=points_shape).astype(np.float32)
    res = []
    for lib in LIBS:
        feat = lib.tensor(grid_np, requires_grad=True)
        pts = lib.tensor(pts_np, requires_grad=True)
        y = lib.nn.functional.grid_sample(feat, pts, **kw)
        y.backward(lib.tensor(np.random.default_rng(seed + 1).normal(size=tuple(y.shape)).astype(np.float32)))
        res.append([y, feat.grad, pts.grad])
    assert_runs_match(*res, rtol=1e-5, atol=1e-5, what=f"grid_sample {grid_shape} {kw}")


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d_feature_grid(align_corners, padding_mode, mode):
    _grid_sample_both((2, 4, 7, 9), (2, 5, 6, 2), 1, mode=mode, padding_mode=padding_mode,
                      align_corners=align_corners)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_feature_grid(align_corners, padding_mode, mode):
    _grid_sample_both((1, 3, 4, 5, 6), (1, 8, 1, 1, 3), 2, mode=mode, padding_mode=padding_mode,
                      align_corners=align_corners)
