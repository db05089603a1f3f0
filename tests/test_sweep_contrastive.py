"""Self-supervised and contrastive research code, written once against ``lib`` and run with torch and jitorch:
SimCLR's NT-Xent (``F.normalize``, a cosine matrix, the diagonal ``masked_fill``-ed, ``cross_entropy`` over 2N), MoCo
(a momentum key encoder, shuffled BN, a queue buffer written by slice assignment, ``einsum`` with a list of
operands), BYOL (predictor, stop-gradient, a ``deepcopy``-ed EMA target), CLIP (a causal text transformer pooled at
the EOT token, ``logit_scale.exp().clamp(max=100)``), a hand-written LARS optimizer (``Optimizer`` subclass,
``no_grad``, trust ratios by ``torch.where`` and ``norm``, its ``state_dict``), and Barlow Twins (cross-correlation
written in place, the off-diagonal by ``flatten()[:-1].view(n - 1, n + 1)[:, 1:]``)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

FEAT, PROJ = 16, 16


def make_encoder(lib, proj=PROJ):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.Conv2d(8, FEAT, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(FEAT), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(FEAT, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU(inplace=True),
                         nn.Linear(32, proj))


def make_lars(lib):
    class LARS(lib.optim.Optimizer):
        """MAE's LARS: SGD with momentum whose step on each matrix is scaled by ``eta * ||w|| / ||g + wd w||``."""

        def __init__(self, params, lr=0, weight_decay=0, momentum=0.9, trust_coefficient=0.001):
            defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, trust_coefficient=trust_coefficient)
            super().__init__(params, defaults)

        @lib.no_grad()
        def step(self):
            for g in self.param_groups:
                for p in g["params"]:
                    dp = p.grad
                    if dp is None:
                        continue
                    if p.ndim > 1:  # biases and norm weights are neither decayed nor adapted
                        dp = dp.add(p, alpha=g["weight_decay"])
                        param_norm = lib.norm(p)
                        update_norm = lib.norm(dp)
                        one = lib.ones_like(param_norm)
                        q = lib.where(param_norm > 0.0,
                                      lib.where(update_norm > 0, (g["trust_coefficient"] * param_norm / update_norm),
                                                one), one)
                        dp = dp.mul(q)
                    param_state = self.state[p]
                    if "mu" not in param_state:
                        param_state["mu"] = lib.zeros_like(p)
                    mu = param_state["mu"]
                    mu.mul_(g["momentum"]).add_(dp)
                    p.add_(mu, alpha=-g["lr"])

    return LARS


def views(n=8, size=12, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] / size
    freq = rng.uniform(1, 4, (n, 3, 1, 1))
    base = np.sin(freq * xx * 6 + rng.uniform(0, 6, (n, 3, 1, 1))) * np.cos(freq * yy * 3)
    v1 = base + 0.2 * rng.normal(size=base.shape)
    v2 = base * rng.uniform(0.6, 1.4, (n, 3, 1, 1)) + 0.2 * rng.normal(size=base.shape)
    flips = rng.uniform(size=n) < 0.5
    return v1.astype(np.float32), v2.astype(np.float32), flips


def augment(lib, x, flips):
    return lib.where(lib.tensor(flips)[:, None, None, None], x.flip(-1), x)


def nt_xent(lib, z1, z2, temperature=0.5, form="matmul"):
    F = lib.nn.functional
    n = z1.shape[0]
    z = lib.cat([z1, z2], dim=0)
    if form == "matmul":
        z = F.normalize(z, dim=1)
        sim = z @ z.T
    else:
        sim = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2)
    sim = sim / temperature
    sim = sim.masked_fill(lib.eye(2 * n, dtype=lib.bool), float("-inf") if form == "matmul" else -9e15)
    targets = lib.cat([lib.arange(n, 2 * n), lib.arange(0, n)])
    return F.cross_entropy(sim, targets), (sim.argmax(dim=1) == targets).float().mean()


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def barlow_twins_loss(lib, bn, z1, z2, lambd=5e-3):
    c = bn(z1).T @ bn(z2)
    c.div_(z1.shape[0])
    on_diag = lib.diagonal(c).add_(-1).pow_(2).sum()
    off_diag = off_diagonal(c).pow_(2).sum()
    return on_diag + lambd * off_diag


def pretrain_run(lib, ref, method, steps=3):
    nn = lib.nn
    v1_np, v2_np, flips = views()
    model = make_encoder(lib)
    copy_weights(ref, model)
    LARS = make_lars(lib)
    params_bn = [p for n, p in model.named_parameters() if p.ndim == 1]
    params_w = [p for n, p in model.named_parameters() if p.ndim > 1]
    opt = LARS([{"params": params_w}, {"params": params_bn, "weight_decay": 0.0}], lr=0.3, weight_decay=1e-4)
    bn = nn.BatchNorm1d(PROJ, affine=False)
    out = {"loss": [], "acc": []}
    for step in range(steps):
        x1 = augment(lib, lib.tensor(v1_np), flips)
        x2 = augment(lib, lib.tensor(v2_np), ~flips)
        z1, z2 = model(x1), model(x2)
        if method == "barlow":
            loss, acc = barlow_twins_loss(lib, bn, z1, z2), lib.tensor(0.0)
        else:
            loss, acc = nt_xent(lib, z1, z2, form=method)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out["loss"].append(loss.detach())
        out["acc"].append(acc)
        if step == 1:  # the custom optimizer's state survives a round trip (a restart mid-run)
            sd = copy.deepcopy(opt.state_dict())
            opt = LARS([{"params": params_w}, {"params": params_bn, "weight_decay": 0.0}], lr=0.3,
                       weight_decay=1e-4)
            opt.load_state_dict(sd)
            out["mu"] = [s["mu"] for s in sd["state"].values()]
    out["grads"] = {n: p.grad for n, p in model.named_parameters()}
    out["state"] = model.state_dict()
    out["bn"] = bn.state_dict()
    return out


@pytest.mark.parametrize("method", ["matmul", "cosine", "barlow"])
def test_simclr_and_barlow_twins_with_lars_match_torch(method):
    torch.manual_seed(0)
    ref = make_encoder(torch)
    th, jt = pretrain_run(torch, ref, method), pretrain_run(jitorch, ref, method)
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-5, what=method)


def test_barlow_twins_in_place_views_match_an_out_of_place_loss():
    """The in-place spelling (``div_`` on the product, ``add_``/``pow_`` on its diagonal view) against the plain one,
    gradients with random weights on the two embeddings."""
    rng = np.random.default_rng(1)
    z1_np, z2_np = rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    res = []
    for lib in LIBS:
        z1, z2 = lib.tensor(z1_np, requires_grad=True), lib.tensor(z2_np, requires_grad=True)
        bn = lib.nn.BatchNorm1d(5, affine=False)
        loss = barlow_twins_loss(lib, bn, z1, z2, lambd=0.3)
        g = lib.autograd.grad(loss, (z1, z2))
        c = bn(z1).T @ bn(z2) / 6
        mask = ~lib.eye(5, dtype=lib.bool)
        plain = ((lib.diagonal(c) - 1) ** 2).sum() + 0.3 * (c[mask] ** 2).sum()
        res.append([loss, g, plain, lib.autograd.grad(plain, (z1, z2)), off_diagonal(lib.arange(16.0).view(4, 4))])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="barlow twins")
    np.testing.assert_allclose(res[1][0].item(), res[1][2].item(), rtol=1e-5)


def moco_run(lib, ref, steps=4, K=16, m=0.9, T=0.2):
    F = lib.nn.functional
    v1_np, v2_np, flips = views()
    rng = np.random.default_rng(5)
    queue_np = rng.normal(size=(PROJ, K)).astype(np.float32)
    shuffles = [rng.permutation(8) for _ in range(steps)]
    encoder_q = make_encoder(lib)
    copy_weights(ref, encoder_q)
    encoder_k = make_encoder(lib)
    for param_q, param_k in zip(encoder_q.parameters(), encoder_k.parameters()):
        param_k.data.copy_(param_q.data)
        param_k.requires_grad = False
    for buf_q, buf_k in zip(encoder_q.buffers(), encoder_k.buffers()):
        buf_k.copy_(buf_q)
    queue = F.normalize(lib.tensor(queue_np), dim=0)
    queue_ptr = lib.zeros(1, dtype=lib.long)
    opt = lib.optim.SGD(encoder_q.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
    out = {"loss": [], "queue": [], "ptr": []}
    for step in range(steps):
        im_q, im_k = augment(lib, lib.tensor(v1_np), flips), lib.tensor(v2_np)
        q = F.normalize(encoder_q(im_q), dim=1)
        with lib.no_grad():
            for param_q, param_k in zip(encoder_q.parameters(), encoder_k.parameters()):
                param_k.data = param_k.data * m + param_q.data * (1.0 - m)
            idx_shuffle = lib.tensor(shuffles[step])
            idx_unshuffle = lib.argsort(idx_shuffle)
            k = F.normalize(encoder_k(im_k[idx_shuffle]), dim=1)[idx_unshuffle]
        l_pos = lib.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = lib.einsum("nc,ck->nk", [q, queue.clone().detach()])
        logits = lib.cat([l_pos, l_neg], dim=1) / T
        labels = lib.zeros(logits.shape[0], dtype=lib.long)
        loss = F.cross_entropy(logits, labels)
        with lib.no_grad():  # dequeue and enqueue
            ptr = int(queue_ptr)
            queue[:, ptr:ptr + k.shape[0]] = k.T
            queue_ptr[0] = (ptr + k.shape[0]) % K
        opt.zero_grad()
        loss.backward()
        opt.step()
        out["loss"].append(loss.detach())
        out["queue"].append(queue.clone())
        out["ptr"].append(queue_ptr.clone())
    out["q"] = encoder_q.state_dict()
    out["k"] = encoder_k.state_dict()
    return out


def test_moco_matches_torch():
    torch.manual_seed(1)
    ref = make_encoder(torch)
    assert_runs_match(moco_run(torch, ref), moco_run(jitorch, ref), rtol=1e-4, atol=1e-5, what="moco")


def byol_run(lib, ref, ref_pred, steps=3, beta=0.9, ema="lerp"):
    """In float64: the predictor's BatchNorm cancels any constant shift of its input, so the projector's last bias
    (and the predictor's first) has an exactly zero gradient; in float32 that gradient is rounding noise, which
    AdamW turns into steps of up to lr that differ between any two implementations."""
    F, nn = lib.nn.functional, lib.nn
    v1_np, v2_np, flips = (a.astype(np.float64) if a.dtype == np.float32 else a for a in views(seed=2))
    online = make_encoder(lib)
    copy_weights(ref, online)
    predictor = nn.Sequential(nn.Linear(PROJ, 32), nn.BatchNorm1d(32), nn.ReLU(inplace=True), nn.Linear(32, PROJ))
    copy_weights(ref_pred, predictor)
    online.double()
    predictor.double()
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad = False
    opt = lib.optim.AdamW(list(online.parameters()) + list(predictor.parameters()), lr=1e-3, weight_decay=0.01)

    def loss_fn(x, y):
        x, y = F.normalize(x, dim=-1, p=2), F.normalize(y, dim=-1, p=2)
        return 2 - 2 * (x * y).sum(dim=-1)

    out = {"loss": []}
    for _ in range(steps):
        one, two = augment(lib, lib.tensor(v1_np), flips), lib.tensor(v2_np)
        pred_one, pred_two = predictor(online(one)), predictor(online(two))
        with lib.no_grad():
            target_one, target_two = target(one), target(two)
            target_one.detach_()
            target_two.detach_()
        loss = (loss_fn(pred_one, target_two.detach()) + loss_fn(pred_two, target_one.detach())).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with lib.no_grad():
            if ema == "lerp":
                for p_t, p_o in zip(target.parameters(), online.parameters()):
                    p_t.lerp_(p_o, 1 - beta)
            else:
                t_params, o_params = list(target.parameters()), list(online.parameters())
                lib._foreach_mul_(t_params, beta)
                lib._foreach_add_(t_params, o_params, alpha=1 - beta)
        out["loss"].append(loss.detach())
    out["online"] = online.state_dict()
    out["target"] = target.state_dict()
    out["pred_grads"] = [p.grad for p in predictor.parameters()]
    out["target_grads"] = [p.grad for p in target.parameters()]  # stop-gradient: None everywhere
    return out


@pytest.mark.parametrize("ema", ["lerp", "foreach"])
def test_byol_matches_torch(ema):
    torch.manual_seed(2)
    ref = make_encoder(torch)
    nn = torch.nn
    ref_pred = nn.Sequential(nn.Linear(PROJ, 32), nn.BatchNorm1d(32), nn.ReLU(inplace=True), nn.Linear(32, PROJ))
    th, jt = byol_run(torch, ref, ref_pred, ema=ema), byol_run(jitorch, ref, ref_pred, ema=ema)
    assert all(g is None for g in jt["target_grads"])
    assert_runs_match({k: v for k, v in th.items() if k != "target_grads"},
                      {k: v for k, v in jt.items() if k != "target_grads"}, rtol=1e-9, atol=1e-10, what="byol")


VOCAB, CTX, WIDTH = 20, 6, 16


def make_clip(lib, init_scale):
    nn, F = lib.nn, lib.nn.functional

    class CLIP(nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = make_encoder(lib, proj=WIDTH)
            self.token_embedding = nn.Embedding(VOCAB, WIDTH)
            self.positional_embedding = nn.Parameter(lib.empty(CTX, WIDTH))
            self.transformer = nn.TransformerEncoder(nn.TransformerEncoderLayer(
                WIDTH, 2, dim_feedforward=32, dropout=0.0, activation="gelu", batch_first=True, norm_first=True),
                num_layers=2, enable_nested_tensor=False)
            self.ln_final = nn.LayerNorm(WIDTH)
            self.text_projection = nn.Parameter(lib.empty(WIDTH, WIDTH))
            self.logit_scale = nn.Parameter(lib.ones([]) * init_scale)
            self.register_buffer("attn_mask", lib.empty(CTX, CTX).fill_(float("-inf")).triu_(1), persistent=False)
            nn.init.normal_(self.positional_embedding, std=0.01)
            nn.init.normal_(self.text_projection, std=WIDTH ** -0.5)

        def encode_text(self, text):
            x = self.token_embedding(text) + self.positional_embedding
            x = self.ln_final(self.transformer(x, mask=self.attn_mask))
            return x[lib.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection  # at the EOT token

        def forward(self, image, text):
            image_features = F.normalize(self.visual(image), dim=-1)
            text_features = F.normalize(self.encode_text(text), dim=-1)
            logit_scale = self.logit_scale.exp().clamp(max=100)
            logits_per_image = logit_scale * image_features @ text_features.t()
            return logits_per_image, logits_per_image.t()

    return CLIP()


# The parameter clamp and the forward clamp are not combined: exp(float32(log 100)) is 100 + 1 ulp in torch (correctly
# rounded) and 100 in NumPy's float32 exp, so clamp(max=100)'s gradient at the bound would differ on that ulp.
@pytest.mark.parametrize("init_scale,clamp_param", [(math.log(1 / 0.07), True), (math.log(120.0), False)])
def test_clip_matches_torch(init_scale, clamp_param):
    """In float64, as BYOL: the attention's key bias has an exactly zero gradient (softmax ignores a per-row shift)."""
    torch.manual_seed(3)
    ref = make_clip(torch, init_scale)
    imgs, _, _ = views(seed=3)
    rng = np.random.default_rng(4)
    text = rng.integers(1, VOCAB - 1, (8, CTX))
    lengths = rng.integers(2, CTX + 1, 8)
    text[np.arange(8), lengths - 1] = VOCAB - 1  # EOT, the largest id: argmax finds it
    text[np.arange(CTX)[None, :] >= lengths[:, None]] = 0
    res = []
    for lib in LIBS:
        model = make_clip(lib, init_scale)
        copy_weights(ref, model)
        model.double()
        opt = lib.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
        out = {"loss": [], "scale": [], "scale_grad": []}
        for _ in range(3):
            logits_per_image, logits_per_text = model(lib.tensor(imgs, dtype=lib.float64), lib.tensor(text))
            labels = lib.arange(8)
            loss = (lib.nn.functional.cross_entropy(logits_per_image, labels)
                    + lib.nn.functional.cross_entropy(logits_per_text, labels)) / 2
            opt.zero_grad()
            loss.backward()
            out["scale_grad"].append(model.logit_scale.grad.clone())
            opt.step()
            if clamp_param:
                with lib.no_grad():  # OpenCLIP's clamp of the parameter itself
                    model.logit_scale.clamp_(0, math.log(100))
            out["loss"].append(loss.detach())
            out["scale"].append(model.logit_scale.detach().clone())
        out["grads"] = {n: p.grad for n, p in model.named_parameters()}
        out["params"] = dict(model.named_parameters())
        res.append(out)
    assert_runs_match(*res, rtol=1e-9, atol=1e-10, what="clip")
    if init_scale > math.log(100):
        assert all(float(g) == 0.0 for g in res[1]["scale_grad"])
