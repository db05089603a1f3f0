"""Point-cloud research code, written once against ``lib`` and run with torch and jitorch: PointNet (shared MLP as
``conv1d``, max over points, a T-Net predicting a 3x3 transform applied with ``bmm`` and the ``||I - A A^T||``
regularizer), farthest point sampling in a loop with ``gather``/``argmax``, k-NN by ``cdist`` and ``topk``, and the
chamfer distance."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights


def make_pointnet(lib, classes=4):
    nn = lib.nn

    class TNet(nn.Module):
        def __init__(self):
            super().__init__()
            # no bias before batch norm: its gradient is rounding noise, which Adam would scale up to lr-sized steps
            self.mlp = nn.Sequential(nn.Conv1d(3, 16, 1, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                                     nn.Conv1d(16, 32, 1), nn.ReLU())
            self.fc = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 9))

        def forward(self, x):
            h = self.mlp(x).max(dim=2)[0]
            return self.fc(h).view(-1, 3, 3) + lib.eye(3)

    class PointNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.tnet = TNet()
            self.mlp = nn.Sequential(nn.Conv1d(3, 16, 1, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                                     nn.Conv1d(16, 32, 1))
            self.head = nn.Sequential(nn.Linear(32, 16), nn.Dropout(0.0), nn.ReLU(), nn.Linear(16, classes))

        def forward(self, pts):  # (B, N, 3)
            a = self.tnet(pts.transpose(1, 2))
            x = lib.bmm(pts, a).transpose(1, 2)
            feat, idx = self.mlp(x).max(dim=2)
            return self.head(feat), a, idx

    return PointNet()


def orthogonality(lib, a):
    eye = lib.eye(3).expand(a.shape[0], 3, 3)
    return lib.linalg.matrix_norm(eye - a @ a.transpose(1, 2)).mean()


def clouds(b=4, n=32, seed=0):
    rng = np.random.default_rng(seed)
    pts = rng.normal(size=(b, n, 3))
    pts[:, :, 2] *= np.arange(1, b + 1)[:, None] * 0.5
    return pts.astype(np.float32), (np.arange(b) % 4).astype(np.int64)


def pointnet_run(lib, state, steps=3):
    pts_np, labels_np = clouds()
    pts, labels = lib.tensor(pts_np), lib.tensor(labels_np)
    model = make_pointnet(lib)
    copy_weights(state, model)
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    out = {"loss": []}
    for _ in range(steps):
        opt.zero_grad()
        logits, a, idx = model(pts)
        loss = lib.nn.functional.cross_entropy(logits, labels) + 1e-3 * orthogonality(lib, a)
        loss.backward()
        out["loss"].append(loss.item())
        out["grads"] = [p.grad.clone() for p in model.parameters()]
        out["idx"] = idx
        opt.step()
    model.eval()
    with lib.no_grad():
        out["eval_logits"] = model(pts)[0]
    out["buffers"] = list(model.buffers())
    return out


def test_pointnet_training_matches_torch():
    torch.manual_seed(0)
    reference = make_pointnet(torch)
    th, jt = pointnet_run(torch, reference), pointnet_run(jitorch, reference)
    assert_runs_match(th, jt, rtol=1e-5, atol=1e-6, what="pointnet")


def farthest_point_sample(lib, pts, k):
    b, n, _ = pts.shape
    chosen = lib.zeros(b, k, dtype=lib.long)
    dist = lib.full((b, n), float("inf"))
    far = lib.zeros(b, dtype=lib.long)
    for i in range(k):
        chosen[:, i] = far
        centre = lib.gather(pts, 1, far.view(b, 1, 1).expand(b, 1, 3))
        dist = lib.minimum(dist, ((pts - centre) ** 2).sum(-1))
        far = dist.argmax(-1)
    return chosen


def knn(lib, query, ref, k):
    d = lib.cdist(query, ref)
    return d.topk(k, dim=-1, largest=False)


def chamfer(lib, a, b):
    d = lib.cdist(a, b) ** 2
    return d.min(dim=2)[0].mean() + d.min(dim=1)[0].mean()


def test_sampling_knn_and_chamfer_match_torch():
    pts_np, _ = clouds(seed=1)
    target_np, _ = clouds(seed=2)
    res = []
    for lib in LIBS:
        pts = lib.tensor(pts_np, requires_grad=True)
        idx = farthest_point_sample(lib, pts.detach(), 8)
        centres = lib.gather(pts, 1, idx[..., None].expand(-1, -1, 3))
        dist, nbr = knn(lib, centres, pts, 5)
        groups = lib.gather(pts[:, None].expand(-1, 8, -1, -1), 2, nbr[..., None].expand(-1, -1, -1, 3))
        local = groups - centres[:, :, None]
        cd = chamfer(lib, pts, lib.tensor(target_np))
        loss = cd + dist.mean() + local.abs().mean()
        loss.backward()
        res.append([idx, dist, nbr, local, cd, pts.grad])
    grads = res[0].pop(), res[1].pop()
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="fps/knn/chamfer")
    # 32 points take cdist's matrix-product form: a centre's distance to itself is sqrt of a cancelled sum (1e-3, in
    # both libraries), and the gradient divides by it, so rounding of the cancelled terms shows at 1e-6 absolute
    assert_runs_match(*grads, rtol=1e-5, atol=1e-5, what="fps/knn/chamfer grad")


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                  "donot_use_mm_for_euclid_dist"])
def test_cdist_gradients(p, mode):
    rng = np.random.default_rng(4)
    a_np, b_np = rng.normal(size=(2, 30, 3)).astype(np.float32), rng.normal(size=(2, 28, 3)).astype(np.float32)
    b_np[0, 0] = a_np[0, 0]  # a zero distance: the gradient there is 0, not NaN
    g_np = rng.normal(size=(2, 30, 28)).astype(np.float32)
    res = []
    for lib in LIBS:
        a, b = lib.tensor(a_np, requires_grad=True), lib.tensor(b_np, requires_grad=True)
        d = lib.cdist(a, b, p=p, compute_mode=mode)
        d.backward(lib.tensor(g_np))
        res.append([d, a.grad, b.grad])
    # the matrix-product form (|a|^2 + |b|^2 - 2ab) loses relative accuracy on small distances in both libraries
    atol = 1e-4 if mode == "use_mm_for_euclid_dist" and p == 2.0 else 1e-6
    assert_runs_match(*res, rtol=1e-5, atol=atol, what=f"cdist p={p} {mode}")
