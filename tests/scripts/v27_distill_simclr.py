"""Knowledge distillation (Hinton et al.: temperature-softened KL, KLDivLoss with log_target) and a SimCLR NT-Xent
contrastive pretraining step (F.normalize, similarity matrix, masked_fill of the diagonal, cross_entropy).

Weights, data and augmentations come from NumPy, so every printed metric is the same under every backend.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(3)
N, D, C = 64, 12, 5
centers = rng.normal(scale=2.0, size=(C, D))
Y_np = rng.integers(0, C, size=N)
X = torch.from_numpy((centers[Y_np] + rng.normal(size=(N, D))).astype(np.float32))
Y = torch.from_numpy(Y_np)


def mlp(widths, seed):
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(g.normal(scale=0.3, size=tuple(p.shape)).astype(np.float32)))
    return model


def distillation_loss(student_logits, teacher_logits, labels, T=4.0, alpha=0.7):
    soft = nn.KLDivLoss(reduction="batchmean", log_target=True)(
        F.log_softmax(student_logits / T, dim=-1), F.log_softmax(teacher_logits / T, dim=-1)) * T * T
    hard = F.cross_entropy(student_logits, labels)
    return alpha * soft + (1 - alpha) * hard


# Teacher: a wider net trained with plain cross-entropy.
teacher = mlp([D, 64, 64, C], seed=1)
opt = torch.optim.Adam(teacher.parameters(), lr=5e-3)
for _ in range(40):
    opt.zero_grad()
    F.cross_entropy(teacher(X), Y).backward()
    opt.step()
teacher.eval()
for p in teacher.parameters():
    p.requires_grad_(False)

student = mlp([D, 16, C], seed=2)
with torch.no_grad():
    initial = distillation_loss(student(X), teacher(X), Y).item()
opt = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9)
for _ in range(3):
    for i in range(0, N, 16):
        x, y = X[i:i + 16], Y[i:i + 16]
        with torch.no_grad():
            t_logits = teacher(x)
        loss = distillation_loss(student(x), t_logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    final = distillation_loss(student(X), teacher(X), Y).item()
    agree = (student(X).argmax(1) == teacher(X).argmax(1)).float().mean().item()
    # The same KL without log_target, as the older recipes write it.
    kl_prob = F.kl_div(F.log_softmax(student(X) / 2, 1), F.softmax(teacher(X) / 2, 1), reduction="batchmean").item()
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"teacher_student_agreement={agree:.6f}")
print(f"kl_prob_target={kl_prob:.6f}")


def nt_xent(z1, z2, temperature=0.5):
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    n = z1.shape[0]
    sim = z @ z.T / temperature
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, targets)


def augment(x, g):
    noise = torch.from_numpy(g.normal(scale=0.3, size=tuple(x.shape)).astype(np.float32))
    keep = torch.from_numpy(g.random(size=tuple(x.shape)) > 0.2)
    return torch.where(keep, x + noise, torch.zeros_like(x))


encoder = mlp([D, 32, 16], seed=4)
projector = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))
g = np.random.default_rng(5)
with torch.no_grad():
    for p in projector.parameters():
        p.copy_(torch.from_numpy(g.normal(scale=0.3, size=tuple(p.shape)).astype(np.float32)))
params = list(encoder.parameters()) + list(projector.parameters())
opt = torch.optim.Adam(params, lr=3e-3, weight_decay=1e-6)
aug_rng = np.random.default_rng(6)
losses = []
for step in range(12):
    x = X[(step * 16) % N:(step * 16) % N + 16]
    loss = nt_xent(projector(encoder(augment(x, aug_rng))), projector(encoder(augment(x, aug_rng))))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
with torch.no_grad():
    feats = F.normalize(encoder(X), dim=-1)
    sims = feats @ feats.t()
    same = (Y[:, None] == Y[None, :]).float() - torch.eye(N)
    diff = 1 - (Y[:, None] == Y[None, :]).float()
    margin = ((sims * same).sum() / same.sum() - (sims * diff).sum() / diff.sum()).item()
print(f"simclr_first_loss={losses[0]:.6f}")
print(f"simclr_last_loss={losses[-1]:.6f}")
print(f"simclr_class_margin={margin:.6f}")
