"""Capsule networks (dynamic routing), run with ``lib=torch`` and ``lib=jitorch`` from the same weights and data.

Primary capsules from a strided conv reshaped and permuted, ``squash``, prediction vectors by ``einsum`` over an
``expand``ed weight and by a broadcast ``@``, three routing iterations (``softmax`` over the output-capsule dim,
agreement by ``einsum``, detached predictions except in the last iteration), margin loss from ``torch.norm`` over a
dim plus ``norm`` with ``p=1``, ``"fro"`` over two dims and ``linalg.vector_norm(ord=inf)``; three Adam steps. Then
the gradients of ``squash`` and ``norm`` at zero vectors and a few more ``einsum`` forms (diagonal, ellipsis, full
reduction, sublist format).
"""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

_RNG = np.random.default_rng(0)
X = _RNG.standard_normal((4, 1, 12, 12)).astype(np.float32)
T = _RNG.integers(0, 5, 4)


def _squash(lib, s, dim=-1):
    n2 = (s ** 2).sum(dim=dim, keepdim=True)
    return n2 / (1 + n2) * s / lib.sqrt(n2 + 1e-8)


def _capsnet(lib):
    nn, F = lib.nn, lib.nn.functional

    class CapsNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 16, 5, stride=2)  # 16 x 4 x 4: 64 primary capsules of dim 4
            self.W = nn.Parameter(0.1 * lib.randn(1, 64, 5, 8, 4))

        def forward(self, x):
            b = x.shape[0]
            u = _squash(lib, self.conv(x).view(b, 4, 4, 4, 4).permute(0, 1, 3, 4, 2).reshape(b, 64, 4))
            u_hat = lib.einsum("bnjdk,bnk->bnjd", self.W.expand(b, -1, -1, -1, -1), u)
            u_hat_matmul = (self.W @ u[:, :, None, :, None]).squeeze(-1)
            logits, detached = lib.zeros(b, 64, 5), u_hat.detach()
            for it in range(3):
                c = F.softmax(logits, dim=2)
                if it == 2:
                    v = _squash(lib, lib.einsum("bnj,bnjd->bjd", c, u_hat))
                else:
                    v = _squash(lib, (c.unsqueeze(-1) * detached).sum(dim=1))
                    logits = logits + lib.einsum("bnjd,bjd->bnj", detached, v)
            return v, u_hat_matmul
    return CapsNet()


def _run(lib, state):
    F = lib.nn.functional
    net = load_numpy_state(lib, _capsnet(lib), state)
    opt = lib.optim.Adam(net.parameters(), lr=1e-2)
    x, t = lib.tensor(X), lib.tensor(T)
    out = {}
    for step in range(3):
        opt.zero_grad()
        v, u_hat = net(x)
        lengths = lib.norm(v, dim=-1)
        norms = [v.norm(p=2, dim=(1, 2)), lib.norm(v, p=1, dim=-1), lib.norm(v, p="fro", dim=(-2, -1)),
                 lib.linalg.vector_norm(v, ord=float("inf"), dim=-1)]
        onehot = F.one_hot(t, 5).float()
        margin = onehot * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - onehot) * F.relu(lengths - 0.1) ** 2
        loss = margin.sum(1).mean() + 1e-3 * sum(n.sum() for n in norms) + 1e-3 * u_hat.pow(2).mean()
        loss.backward()
        out[f"step{step}"] = [v, lengths, *norms, loss]
        out[f"grads{step}"] = {n: p.grad.clone() for n, p in net.named_parameters()}
        opt.step()
    out["params"] = {n: p.detach().clone() for n, p in net.named_parameters()}
    z = lib.zeros(3, 4, requires_grad=True)
    (_squash(lib, z).sum() + lib.norm(z, dim=1).sum() + z.norm(dim=0, keepdim=True).sum()).backward()
    out["zero_vector_grads"] = z.grad
    a, b = lib.tensor(X[:, 0]), lib.tensor(X[1, 0])
    out["einsum"] = [lib.einsum("ii->i", a[0]), lib.einsum("...ij,...jk", a, a), lib.einsum("bij->", a),
                     lib.einsum(a[0], [0, 1], b, [1, 2], [0, 2])]
    return to_numpy(out)


def test_capsule_routing_training_matches_torch():
    torch.manual_seed(0)
    state = numpy_state(_capsnet(torch))
    assert_close_tree(_run(torch, state), _run(jitorch, state), rtol=1e-4, atol=1e-5)
