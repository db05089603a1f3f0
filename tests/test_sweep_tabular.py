"""Tabular deep-learning research code, written once against ``lib`` and run with torch and jitorch: a TabNet-style
attentive transformer with sparsemax and entmax-1.5 written from primitives (sort, cumsum, gather, clamp), ghost batch
norm (BatchNorm1d over ``chunk``/``split`` pieces), categorical feature embeddings, ``F.one_hot`` and
``gumbel_softmax`` with a fixed noise tensor (only its deterministic part is compared)."""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

N_NUM, CARDS, EMB = 5, (4, 7), 3


def sparsemax(lib, z, dim=-1):
    z = z - z.max(dim=dim, keepdim=True).values
    zs, _ = lib.sort(z, dim=dim, descending=True)
    k = lib.arange(1, z.shape[dim] + 1, dtype=z.dtype, device=z.device)
    view = [1] * z.dim()
    view[dim] = -1
    k = k.view(view)
    cums = zs.cumsum(dim)
    support = (1 + k * zs) > cums
    k_z = support.sum(dim=dim, keepdim=True)
    tau = (cums.gather(dim, k_z - 1) - 1) / k_z.to(z.dtype)
    return lib.clamp(z - tau, min=0)


def entmax15(lib, z, dim=-1):
    z = (z - z.max(dim=dim, keepdim=True).values) / 2
    zs, _ = lib.sort(z, dim=dim, descending=True)
    n = z.shape[dim]
    view = [1] * z.dim()
    view[dim] = -1
    rho = lib.arange(1, n + 1, dtype=z.dtype).view(view)
    mean = zs.cumsum(dim) / rho
    mean_sq = (zs ** 2).cumsum(dim) / rho
    ss = rho * (mean_sq - mean ** 2)
    delta = (1 - ss) / rho
    tau = mean - lib.sqrt(lib.clamp(delta, min=0))
    support = (tau <= zs).sum(dim=dim, keepdim=True)
    tau_star = tau.gather(dim, support - 1)
    return lib.clamp(z - tau_star, min=0) ** 2


def make_model(lib, vbs=8):
    nn, F = lib.nn, lib.nn.functional

    class GhostBN(nn.Module):
        def __init__(self, d, use_split):
            super().__init__()
            self.bn = nn.BatchNorm1d(d, momentum=0.02)
            self.use_split = use_split

        def forward(self, x):
            if self.use_split:
                chunks = x.split(vbs, 0)
            else:
                chunks = x.chunk(int(np.ceil(x.shape[0] / vbs)), 0)
            return lib.cat([self.bn(c) for c in chunks], 0)

    class TabNetish(nn.Module):
        def __init__(self):
            super().__init__()
            self.embs = nn.ModuleList([nn.Embedding(c, EMB) for c in CARDS])
            d = N_NUM + EMB * len(CARDS) + CARDS[0]
            self.d = d
            self.initial_bn = nn.BatchNorm1d(d, momentum=0.01)
            self.feat = nn.Linear(d, 16, bias=False)  # a bias before BN gets a rounding-level grad
            self.gbn1 = GhostBN(16, use_split=True)
            self.att = nn.Linear(8, d, bias=False)
            self.gbn2 = GhostBN(d, use_split=False)
            self.head = nn.Linear(8, 3)

        def forward(self, x_num, x_cat, relax=1.3):
            e = [emb(x_cat[:, i]) for i, emb in enumerate(self.embs)]
            oh = F.one_hot(x_cat[:, 0], num_classes=CARDS[0]).float()
            x = self.initial_bn(lib.cat([x_num] + e + [oh], dim=1))
            prior = lib.ones_like(x)
            out, masks, m_loss = 0, [], 0
            a = x[:, :8]  # (zeros would make ghost BN normalise a constant: rounding noise over sqrt(eps))
            for step in range(2):
                logits = self.gbn2(self.att(a)) * prior
                mask = sparsemax(lib, logits) if step == 0 else entmax15(lib, logits)
                prior = prior * (relax - mask)
                m_loss = m_loss + (mask * lib.log(mask + 1e-10)).sum(1).mean()
                h = self.gbn1(self.feat(x * mask))
                h = h[:, :8] * lib.sigmoid(h[:, 8:])  # GLU
                out = out + F.relu(h)
                a = h
                masks.append(mask)
            return self.head(out), masks, m_loss

    return TabNetish()


def data(seed=0, n=30):
    rng = np.random.default_rng(seed)
    x_num = rng.normal(size=(n, N_NUM)).astype(np.float32)
    x_cat = np.stack([rng.integers(0, c, n) for c in CARDS], 1).astype(np.int64)
    y = rng.integers(0, 3, n).astype(np.int64)
    return x_num, x_cat, y


def tab_run(lib, ref, steps=3):
    model = make_model(lib)
    copy_weights(ref, model)
    x_num, x_cat, y = (lib.tensor(a) for a in data())
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    out = {"loss": [], "masks": []}
    for _ in range(steps):
        opt.zero_grad()
        logits, masks, m_loss = model(x_num, x_cat)
        loss = lib.nn.functional.cross_entropy(logits, y) + 1e-3 * m_loss
        loss.backward()
        out["loss"].append(loss.detach())
        out["masks"].append(masks)
        out["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
    model.eval()
    with lib.no_grad():
        out["eval"] = model(x_num, x_cat)[0]
    out["state"] = dict(model.state_dict())
    return out


def test_tabnet_style_training_matches_torch():
    torch.manual_seed(0)
    ref = make_model(torch)
    th, jt = tab_run(torch, ref), tab_run(jitorch, ref)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-5, what="tabnet")


def test_sparsemax_entmax_gumbel_primitives():
    rng = np.random.default_rng(3)
    z_np = rng.normal(size=(4, 6)).astype(np.float32) * 2
    g_np = rng.normal(size=(4, 6)).astype(np.float32)
    u_np = rng.uniform(0.01, 0.99, size=(4, 6)).astype(np.float32)
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        z = lib.tensor(z_np, requires_grad=True)
        g = lib.tensor(g_np)
        sm, em = sparsemax(lib, z, dim=1), entmax15(lib, z.t(), dim=0)
        gumbels = -lib.log(-lib.log(lib.tensor(u_np)))
        # what gumbel_softmax computes, with the noise fixed
        soft = F.softmax((z + gumbels) / 0.5, dim=-1)
        idx = soft.max(-1, keepdim=True)[1]
        hard = lib.zeros_like(z).scatter_(-1, idx, 1.0) - soft.detach() + soft
        ((sm * g).sum() + (em.t() * g).sum() + (hard * g).sum()).backward()
        lib.manual_seed(0)
        gs = F.gumbel_softmax(z.detach(), tau=0.7, hard=True)
        res.append([sm, em, soft, hard, z.grad, gs.sum(-1), (gs == gs.max(-1, keepdim=True)[0]).sum(-1),
                    F.one_hot(lib.tensor([[0, 2], [1, 1]])), F.one_hot(lib.tensor([3, 0]), 5).dtype == lib.int64])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="sparsemax")
