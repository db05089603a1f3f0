"""Variational autoencoders, written once against ``lib`` and run with torch and jitorch from torch's initial weights.

A conv VAE (``BatchNorm2d``, ``LeakyReLU``, ``ConvTranspose2d``) with the reparameterisation trick on NumPy's noise,
``binary_cross_entropy_with_logits`` reconstruction, the analytic KL and ``distributions.kl_divergence`` of
``Independent(Normal)``s, a linearly annealed beta with free bits, and an importance-weighted bound through
``logsumexp``; then a VQ-VAE whose codebook is assigned by ``torch.cdist``/``argmin`` (and by the expanded
``||a||^2 - 2ab + ||b||^2`` form), quantised with a straight-through estimator and a commitment loss, and updated by
exponential moving averages through ``index_add_``/``scatter_add_`` with Laplace smoothing and dead-code restarts.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_close_tree, load_numpy_state, numpy_state, to_numpy

B, H, Z = 8, 16, 6
_rng = np.random.default_rng(0)
_yy, _xx = np.mgrid[0:H, 0:H] / (H - 1)
# Soft strokes in [0, 1]: BCE targets that are not only 0 and 1.
IMAGES = np.stack([1 / (1 + np.exp(-12 * (np.abs(np.sin(3 * _xx * a + _yy * b)) - 0.6)))
                   for a, b in _rng.uniform(0.5, 2.5, (B, 2))])[:, None].astype(np.float32)


def make_vae(lib):
    nn = lib.nn

    class ConvVAE(nn.Module):
        def __init__(self, ch=8):
            super().__init__()
            # no conv bias before a BatchNorm: it cancels, and its rounding-noise gradient would drive Adam
            self.enc = nn.Sequential(
                nn.Conv2d(1, ch, 4, 2, 1, bias=False), nn.BatchNorm2d(ch), nn.LeakyReLU(0.2),
                nn.Conv2d(ch, 2 * ch, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * ch), nn.LeakyReLU(0.2), nn.Flatten())
            self.fc_mu, self.fc_logvar = nn.Linear(2 * ch * 16, Z), nn.Linear(2 * ch * 16, Z)
            self.fc_dec = nn.Linear(Z, 2 * ch * 16)
            self.dec = nn.Sequential(
                nn.Unflatten(1, (2 * ch, 4, 4)), nn.ReLU(),
                nn.ConvTranspose2d(2 * ch, ch, 4, 2, 1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(),
                nn.ConvTranspose2d(ch, 1, 4, 2, 1))

        def encode(self, x):
            h = self.enc(x)
            return self.fc_mu(h), self.fc_logvar(h).clamp(-8, 8)

        def decode(self, z):
            return self.dec(self.fc_dec(z))

        def forward(self, x, eps):
            mu, logvar = self.encode(x)
            z = mu + eps * lib.exp(0.5 * logvar)
            return self.decode(z), mu, logvar, z

    lib.manual_seed(0)
    return ConvVAE()


def vae_train(lib, state, steps=5, warmup=3, free_bits=0.05):
    F, D = lib.nn.functional, lib.distributions
    rng = np.random.default_rng(1)
    model = load_numpy_state(lib, make_vae(lib), state)
    opt = lib.optim.Adam(model.parameters(), lr=3e-3)
    x = lib.tensor(IMAGES)
    history = []
    for step in range(steps):
        model.train()
        beta = min(1.0, step / warmup)
        eps = lib.tensor(rng.standard_normal((B, Z)).astype(np.float32))
        logits, mu, logvar, z = model(x, eps)
        recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / B
        kl_per_dim = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
        kl = lib.clamp(kl_per_dim.mean(0), min=free_bits).sum()  # free bits per latent dimension
        q = D.Independent(D.Normal(mu, (0.5 * logvar).exp()), 1)
        p = D.Independent(D.Normal(lib.zeros_like(mu), lib.ones_like(mu)), 1)
        kl_lib = D.kl_divergence(q, p).mean()
        loss = recon + beta * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append([loss, recon, kl, kl_lib, kl_per_dim.sum(1).mean(), {n: p.grad for n, p in
                                                                             model.named_parameters()}])
    model.eval()
    with lib.no_grad():
        # importance-weighted bound with K samples per image: log mean_k p(x|z_k) p(z_k) / q(z_k|x)
        k_eps = lib.tensor(rng.standard_normal((4, B, Z)).astype(np.float32))
        mu, logvar = model.encode(x)
        std = (0.5 * logvar).exp()
        zs = mu + k_eps * std
        logits = model.decode(zs.flatten(0, 1)).view(4, B, 1, H, H)
        log_px = -F.binary_cross_entropy_with_logits(logits, x.expand(4, -1, -1, -1, -1),
                                                     reduction="none").sum((2, 3, 4))
        log_pz = D.Normal(0.0, 1.0).log_prob(zs).sum(-1)
        log_qz = D.Normal(mu, std).log_prob(zs).sum(-1)
        iwae = (lib.logsumexp(log_px + log_pz - log_qz, dim=0) - np.log(4)).mean()
        samples = lib.sigmoid(model.decode(k_eps[0]))
    return to_numpy(history), numpy_state(model), to_numpy([iwae, samples])


def test_conv_vae_with_beta_annealing_matches_torch():
    state = numpy_state(make_vae(torch))
    assert_close_tree(vae_train(torch, state), vae_train(jitorch, state), rtol=1e-4, atol=1e-5)


def make_vqvae(lib, K=16, D=4):
    nn, F = lib.nn, lib.nn.functional

    class VectorQuantizerEMA(nn.Module):
        def __init__(self, decay=0.8, eps=1e-5, commitment=0.25):
            super().__init__()
            self.K, self.decay, self.eps, self.commitment = K, decay, eps, commitment
            self.embedding = nn.Embedding(K, D)
            self.embedding.weight.data.uniform_(-1 / K, 1 / K)
            self.register_buffer("cluster_size", lib.zeros(K))
            self.register_buffer("embed_avg", self.embedding.weight.data.clone())

        def forward(self, z_e, use_cdist=True, restart=None):
            z = z_e.permute(0, 2, 3, 1).contiguous()
            flat = z.view(-1, D)
            w = self.embedding.weight
            if use_cdist:
                idx = lib.cdist(flat, w).argmin(dim=1)
            else:
                d = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ w.t() + w.pow(2).sum(1)
                idx = lib.argmin(d, dim=1)
            z_q = self.embedding(idx).view_as(z)
            if self.training:
                with lib.no_grad():
                    one_hot = F.one_hot(idx, self.K).type(flat.dtype)
                    counts = lib.zeros(self.K).scatter_add_(0, idx, lib.ones_like(idx, dtype=flat.dtype))
                    self.cluster_size.mul_(self.decay).add_(counts, alpha=1 - self.decay)
                    embed_sum = lib.zeros_like(self.embed_avg).index_add_(0, idx, flat)
                    self.embed_avg.mul_(self.decay).add_(embed_sum, alpha=1 - self.decay)
                    n = self.cluster_size.sum()
                    smoothed = (self.cluster_size + self.eps) / (n + self.K * self.eps) * n
                    self.embedding.weight.data.copy_(self.embed_avg / smoothed.unsqueeze(1))
                    if restart is not None:  # codes used less than a threshold take encoder outputs
                        dead = self.cluster_size < 0.5
                        picks = flat[lib.as_tensor(restart[: int(dead.sum())])]
                        self.embedding.weight.data[dead] = picks
                        self.embed_avg[dead] = picks
                        self.cluster_size[dead] = 1.0
                    avg = one_hot.mean(0)
                    perplexity = lib.exp(-(avg * lib.log(avg + 1e-10)).sum())
            else:
                perplexity = lib.tensor(0.0)
            commit = self.commitment * F.mse_loss(z, z_q.detach())
            z_st = z + (z_q - z).detach()
            return z_st.permute(0, 3, 1, 2), commit, idx, perplexity

    class VQVAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Conv2d(1, 8, 4, 2, 1), nn.ReLU(), nn.Conv2d(8, D, 4, 2, 1))
            self.vq = VectorQuantizerEMA()
            self.dec = nn.Sequential(nn.ConvTranspose2d(D, 8, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(8, 1, 4, 2, 1))

        def forward(self, x, **kw):
            z_q, commit, idx, perplexity = self.vq(self.enc(x), **kw)
            return self.dec(z_q), commit, idx, perplexity

    lib.manual_seed(0)
    return VQVAE()


def vq_train(lib, state, use_cdist, steps=5):
    F = lib.nn.functional
    rng = np.random.default_rng(3)
    model = load_numpy_state(lib, make_vqvae(lib), state)
    opt = lib.optim.Adam(model.parameters(), lr=2e-3)
    x = lib.tensor(IMAGES * 2 - 1)
    history = []
    for step in range(steps):
        restart = rng.permutation(B * 16) if step == 2 else None
        recon, commit, idx, perplexity = model(x, use_cdist=use_cdist, restart=restart)
        loss = F.mse_loss(recon, x) + commit
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the codebook is trained by EMA only: its weight never gets a gradient
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        history.append([loss, commit, idx, perplexity, grads])
    model.eval()
    with lib.no_grad():
        out = model(x, use_cdist=use_cdist)
    return to_numpy(history), numpy_state(model), to_numpy(out)


@pytest.mark.parametrize("use_cdist", [True, False])
def test_vqvae_with_ema_codebook_matches_torch(use_cdist):
    state = numpy_state(make_vqvae(torch))
    th, jt = vq_train(torch, state, use_cdist), vq_train(jitorch, state, use_cdist)
    assert "vq.embedding.weight" not in th[0][0][-1]
    assert_close_tree(th, jt, rtol=1e-4, atol=1e-5)


def test_straight_through_gradient_reaches_the_encoder():
    rng = np.random.default_rng(4)
    z_np, code_np = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    g_np = rng.standard_normal((5, 3)).astype(np.float32)
    res = []
    for lib in LIBS:
        z, codes = lib.tensor(z_np, requires_grad=True), lib.tensor(code_np, requires_grad=True)
        idx = lib.cdist(z, codes).argmin(1)
        q = codes[idx]
        st = z + (q - z).detach()
        codebook_loss = ((q - z.detach()) ** 2).mean()
        (st * lib.tensor(g_np)).sum().backward(retain_graph=True)
        z_grad = z.grad.clone()
        codebook_loss.backward()
        res.append(to_numpy([st, idx, z_grad, z.grad, codes.grad]))
    assert_close_tree(*res, rtol=1e-5, atol=1e-6)
