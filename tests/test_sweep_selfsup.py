"""Self-distillation and clustering self-supervision, written once against ``lib`` and run with torch and jitorch:
DINO (multi-crop batches grouped by resolution through ``unique_consecutive(return_counts=True)`` and ``cumsum``, a
head ending in the legacy ``nn.utils.weight_norm`` with a frozen ``weight_g``, a teacher with a centred, sharpened
softmax on a temperature schedule, the last layer's gradient cancelled in the first step, per-parameter clipping and
an EMA teacher by ``mul_``/``add_``), SwAV's Sinkhorn-Knopp with prototypes renormalised in place, SupCon's masked
log-probabilities (``scatter`` of a scalar into a mask) and VICReg's variance and covariance terms."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

OUT = 12


def make_backbone(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(32, 16))


def make_dino_head(lib, in_dim=16, bottleneck=8):
    nn = lib.nn

    class DINOHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(in_dim, 32), nn.GELU(), nn.Linear(32, bottleneck))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # DINO's code predates the parametrization
                self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck, OUT, bias=False))
            self.last_layer.weight_g.data.fill_(1)
            self.last_layer.weight_g.requires_grad = False

        def forward(self, x):
            return self.last_layer(nn.functional.normalize(self.mlp(x), dim=-1, p=2))

    return DINOHead()


def make_wrapper(lib, backbone, head):
    class MultiCropWrapper(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = backbone, head

        def forward(self, x):
            idx_crops = lib.cumsum(lib.unique_consecutive(lib.tensor([inp.shape[-1] for inp in x]),
                                                          return_counts=True)[1], 0)
            start_idx, output = 0, lib.empty(0)
            for end_idx in idx_crops:
                output = lib.cat((output, self.backbone(lib.cat(x[start_idx:end_idx]))))
                start_idx = end_idx
            return self.head(output)

    return MultiCropWrapper()


def dino_run(lib, ref_backbone, ref_head, steps=3, momentum=0.99):
    F = lib.nn.functional
    rng = np.random.default_rng(0)
    crops_np = [rng.normal(size=(4, 3, 12, 12)).astype(np.float32) for _ in range(2)] + \
               [rng.normal(size=(4, 3, 6, 6)).astype(np.float32) for _ in range(3)]
    student = make_wrapper(lib, make_backbone(lib), make_dino_head(lib))
    teacher = make_wrapper(lib, make_backbone(lib), make_dino_head(lib))
    copy_weights(ref_backbone, student.backbone)
    copy_weights(ref_head, student.head)
    teacher.load_state_dict(student.state_dict())  # weight_norm modules refuse deepcopy (torch's error too)
    for p in teacher.parameters():
        p.requires_grad = False
    named = [(n, p) for n, p in student.named_parameters() if p.requires_grad]
    opt = lib.optim.AdamW([{"params": [p for n, p in named if not (n.endswith(".bias") or p.ndim == 1)]},
                           {"params": [p for n, p in named if n.endswith(".bias") or p.ndim == 1],
                            "weight_decay": 0.0}], lr=1e-3)
    teacher_temps = np.concatenate((np.linspace(0.04, 0.07, 2), np.ones(10) * 0.07))
    center = lib.zeros(1, OUT)
    out = {"loss": [], "norms": []}
    for it in range(steps):
        crops = [lib.tensor(c) for c in crops_np]
        teacher_output = teacher(crops[:2])
        student_out = (student(crops) / 0.1).chunk(5)
        teacher_out = F.softmax((teacher_output - center) / teacher_temps[it], dim=-1).detach().chunk(2)
        total_loss, n_loss_terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                total_loss += lib.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1).mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        with lib.no_grad():
            batch_center = lib.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
            center = center * 0.9 + batch_center * 0.1
        opt.zero_grad()
        total_loss.backward()
        if it == 0:  # DINO's cancel_gradients_last_layer
            for n, p in student.named_parameters():
                if "last_layer" in n:
                    p.grad = None
        for p in student.parameters():
            if p.grad is not None:
                param_norm = p.grad.data.norm(2)
                out["norms"].append(param_norm)
                clip_coef = 3.0 / (param_norm + 1e-6)
                if clip_coef < 1:
                    p.grad.data.mul_(clip_coef)
        opt.step()
        with lib.no_grad():
            for param_q, param_k in zip(student.parameters(), teacher.parameters()):
                param_k.data.mul_(momentum).add_((1 - momentum) * param_q.detach().data)
        out["loss"].append(total_loss.detach())
    out["student"] = student.state_dict()
    out["teacher"] = teacher.state_dict()
    out["center"] = center
    return out


def test_dino_matches_torch():
    torch.manual_seed(0)
    ref_backbone, ref_head = make_backbone(torch), make_dino_head(torch)
    th, jt = dino_run(torch, ref_backbone, ref_head), dino_run(jitorch, ref_backbone, ref_head)
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-5, what="dino")


def supcon_loss(lib, features, labels, temperature=0.1, base_temperature=0.07):
    """``features``: (B, views, D), normalised."""
    batch_size, contrast_count = features.shape[:2]
    labels = labels.contiguous().view(-1, 1)
    mask = lib.eq(labels, labels.T).float()
    contrast_feature = lib.cat(lib.unbind(features, dim=1), dim=0)
    anchor_dot_contrast = lib.div(lib.matmul(contrast_feature, contrast_feature.T), temperature)
    logits_max, _ = lib.max(anchor_dot_contrast, dim=1, keepdim=True)
    logits = anchor_dot_contrast - logits_max.detach()
    mask = mask.repeat(contrast_count, contrast_count)
    logits_mask = lib.scatter(lib.ones_like(mask), 1, lib.arange(batch_size * contrast_count).view(-1, 1), 0)
    mask = mask * logits_mask
    exp_logits = lib.exp(logits) * logits_mask
    log_prob = logits - lib.log(exp_logits.sum(1, keepdim=True))
    mask_pos_pairs = mask.sum(1)
    mask_pos_pairs = lib.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
    mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs
    return (-(temperature / base_temperature) * mean_log_prob_pos).view(contrast_count, batch_size).mean()


def sinkhorn(lib, out, eps=0.05, iters=3):
    with lib.no_grad():
        Q = lib.exp(out / eps).t()
        K, B = Q.shape
        Q /= lib.sum(Q)
        for _ in range(iters):
            Q /= lib.sum(Q, dim=1, keepdim=True)
            Q /= K
            Q /= lib.sum(Q, dim=0, keepdim=True)
            Q /= B
        Q *= B
        return Q.t()


def vicreg_loss(lib, x, y, sim=25.0, std=25.0, cov=1.0):
    F = lib.nn.functional
    n, d = x.shape
    repr_loss = F.mse_loss(x, y)
    x, y = x - x.mean(dim=0), y - y.mean(dim=0)
    std_x, std_y = lib.sqrt(x.var(dim=0) + 0.0001), lib.sqrt(y.var(dim=0) + 0.0001)
    std_loss = lib.mean(F.relu(1 - std_x)) / 2 + lib.mean(F.relu(1 - std_y)) / 2
    cov_x, cov_y = (x.T @ x) / (n - 1), (y.T @ y) / (n - 1)

    def off_diagonal(c):
        return c.flatten()[:-1].view(d - 1, d + 1)[:, 1:].flatten()

    cov_loss = off_diagonal(cov_x).pow_(2).sum().div(d) + off_diagonal(cov_y).pow_(2).sum().div(d)
    return sim * repr_loss + std * std_loss + cov * cov_loss


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_supcon_swav_and_vicreg_losses(dtype):
    rng = np.random.default_rng(1)
    f1_np, f2_np = rng.normal(size=(8, 6)).astype(dtype), rng.normal(size=(8, 6)).astype(dtype)
    labels_np = np.array([0, 1, 0, 2, 1, 0, 2, 3])  # class 3 has no positive pair: the where() guard
    protos_np = rng.normal(size=(5, 6)).astype(dtype)
    g = rng.normal(size=(8, 5)).astype(dtype)
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        f1, f2 = lib.tensor(f1_np, requires_grad=True), lib.tensor(f2_np, requires_grad=True)
        feats = lib.stack([F.normalize(f1, dim=1), F.normalize(f2, dim=1)], dim=1)
        supcon = supcon_loss(lib, feats, lib.tensor(labels_np))
        prototypes = lib.nn.Linear(6, 5, bias=False).to(getattr(lib, dtype))
        with lib.no_grad():
            prototypes.weight.copy_(lib.tensor(protos_np))
            w = prototypes.weight.data.clone()
            prototypes.weight.copy_(F.normalize(w, dim=1, p=2))
        scores = prototypes(F.normalize(f1, dim=1))
        q = sinkhorn(lib, scores.detach())
        swav = -lib.mean(lib.sum(q * F.log_softmax(scores / 0.1, dim=1), dim=1))
        vic = vicreg_loss(lib, f1, f2)
        res.append([supcon, lib.autograd.grad(supcon, (f1, f2)), q, swav,
                    lib.autograd.grad(swav, (f1, prototypes.weight), retain_graph=True), vic,
                    lib.autograd.grad(vic, (f1, f2)), lib.autograd.grad(scores, f1, lib.tensor(g))])
    tol = 1e-5 if dtype == "float32" else 1e-11
    assert_runs_match(*res, rtol=tol, atol=tol, what=f"ssl losses {dtype}")
