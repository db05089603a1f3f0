"""Vision-transformer research code, written once against ``lib`` and run with torch and jitorch: patch embeddings
(a strided ``Conv2d``, einops' ``rearrange`` + ``Linear``, ``F.unfold`` + ``Linear``), a class token and learned
position embedding joined by ``cat``/``expand``, pre-norm blocks with ``nn.MultiheadAttention(batch_first=True)``, a
hand-written attention or ``scaled_dot_product_attention``, stochastic depth from NumPy-drawn uniforms, LayerScale,
AdamW with decay/no-decay groups built from ``named_parameters``, warmup + cosine through ``LambdaLR`` and through
``SequentialLR(LinearLR, CosineAnnealingLR)``, label smoothing, mixup, gradient accumulation, and a mid-run
optimizer/scheduler ``state_dict`` round trip through ``save``/``load``."""
from __future__ import annotations

import importlib
import io
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, assert_runs_match, copy_weights

IMG, PATCH, CH, DIM, HEADS, DEPTH, CLASSES = 16, 4, 3, 32, 4, 2, 5


def make_vit(lib, embed="conv", attn="mha", drop_path=0.0, uniforms=None, pool="cls"):
    """``uniforms()`` stands in for ``torch.rand`` in DropPath: both runs draw the same NumPy numbers."""
    nn, F = lib.nn, lib.nn.functional
    layers = importlib.import_module(f"einops.layers.{lib.__name__}")

    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_patches = (IMG // PATCH) ** 2
            if embed == "conv":
                self.proj = nn.Conv2d(CH, DIM, kernel_size=PATCH, stride=PATCH)
            elif embed == "einops":
                self.proj = nn.Sequential(layers.Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=PATCH,
                                                           p2=PATCH), nn.Linear(PATCH * PATCH * CH, DIM))
            else:
                self.proj = nn.Linear(CH * PATCH * PATCH, DIM)

        def forward(self, x):
            if embed == "conv":
                return self.proj(x).flatten(2).transpose(1, 2)  # B, N, D
            if embed == "einops":
                return self.proj(x)
            return self.proj(F.unfold(x, kernel_size=PATCH, stride=PATCH).transpose(1, 2))

    class DropPath(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            if self.p == 0.0 or not self.training:
                return x
            keep = 1 - self.p
            shape = (x.shape[0],) + (1,) * (x.ndim - 1)
            mask = (keep + lib.tensor(uniforms(shape), dtype=x.dtype)).floor_()
            return x.div(keep) * mask

    class LayerScale(nn.Module):
        def __init__(self, dim, init_values=1e-1):
            super().__init__()
            self.gamma = nn.Parameter(init_values * lib.ones(dim))

        def forward(self, x):
            return x * self.gamma

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads = HEADS
            self.scale = (DIM // HEADS) ** -0.5
            self.qkv = nn.Linear(DIM, DIM * 3, bias=True)
            self.attn_drop = nn.Dropout(0.0)
            self.proj = nn.Linear(DIM, DIM)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            if attn == "sdpa":
                x = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
            else:
                a = (q @ k.transpose(-2, -1)) * self.scale
                a = self.attn_drop(a.softmax(dim=-1))
                x = a @ v
            return self.proj(x.transpose(1, 2).reshape(B, N, C))

    class Block(nn.Module):
        def __init__(self, dp):
            super().__init__()
            self.norm1 = nn.LayerNorm(DIM, eps=1e-6)
            self.attn = nn.MultiheadAttention(DIM, HEADS, dropout=0.0, batch_first=True) if attn == "mha" \
                else Attention()
            self.ls1 = LayerScale(DIM)
            self.drop_path1 = DropPath(dp)
            self.norm2 = nn.LayerNorm(DIM, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * DIM, DIM))
            self.ls2 = LayerScale(DIM)
            self.drop_path2 = DropPath(dp)

        def forward(self, x):
            h = self.norm1(x)
            h = self.attn(h, h, h, need_weights=False)[0] if isinstance(self.attn, nn.MultiheadAttention) \
                else self.attn(h)
            x = x + self.drop_path1(self.ls1(h))
            return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = PatchEmbed()
            self.cls_token = nn.Parameter(lib.zeros(1, 1, DIM))
            self.pos_embed = nn.Parameter(lib.zeros(1, self.patch_embed.num_patches + 1, DIM))
            dpr = [x.item() for x in lib.linspace(0, drop_path, DEPTH)]  # stochastic depth decay rule
            self.blocks = nn.ModuleList([Block(dpr[i]) for i in range(DEPTH)])
            self.norm = nn.LayerNorm(DIM, eps=1e-6)
            self.head = nn.Linear(DIM, CLASSES)
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            nn.init.normal_(self.cls_token, std=1e-2)

        def forward(self, x):
            x = self.patch_embed(x)
            x = lib.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
            for blk in self.blocks:
                x = blk(x)
            x = self.norm(x)
            return self.head(x[:, 0] if pool == "cls" else x[:, 1:].mean(dim=1))

    return ViT()


def param_groups(model, weight_decay=0.05):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name.endswith(".bias") or name in ("cls_token", "pos_embed"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_schedule(lib, opt, kind, warmup, total):
    sch = lib.optim.lr_scheduler
    if kind == "lambda":
        def lr_lambda(step):
            if step < warmup:
                return (step + 1) / warmup
            progress = (step - warmup) / max(1, total - warmup)
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return sch.LambdaLR(opt, lr_lambda)
    return sch.SequentialLR(opt, [sch.LinearLR(opt, start_factor=0.1, total_iters=warmup),
                                  sch.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=1e-5)],
                            milestones=[warmup])


def data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:IMG, :IMG] / IMG
    labels = rng.integers(0, CLASSES, n)
    imgs = np.stack([np.sin((2 + y) * xx + c) * np.cos((1 + y) * yy - c) for y in labels for c in range(CH)])
    imgs = imgs.reshape(n, CH, IMG, IMG) + 0.1 * rng.normal(size=(n, CH, IMG, IMG))
    return imgs.astype(np.float32), labels.astype(np.int64)


def round_trip(lib, opt, sched, model, kind, warmup, total):
    """A restart from a checkpoint: new optimizer and scheduler built the same way, their states loaded back."""
    buf = io.BytesIO()
    lib.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, buf)
    buf.seek(0)
    ckpt = lib.load(buf)
    opt2 = lib.optim.AdamW(param_groups(model), lr=1e-3, betas=(0.9, 0.999))
    sched2 = make_schedule(lib, opt2, kind, warmup, total)
    opt2.load_state_dict(ckpt["opt"])
    sched2.load_state_dict(ckpt["sched"])
    return opt2, sched2


def vit_run(lib, ref, schedule="lambda", accum=2, steps=6, mixup=True, drop_path=0.0, dtype="float32", **kw):
    imgs, labels = data()
    imgs = imgs.astype(dtype)
    rng = np.random.default_rng(1)
    uniforms = lambda shape: rng.uniform(size=shape).astype(dtype)  # noqa: E731
    model = make_vit(lib, drop_path=drop_path, uniforms=uniforms, **kw)
    copy_weights(ref, model)
    model.to(getattr(lib, dtype))
    opt = lib.optim.AdamW(param_groups(model), lr=1e-3, betas=(0.9, 0.999))
    sched = make_schedule(lib, opt, schedule, warmup=2, total=steps)
    criterion = lib.nn.CrossEntropyLoss(label_smoothing=0.1)
    F = lib.nn.functional
    mix_rng = np.random.default_rng(2)
    out = {"loss": [], "lr": [], "grad_norm": []}
    model.train()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for micro in range(accum):
            idx = slice(micro * 4, micro * 4 + 4)
            x, y = lib.tensor(imgs[idx]), lib.tensor(labels[idx])
            if mixup:
                lam = float(mix_rng.beta(0.8, 0.8))
                if micro == 0:  # timm's Mixup: the batch mixed with its flip, smoothed one-hot targets likewise
                    x = x.clone().mul_(lam).add_(x.flip(0).mul_(1 - lam))
                    off, on = 0.1 / CLASSES, 1 - 0.1 + 0.1 / CLASSES
                    y1 = F.one_hot(y, CLASSES).to(x.dtype) * (on - off) + off
                    target = y1 * lam + y1.flip(0) * (1 - lam)
                    loss = lib.sum(-target * F.log_softmax(model(x), dim=-1), dim=-1).mean()
                else:  # mixed with a permutation, as two smoothed losses
                    perm = lib.tensor(mix_rng.permutation(4))
                    logits = model(lam * x + (1 - lam) * x[perm])
                    loss = lam * criterion(logits, y) + (1 - lam) * criterion(logits, y[perm])
            else:
                loss = criterion(model(x), y)
            (loss / accum).backward()
            out["loss"].append(loss.detach())
        out["grad_norm"].append(lib.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0))
        opt.step()
        sched.step()
        out["lr"].append([g["lr"] for g in opt.param_groups])
        if step == steps // 2:
            sd = opt.state_dict()
            out["opt_state"] = {str(k): v for k, v in sd["state"].items()}
            out["opt_groups"] = [{k: v for k, v in g.items() if k != "params"} | {"n": len(g["params"])}
                                 for g in sd["param_groups"]]
            out["sched_state"] = {k: v for k, v in sched.state_dict().items() if k not in ("lr_lambdas",)}
            opt, sched = round_trip(lib, opt, sched, model, schedule, 2, steps)
    out["grads"] = {n: p.grad for n, p in model.named_parameters()}
    model.eval()
    with lib.no_grad():
        logits = model(lib.tensor(imgs))
        out["eval"] = [logits, (logits.argmax(-1) == lib.tensor(labels)).float().mean()]
    out["params"] = dict(model.named_parameters())
    return out


def assert_vit_runs_match(th, jt, dtype, what):
    for key in ("opt_groups", "sched_state"):
        assert_close_tree(th.pop(key), jt.pop(key), rtol=1e-5, atol=1e-6, path=key)
    if dtype == "float32":
        # AdamW's first steps move a weight by up to lr whatever its gradient's size, so where a gradient is
        # rounding noise (the key bias, whose exact gradient is 0 as softmax ignores a per-row shift, or an element
        # near 0: -6.6e-9 vs -2.2e-9 out of 0.02) the two runs step differently by up to lr; the gradients, losses and
        # logits are compared tightly, the weights to a fraction of lr (float64 runs compare them tightly too)
        assert_runs_match(th.pop("params"), jt.pop("params"), rtol=1e-4, atol=3e-4, what=f"{what} params")
    tol = 1e-4 if dtype == "float32" else 1e-9
    assert_runs_match(th, jt, rtol=tol, atol=tol / 10, what=what)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("embed,attn,schedule,pool", [("conv", "mha", "lambda", "cls"),
                                                      ("einops", "manual", "sequential", "cls"),
                                                      ("unfold", "sdpa", "lambda", "mean")])
def test_vit_training_matches_torch(embed, attn, schedule, pool, dtype):
    torch.manual_seed(0)
    ref = make_vit(torch, embed=embed, attn=attn, pool=pool)
    kw = dict(embed=embed, attn=attn, schedule=schedule, pool=pool, dtype=dtype)
    th, jt = vit_run(torch, ref, **kw), vit_run(jitorch, ref, **kw)
    assert_vit_runs_match(th, jt, dtype, what=f"vit {embed}/{attn}/{schedule}/{dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vit_stochastic_depth_matches_torch(dtype):
    torch.manual_seed(1)
    ref = make_vit(torch, attn="manual", drop_path=0.3)
    kw = dict(attn="manual", drop_path=0.3, mixup=False, accum=1, steps=4, dtype=dtype)
    th, jt = vit_run(torch, ref, **kw), vit_run(jitorch, ref, **kw)
    assert_vit_runs_match(th, jt, dtype, what=f"vit drop path {dtype}")
