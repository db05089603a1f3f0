"""Non-contrastive self-supervised learning (after lucidrains/byol-pytorch and facebookresearch/simsiam): BYOL with
an online encoder + projector + predictor and a momentum target built by copy.deepcopy with requires_grad_(False),
its EMA updated through torch._foreach_mul_/_foreach_add_ (as timm's ModelEmaV3 does) with a cosine momentum
schedule, the normalized-MSE loss 2 - 2 cos, symmetrized over two views; then SimSiam with stop-gradient by
.detach(), negative cosine similarity via F.cosine_similarity, SGD with momentum and a fixed-lr predictor group,
and the representation-collapse check (std of the L2-normalised outputs).

Views are made with NumPy noise; weights come from torch.manual_seed; BatchNorm is used in training mode and there
is no dropout, so every metric must match torch.
"""
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(dim, hidden, out, last_bn=False):
    layers = [nn.Linear(dim, hidden, bias=False), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out)]
    if last_bn:
        layers.append(nn.BatchNorm1d(out, affine=False))
    return nn.Sequential(*layers)


class Encoder(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.Conv2d(8, dim, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(dim), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x):
        return self.net(x)


class BYOL(nn.Module):
    def __init__(self):
        super().__init__()
        self.online = nn.Sequential(Encoder(), mlp(16, 32, 8))
        self.predictor = mlp(8, 32, 8)
        self.target = copy.deepcopy(self.online).requires_grad_(False)

    @staticmethod
    def regression(p, z):
        return 2 - 2 * (F.normalize(p, dim=-1) * F.normalize(z, dim=-1)).sum(-1)

    def forward(self, v1, v2):
        p1, p2 = self.predictor(self.online(v1)), self.predictor(self.online(v2))
        with torch.no_grad():
            z1, z2 = self.target(v1), self.target(v2)
        return (self.regression(p1, z2) + self.regression(p2, z1)).mean()

    @torch.no_grad()
    def update_target(self, tau):
        online = list(self.online.parameters())
        target = list(self.target.parameters())
        torch._foreach_mul_(target, tau)
        torch._foreach_add_(target, online, alpha=1 - tau)
        for tb, ob in zip(self.target.buffers(), self.online.buffers()):
            tb.copy_(ob)


def augment(x, rng):
    flip = rng.rand(len(x)) < 0.5
    x = np.where(flip[:, None, None, None], x[..., ::-1], x)
    return torch.tensor(x * rng.uniform(0.7, 1.3, (len(x), 1, 1, 1)) + 0.1 * rng.randn(*x.shape), dtype=torch.float32)


rng = np.random.RandomState(0)
base = np.zeros((32, 1, 8, 8), np.float32)
for i in range(32):
    r, c = rng.randint(0, 5, 2)
    base[i, 0, r:r + 3 + i % 2, c:c + 3] = 1.0

torch.manual_seed(0)
byol = BYOL()
# NOTE: SGD, not Adam: the projector's output bias feeds the predictor's BatchNorm, so its exact gradient is 0 and
# Adam would turn its rounding noise into full-size steps (chaotic across libraries).
opt = torch.optim.SGD(list(byol.online.parameters()) + list(byol.predictor.parameters()), lr=0.05, momentum=0.9)
steps, base_tau = 12, 0.9
byol_losses = []
for step in range(steps):
    v1, v2 = augment(base, rng), augment(base, rng)
    loss = byol(v1, v2)
    opt.zero_grad()
    loss.backward()
    opt.step()
    tau = 1 - (1 - base_tau) * (math.cos(math.pi * step / steps) + 1) / 2
    byol.update_target(tau)
    byol_losses.append(loss.item())
target_gap = sum((a - b).pow(2).sum() for a, b in zip(byol.online.parameters(), byol.target.parameters())).item()

torch.manual_seed(1)
encoder, projector, predictor = Encoder(), mlp(16, 32, 16, last_bn=True), mlp(16, 8, 16)
opt = torch.optim.SGD([{"params": list(encoder.parameters()) + list(projector.parameters())},
                       {"params": predictor.parameters(), "fix_lr": True}], lr=0.05, momentum=0.9, weight_decay=1e-4)
sim_losses = []
for step in range(12):
    for g in opt.param_groups:
        g["lr"] = 0.05 if g.get("fix_lr") else 0.05 * 0.5 * (1 + math.cos(math.pi * step / 12))
    x1, x2 = augment(base, rng), augment(base, rng)
    z1, z2 = projector(encoder(x1)), projector(encoder(x2))
    p1, p2 = predictor(z1), predictor(z2)
    loss = -(F.cosine_similarity(p1, z2.detach(), dim=-1).mean()
             + F.cosine_similarity(p2, z1.detach(), dim=-1).mean()) / 2
    opt.zero_grad()
    loss.backward()
    opt.step()
    sim_losses.append(loss.item())
with torch.no_grad():
    encoder.eval()
    projector.eval()
    z = F.normalize(projector(encoder(torch.from_numpy(base))), dim=1)
print(f"initial_loss={byol_losses[0]:.6f}")
print(f"final_loss={byol_losses[-1]:.6f}")
print(f"target_gap={target_gap:.6f}")
print(f"simsiam_first={sim_losses[0]:.6f}")
print(f"simsiam_last={sim_losses[-1]:.6f}")
print(f"collapse_std={z.std(dim=0).mean().item():.6f}")
