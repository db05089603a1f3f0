"""DDPM research code, written once against ``lib`` and run with torch and jitorch from torch's initial weights.

A class-conditional UNet on 2-channel 16x16 images (``Conv2d``, ``GroupNorm``, ``SiLU``, a sinusoidal time embedding,
self-attention through ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``, ``torch.cat`` skips,
``ConvTranspose2d`` and ``F.interpolate`` upsampling, a zero-initialised output conv), a linear beta schedule in
buffers (``linspace``/``cumprod``, read with ``gather``), min-SNR-weighted epsilon MSE, AdamW with warmup, gradient
clipping, an EMA copy updated by ``torch._foreach_lerp_`` (buffers by ``lerp_``); then DDIM sampling from the EMA
model with classifier-free guidance, deterministic (eta=0) and stochastic with NumPy's noise.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_close_tree, load_numpy_state, numpy_state, to_numpy

B, C, H, N_CLASSES, T_STEPS = 6, 2, 16, 3, 100
_rng = np.random.default_rng(0)
_grid = np.linspace(-1, 1, H, dtype=np.float32)
# Toy images: blobs whose position depends on the class, plus a little texture.
LABELS = _rng.integers(0, N_CLASSES, B)
IMAGES = np.stack([np.stack([np.tanh(2 * np.exp(-((_grid[:, None] - 0.4 * (y - 1)) ** 2 + _grid[None] ** 2) * 4)
                                     + 0.1 * _rng.standard_normal((H, H))) for _ in range(C)])
                   for y in LABELS]).astype(np.float32)


def timestep_embedding(lib, t, dim, max_period=10000.0):
    half = dim // 2
    freqs = lib.exp(-math.log(max_period) * lib.arange(half, dtype=lib.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return lib.cat([lib.cos(args), lib.sin(args)], dim=-1)


def make_unet(lib, ch=16, temb=32):
    nn, F = lib.nn, lib.nn.functional

    class ResBlock(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(4, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.temb = nn.Linear(temb, cout)
            self.norm2, self.conv2 = nn.GroupNorm(4, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.drop = nn.Dropout(0.0)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, emb):
            h = self.conv1(F.silu(self.norm1(x)))
            h = h + self.temb(F.silu(emb))[:, :, None, None]
            h = self.conv2(self.drop(F.silu(self.norm2(h))))
            return self.skip(x) + h

    class SelfAttention(nn.Module):
        """Multi-head attention over pixels with fused qkv 1x1 conv, as in the DDPM/ADM code."""

        def __init__(self, channels, heads=2):
            super().__init__()
            self.heads = heads
            self.norm = nn.GroupNorm(4, channels)
            self.qkv = nn.Conv2d(channels, 3 * channels, 1)
            self.proj = nn.Conv2d(channels, channels, 1)

        def forward(self, x):
            b, c, hh, ww = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, hh * ww).unbind(1)
            out = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
            return x + self.proj(out.transpose(-1, -2).reshape(b, c, hh, ww))

    class MHABlock(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.norm = nn.LayerNorm(channels)
            self.attn = nn.MultiheadAttention(channels, 4, batch_first=True)

        def forward(self, x):
            b, c, hh, ww = x.shape
            seq = x.flatten(2).transpose(1, 2)
            y = self.norm(seq)
            y, _ = self.attn(y, y, y, need_weights=False)
            return x + y.transpose(1, 2).reshape(b, c, hh, ww)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
            self.label = nn.Embedding(N_CLASSES + 1, temb)  # the last row is the "no class" token of CFG
            self.inp = nn.Conv2d(C, ch, 3, padding=1)
            self.down1 = ResBlock(ch, ch)
            self.pool1 = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
            self.down2 = ResBlock(ch, 2 * ch)
            self.attn2 = SelfAttention(2 * ch)
            self.pool2 = nn.Conv2d(2 * ch, 2 * ch, 3, stride=2, padding=1)
            self.mid1, self.mid_attn, self.mid2 = ResBlock(2 * ch, 2 * ch), MHABlock(2 * ch), ResBlock(2 * ch, 2 * ch)
            self.up2 = nn.ConvTranspose2d(2 * ch, 2 * ch, 4, stride=2, padding=1)
            self.dec2 = ResBlock(4 * ch, 2 * ch)
            self.dec2_attn = SelfAttention(2 * ch, heads=4)
            self.up1 = nn.Conv2d(2 * ch, ch, 3, padding=1)
            self.dec1 = ResBlock(2 * ch, ch)
            self.out = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Conv2d(ch, C, 3, padding=1))
            nn.init.zeros_(self.out[-1].weight)
            nn.init.zeros_(self.out[-1].bias)

        def forward(self, x, t, y):
            emb = self.temb(timestep_embedding(lib, t, ch)) + self.label(y)
            h1 = self.down1(self.inp(x), emb)
            h2 = self.attn2(self.down2(self.pool1(h1), emb))
            h = self.mid2(self.mid_attn(self.mid1(self.pool2(h2), emb)), emb)
            h = self.dec2_attn(self.dec2(lib.cat([self.up2(h), h2], dim=1), emb))
            h = self.up1(F.interpolate(h, scale_factor=2, mode="nearest"))
            h = self.dec1(lib.cat([h, h1], dim=1), emb)
            return self.out(h)

    return UNet()


def make_diffusion(lib):
    nn = lib.nn

    class GaussianDiffusion(nn.Module):
        def __init__(self, model, timesteps=T_STEPS):
            super().__init__()
            self.model = model
            betas = lib.linspace(1e-4, 0.02, timesteps, dtype=lib.float64)
            alphas_cumprod = lib.cumprod(1.0 - betas, dim=0)
            f32 = {"dtype": lib.float32}
            self.register_buffer("alphas_cumprod", alphas_cumprod.to(**f32))
            self.register_buffer("sqrt_alphas_cumprod", alphas_cumprod.sqrt().to(**f32))
            self.register_buffer("sqrt_one_minus_alphas_cumprod", (1.0 - alphas_cumprod).sqrt().to(**f32))
            self.register_buffer("snr", (alphas_cumprod / (1 - alphas_cumprod)).to(**f32))

        @staticmethod
        def extract(a, t, x_shape):
            return a.gather(-1, t).reshape(t.shape[0], *((1,) * (len(x_shape) - 1)))

        def q_sample(self, x0, t, noise):
            return (self.extract(self.sqrt_alphas_cumprod, t, x0.shape) * x0
                    + self.extract(self.sqrt_one_minus_alphas_cumprod, t, x0.shape) * noise)

        def loss(self, x0, t, y, noise, gamma=5.0):
            pred = self.model(self.q_sample(x0, t, noise), t, y)
            mse = lib.nn.functional.mse_loss(pred, noise, reduction="none").mean(dim=(1, 2, 3))
            snr = self.snr[t]
            weight = lib.clamp(snr, max=gamma) / snr  # min-SNR-gamma weighting for epsilon prediction
            return (weight * mse).mean(), mse.detach()

    lib.manual_seed(0)
    return GaussianDiffusion(make_unet(lib))


def ddim_sample(lib, diffusion, x, y, steps, guidance=2.0, eta=0.0, noises=None):
    """DDIM with classifier-free guidance; ``noises`` (one array per step) are the draws of eta > 0."""
    ac = diffusion.alphas_cumprod
    ts = list(range(T_STEPS - 1, -1, -T_STEPS // steps))
    null = lib.full_like(y, N_CLASSES)
    trajectory = []
    for i, t in enumerate(ts):
        tt = lib.full((x.shape[0],), t, dtype=lib.long)
        eps_c, eps_u = diffusion.model(lib.cat([x, x]), lib.cat([tt, tt]), lib.cat([y, null])).chunk(2)
        eps = eps_u + guidance * (eps_c - eps_u)
        a_t = ac[t]
        a_prev = ac[ts[i + 1]] if i + 1 < len(ts) else lib.tensor(1.0)
        x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
        sigma = eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).sqrt()
        x = a_prev.sqrt() * x0 + (1 - a_prev - sigma ** 2).clamp(min=0).sqrt() * eps
        if eta > 0:
            x = x + sigma * lib.tensor(noises[i])
        trajectory.append(x)
    return lib.stack(trajectory)


def train(lib, state, steps=4, ema_decay=0.9):
    F = lib.nn.functional
    rng = np.random.default_rng(1)
    diffusion = load_numpy_state(lib, make_diffusion(lib), state)
    ema = copy.deepcopy(diffusion).eval().requires_grad_(False)
    opt = lib.optim.AdamW(diffusion.model.parameters(), lr=2e-3, weight_decay=1e-2, betas=(0.9, 0.99))
    sched = lib.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
    x0 = lib.tensor(IMAGES)
    history = []
    for _ in range(steps):
        t = lib.tensor(rng.integers(0, T_STEPS, B))
        noise = lib.tensor(rng.standard_normal(IMAGES.shape).astype(np.float32))
        drop = lib.tensor(rng.uniform(size=B) < 0.3)
        y = lib.where(drop, lib.full_like(lib.tensor(LABELS), N_CLASSES), lib.tensor(LABELS))
        diffusion.train()
        loss, per_sample = diffusion.loss(x0, t, y, noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = lib.nn.utils.clip_grad_norm_(diffusion.model.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
        with lib.no_grad():
            ema_params = list(ema.model.parameters())
            lib._foreach_lerp_(ema_params, list(diffusion.model.parameters()), 1.0 - ema_decay)
            for b_ema, b in zip(ema.buffers(), diffusion.buffers()):
                b_ema.lerp_(b, 1.0 - ema_decay)
        history.append([loss, per_sample, grad_norm, sched.get_last_lr(),
                        {n: p.grad for n, p in diffusion.model.named_parameters()}])
    with lib.no_grad():
        val = F.mse_loss(ema.model(x0, lib.zeros(B, dtype=lib.long), lib.tensor(LABELS)), x0)
    return to_numpy(history), numpy_state(diffusion), numpy_state(ema), to_numpy(val), ema


def test_ddpm_training_with_ema_matches_torch():
    state = numpy_state(make_diffusion(torch))
    th, jt = train(torch, state), train(jitorch, state)
    assert_close_tree(th[:4], jt[:4], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("eta", [0.0, 1.0])
def test_ddim_sampling_from_the_ema_model_matches_torch(eta):
    state = numpy_state(make_diffusion(torch))
    ema_state = train(torch, state, steps=2)[2]
    rng = np.random.default_rng(2)
    x_T = rng.standard_normal((4, C, H, H)).astype(np.float32)
    noises = [rng.standard_normal(x_T.shape).astype(np.float32) for _ in range(5)]
    res = []
    for lib in LIBS:
        ema = load_numpy_state(lib, make_diffusion(lib), ema_state).eval()
        with lib.inference_mode():
            res.append(to_numpy(ddim_sample(lib, ema, lib.tensor(x_T), lib.tensor([0, 1, 2, 1]), 5, eta=eta,
                                            noises=noises)))
    assert_close_tree(*res, rtol=1e-4, atol=1e-5)


def test_ddpm_step_in_channels_last_matches_torch():
    """``model.to(memory_format=channels_last)`` with channels-last batches, as diffusion training scripts do: every
    module's output has torch's strides (a GroupNorm or padding that went row-major would cost a copy per layer, one
    that went channels-last where torch's is row-major would break a ``.view``), and the gradients keep the layout."""
    state = numpy_state(make_diffusion(torch))
    rng = np.random.default_rng(3)
    t_np, noise_np = rng.integers(0, T_STEPS, B), rng.standard_normal(IMAGES.shape).astype(np.float32)
    res = []
    for lib in LIBS:
        diffusion = load_numpy_state(lib, make_diffusion(lib), state).to(memory_format=lib.channels_last)
        strides = {}
        for name, module in diffusion.model.named_modules():
            module.register_forward_hook(  # nn.MultiheadAttention's output is a tuple
                lambda m, args, out, name=name: strides.__setitem__(name, getattr(out, "stride", tuple)()))
        x0 = lib.tensor(IMAGES).to(memory_format=lib.channels_last)
        noise = lib.tensor(noise_np).to(memory_format=lib.channels_last)
        loss, per_sample = diffusion.loss(x0, lib.tensor(t_np), lib.tensor(LABELS), noise)
        loss.backward()
        grads = {n: p.grad for n, p in diffusion.named_parameters()}
        layouts = {n: g.is_contiguous(memory_format=lib.channels_last) for n, g in grads.items() if g.dim() == 4}
        res.append([loss, per_sample, grads, strides, layouts])
    assert_close_tree(*res, rtol=1e-4, atol=1e-5)
