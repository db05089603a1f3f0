"""Vision-transformer research code beyond the training runs (models and helpers are `test_sweep_vit`'s): the three
patch embeddings agree, a jitorch optimizer checkpoint loads in torch, fine-tuning at a new resolution with
interpolated position embeddings and attention rollout, and training under bfloat16 autocast."""
from __future__ import annotations

import io
import math

import einops
import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights
from test_sweep_vit import CH, DEPTH, DIM, IMG, PATCH, data, make_schedule, make_vit, param_groups


def test_patch_embeddings_agree_and_match_torch():
    """The three patch embeddings are one linear map of the patches: same weights, same tokens, same gradients."""
    imgs, _ = data(2, seed=3)
    g = np.random.default_rng(4).normal(size=(2, (IMG // PATCH) ** 2, DIM)).astype(np.float32)
    torch.manual_seed(2)
    conv = torch.nn.Conv2d(CH, DIM, PATCH, stride=PATCH)
    w = conv.weight.detach().numpy()
    res = []
    for lib in LIBS:
        x = lib.tensor(imgs, requires_grad=True)
        weight = lib.tensor(w, requires_grad=True)
        bias = lib.tensor(conv.bias.detach().numpy())
        tokens = [lib.nn.functional.conv2d(x, weight, bias, stride=PATCH).flatten(2).transpose(1, 2)]
        patches = einops.rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=PATCH, p2=PATCH)
        tokens.append(patches @ einops.rearrange(weight, "d c p1 p2 -> (p1 p2 c) d") + bias)
        unf = lib.nn.functional.unfold(x, kernel_size=PATCH, stride=PATCH).transpose(1, 2)
        tokens.append(unf @ weight.flatten(1).t() + bias)
        # Tensor.unfold twice: (B, C, h, w, p, p) windows, the spelling of many research repositories
        win = x.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH).permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)
        tokens.append(lib.nn.functional.linear(win, weight.flatten(1), bias))
        grads = []
        for t in tokens:
            gx, gw = lib.autograd.grad(t, (x, weight), lib.tensor(g))
            grads += [gx, gw]
        res.append([*tokens, *grads])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="patch embeddings")
    for t in res[1][1:4]:
        np.testing.assert_allclose(t.detach().numpy(), res[1][0].detach().numpy(), rtol=1e-5, atol=1e-5)


def test_jitorch_optimizer_checkpoint_loads_in_torch():
    """A checkpoint of jitorch's AdamW and SequentialLR state, written mid-run, resumes a torch run (and back)."""
    torch.manual_seed(3)
    ref = make_vit(torch, attn="manual")
    imgs, labels = data()
    imgs = imgs.astype(np.float64)  # float64: the key bias's noise gradient stays far below AdamW's eps
    states = {}
    for lib in LIBS:
        model = make_vit(lib, attn="manual").double()
        copy_weights(ref, model)
        opt = lib.optim.AdamW(param_groups(model), lr=1e-3)
        sched = make_schedule(lib, opt, "sequential", 2, 6)
        for _ in range(3):
            opt.zero_grad()
            lib.nn.functional.cross_entropy(model(lib.tensor(imgs)), lib.tensor(labels)).backward()
            opt.step()
            sched.step()
        buf = io.BytesIO()
        lib.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, buf)
        states[lib.__name__] = buf.getvalue()
    results = []
    for lib, src in ((torch, "jitorch"), (jitorch, "torch")):
        ckpt = lib.load(io.BytesIO(states[src]))
        model = make_vit(lib, attn="manual").double()
        model.load_state_dict(ckpt["model"])
        opt = lib.optim.AdamW(param_groups(model), lr=1e-3)
        sched = make_schedule(lib, opt, "sequential", 2, 6)
        opt.load_state_dict(ckpt["opt"])
        sched.load_state_dict(ckpt["sched"])
        for _ in range(2):
            opt.zero_grad()
            lib.nn.functional.cross_entropy(model(lib.tensor(imgs)), lib.tensor(labels)).backward()
            opt.step()
            sched.step()
        results.append([dict(model.named_parameters()), [g["lr"] for g in opt.param_groups], sched.last_epoch])
    assert_runs_match(*results, rtol=1e-9, atol=1e-10, what="resumed across libraries")


def test_fine_tuning_at_a_new_resolution_and_attention_rollout():
    """Fine-tuning code: the position embedding resampled bicubically to a larger grid (timm's
    ``resample_abs_pos_embed``), per-head attention maps from ``nn.MultiheadAttention`` with a key padding mask,
    attention rollout, and layer-wise learning-rate decay through per-group ``lr`` scales."""
    torch.manual_seed(4)
    ref = make_vit(torch, attn="mha")
    rng = np.random.default_rng(5)
    big = rng.normal(size=(3, CH, 24, 24)).astype(np.float32)
    pad = np.zeros((3, 37), bool)
    pad[1, -5:] = True  # the second image's last five tokens are padding
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        model = make_vit(lib, attn="mha")
        copy_weights(ref, model)
        pos = model.pos_embed.detach()
        cls_pos, grid = pos[:, :1], pos[:, 1:]
        old = int(math.sqrt(grid.shape[1]))
        grid = grid.reshape(1, old, old, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(6, 6), mode="bicubic", antialias=False, align_corners=False)
        model.pos_embed = lib.nn.Parameter(lib.cat([cls_pos, grid.permute(0, 2, 3, 1).flatten(1, 2)], dim=1))
        groups = []
        for i, (name, p) in enumerate(reversed(list(model.named_parameters()))):
            depth = DEPTH + 1 if not name.startswith("blocks.") else int(name.split(".")[1]) + 1
            depth = 0 if name.startswith(("patch_embed", "cls_token", "pos_embed")) else depth
            groups.append({"params": [p], "lr": 1e-3 * 0.65 ** (DEPTH + 1 - depth), "name": name})
        opt = lib.optim.SGD(groups, lr=1e-3, momentum=0.9)
        x = lib.tensor(big)
        h = model.patch_embed(x)
        h = lib.cat((model.cls_token.expand(h.shape[0], -1, -1), h), dim=1) + model.pos_embed
        maps = []
        for blk in model.blocks:
            n = blk.norm1(h)
            a, w = blk.attn(n, n, n, key_padding_mask=lib.tensor(pad), need_weights=True,
                            average_attn_weights=False)
            maps.append(w)
            h = h + blk.ls1(a)
            h = h + blk.ls2(blk.mlp(blk.norm2(h)))
        logits = model.head(model.norm(h)[:, 0])
        F.cross_entropy(logits, lib.tensor([0, 1, 2])).backward()
        opt.step()
        rollout = lib.eye(37).expand(3, 37, 37)
        for w in maps:
            a = w.detach().mean(dim=1) + lib.eye(37)
            rollout = (a / a.sum(dim=-1, keepdim=True)) @ rollout
        res.append([logits, maps, rollout[:, 0, 1:].reshape(3, 6, 6), model.pos_embed,
                    dict(model.named_parameters()), [g["lr"] for g in opt.param_groups]])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="fine-tuning")
    assert float(res[1][1][0][1, :, :, -5:].abs().max()) == 0.0  # padded keys get no attention


@pytest.mark.parametrize("attn", ["mha", "manual", "sdpa"])
def test_vit_under_bfloat16_autocast(attn):
    """``autocast('cpu', bfloat16)``: every module's output dtype as torch's (linear, conv and attention in bfloat16,
    the loss in float32), and values within bfloat16's rounding of torch's (an 8-bit mantissa: a few 1e-3 relative
    per rounding, so the comparison is loose; the dtypes are exact)."""
    torch.manual_seed(5)
    ref = make_vit(torch, attn=attn)
    imgs, labels = data()
    res, dtypes = [], []
    for lib in LIBS:
        model = make_vit(lib, attn=attn)
        copy_weights(ref, model)
        seen = []
        for name, mod in model.named_modules():
            mod.register_forward_hook(lambda m, i, o, name=name: seen.append(
                (name, str((o[0] if isinstance(o, tuple) else o).dtype).split(".")[-1])))
        with lib.autocast("cpu", dtype=lib.bfloat16):
            logits = model(lib.tensor(imgs))
            loss = lib.nn.functional.cross_entropy(logits, lib.tensor(labels), label_smoothing=0.1)
        loss.backward()
        dtypes.append([*seen, str(loss.dtype).split(".")[-1]])
        res.append([logits.float(), loss, [p.grad for p in model.parameters()]])
    assert dtypes[0] == dtypes[1]
    assert_runs_match(*res, rtol=5e-2, atol=1e-3, what=f"bfloat16 autocast {attn}")
