"""Siamese / metric-learning research code, written once against ``lib`` and run with torch and jitorch: triplet
losses (with and without a custom distance, swap, reductions), cosine-embedding and margin-ranking losses,
``pairwise_distance``, ``normalize`` and batch-hard negative mining with masks and ``topk``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights


def make_encoder(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 8))


def data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(n // 4), 4)
    centers = rng.normal(size=(n // 4, 10))
    x = centers[labels] + 0.7 * rng.normal(size=(n, 10))
    return x.astype(np.float32), labels.astype(np.int64)


def batch_hard(lib, emb, labels, margin=0.3):
    F = lib.nn.functional
    dist = lib.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    eye = lib.eye(len(labels), dtype=lib.bool)
    pos = dist.masked_fill(~same | eye, float("-inf")).max(1).values
    neg_d = dist.masked_fill(same, float("inf"))
    hard_neg, idx = neg_d.topk(2, dim=1, largest=False)
    loss = F.relu(pos - hard_neg[:, 0] + margin).mean()
    return loss, idx


def metric_run(lib, ref, steps=3):
    F = lib.nn.functional
    model = make_encoder(lib)
    copy_weights(ref, model)
    x_np, y_np = data()
    x, y = lib.tensor(x_np), lib.tensor(y_np)
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    out = {"losses": [], "idx": []}
    a_i, p_i, n_i = np.arange(0, 24, 4), np.arange(1, 24, 4), np.arange(6, 30, 4) % 24

    def cos_dist(u, v):
        return 1 - F.cosine_similarity(u, v, dim=-1)

    for _ in range(steps):
        opt.zero_grad()
        emb = F.normalize(model(x), p=2, dim=1)
        a, p, n = emb[a_i], emb[p_i], emb[n_i]
        l_bh, idx = batch_hard(lib, emb, y)
        l_t = F.triplet_margin_loss(a, p, n, margin=0.5, p=2, swap=True)
        l_tc = F.triplet_margin_with_distance_loss(a, p, n, distance_function=cos_dist, margin=0.2)
        l_tp = F.triplet_margin_with_distance_loss(a, p, n, swap=True, reduction="sum")
        target = lib.tensor(np.where(np.arange(6) % 2 == 0, 1.0, -1.0).astype(np.float32))
        l_cos = F.cosine_embedding_loss(a, lib.where(target[:, None] > 0, p, n), target, margin=0.1)
        d_ap, d_an = F.pairwise_distance(a, p), F.pairwise_distance(a, n, keepdim=True).squeeze(1)
        l_rank = F.margin_ranking_loss(d_an, d_ap, lib.ones(6), margin=0.4)
        loss = l_bh + l_t + l_tc + 0.1 * l_tp + l_cos + l_rank
        loss.backward()
        out["losses"].append(lib.stack([l_bh, l_t, l_tc, l_tp, l_cos, l_rank]).detach())
        out["idx"].append(idx)
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        opt.step()
    out["params"] = list(model.parameters())
    return out


def test_metric_learning_training_matches_torch():
    torch.manual_seed(0)
    ref = make_encoder(torch)
    th, jt = metric_run(torch, ref), metric_run(jitorch, ref)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-5, what="metric")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_metric_losses_values_and_gradients(reduction):
    rng = np.random.default_rng(4)
    a_np, p_np, n_np = (rng.normal(size=(5, 6)).astype(np.float32) for _ in range(3))
    y_np = np.array([1, -1, 1, -1, 1], np.float32)
    x1_np, x2_np = rng.normal(size=5).astype(np.float32), rng.normal(size=5).astype(np.float32)
    p_np[1] = a_np[1]  # a zero distance: the eps in pairwise_distance keeps the gradient finite
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        a, p, n = (lib.tensor(v, requires_grad=True) for v in (a_np, p_np, n_np))
        x1, x2 = lib.tensor(x1_np, requires_grad=True), lib.tensor(x2_np, requires_grad=True)
        y = lib.tensor(y_np)
        losses = [F.triplet_margin_loss(a, p, n, margin=1.0, p=1.5, eps=1e-6, swap=True, reduction=reduction),
                  F.triplet_margin_with_distance_loss(a, p, n, distance_function=lambda u, v: (u - v).abs().sum(-1),
                                                      margin=0.7, reduction=reduction),
                  F.cosine_embedding_loss(a, p, y, margin=-0.2, reduction=reduction),
                  F.margin_ranking_loss(x1, x2, y, margin=0.1, reduction=reduction),
                  F.pairwise_distance(a, n, p=3, eps=1e-5),
                  F.pairwise_distance(a[0], n, p=float("inf")),
                  F.normalize(a, p=1, dim=0), F.normalize(lib.zeros(2, 3), dim=1)]
        g = sum((t * lib.tensor(np.linspace(0.5, 1.5, t.numel()).astype(np.float32)).view(t.shape)).sum()
                for t in losses)
        g.backward()
        res.append(losses + [a.grad, p.grad, n.grad, x1.grad, x2.grad])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what=f"metric losses ({reduction})")


def test_metric_modules_and_mining_with_ties():
    emb_np = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [2, 0]], np.float32)
    res = []
    for lib in LIBS:
        nn = lib.nn
        emb = lib.tensor(emb_np)
        dist = lib.cdist(emb, emb)
        vals, idx = dist.topk(3, dim=1, largest=False, sorted=True)
        crit = nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance(), margin=0.5, swap=True)
        res.append([vals, dist.masked_fill(lib.eye(5, dtype=lib.bool), 0).argmin(1),
                    crit(emb[:2], emb[2:4], emb[3:]), nn.CosineEmbeddingLoss()(emb[1:3], emb[3:], lib.tensor([1, -1])),
                    nn.TripletMarginLoss(margin=0.2)(emb[:2], emb[1:3], emb[3:]),
                    nn.MarginRankingLoss()(emb[:, 0], emb[:, 1], lib.tensor([1.0, -1, 1, -1, 1]))])
    assert_runs_match(*res, rtol=1e-6, atol=1e-6, what="metric modules")


def test_multiclass_hinge_losses_give_no_gradient_exactly_at_the_margin():
    # ATen's multi_margin / multilabel_margin backward count a term only where it is > 0 (a hinge term that is exactly
    # 0 contributes no gradient), unlike the clamp_min of triplet_margin_loss
    x_np = np.array([[1.0, 2, 2, 0], [3, 3, 3, -1]], np.float32)
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        x = lib.tensor(x_np, requires_grad=True)
        up = lib.tensor([1.0, 3.0])
        losses = [F.multi_margin_loss(x, lib.tensor([1, 0]), reduction="none"),
                  F.multi_margin_loss(x, lib.tensor([1, 0]), p=2, weight=lib.tensor([1.0, 2, 3, 4]), reduction="none"),
                  F.multilabel_margin_loss(x, lib.tensor([[1, 2, -1, 0], [3, -1, 0, 0]]), reduction="none")]
        grads = [lib.autograd.grad((loss * up).sum(), x)[0] for loss in losses]
        res.append(losses + grads)
    assert_runs_match(*res, rtol=1e-6, atol=1e-7, what="hinge at the margin")
