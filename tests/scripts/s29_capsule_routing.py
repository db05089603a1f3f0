"""Capsule network with dynamic routing (after Sabour et al. 2017 and gram-ai/capsule-networks / XifengGuo's
CapsNet-Pytorch): primary capsules from a Conv2d reshaped into 8-D vectors, the squash non-linearity, prediction
vectors u_hat = W @ u through torch.matmul on broadcast 5-D tensors, three routing iterations with softmax over the
output capsules and agreement updates (u_hat detached in the inner iterations, as the Keras/PyTorch ports do), the
margin loss with clamp, and a reconstruction decoder masked by the longest capsule (one_hot of argmax).

Data from NumPy, weights from torch.manual_seed, no dropout: every metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def squash(s, dim=-1, eps=1e-8):
    sq = (s ** 2).sum(dim=dim, keepdim=True)
    return sq / (1 + sq) * s / torch.sqrt(sq + eps)


class PrimaryCaps(nn.Module):
    def __init__(self, in_ch=8, caps=4, dim=8):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, caps * dim, kernel_size=3, stride=2)
        self.dim = dim

    def forward(self, x):
        out = self.conv(x)  # B, caps*dim, H, W
        out = out.view(x.size(0), -1, self.dim, out.size(-2), out.size(-1)).permute(0, 1, 3, 4, 2)
        return squash(out.reshape(x.size(0), -1, self.dim))


class DigitCaps(nn.Module):
    def __init__(self, in_caps, in_dim=8, out_caps=3, out_dim=6, iterations=3):
        super().__init__()
        self.W = nn.Parameter(0.05 * torch.randn(1, out_caps, in_caps, out_dim, in_dim))
        self.iterations = iterations

    def forward(self, u):
        u_hat = torch.matmul(self.W, u[:, None, :, :, None]).squeeze(-1)  # B, out, in, out_dim
        u_hat_detached = u_hat.detach()
        b = torch.zeros(u.size(0), self.W.size(1), u.size(1), device=u.device)
        for i in range(self.iterations):
            c = F.softmax(b, dim=1)
            if i == self.iterations - 1:
                v = squash(torch.sum(c[..., None] * u_hat, dim=-2, keepdim=True))
            else:
                v = squash(torch.sum(c[..., None] * u_hat_detached, dim=-2, keepdim=True))
                b = b + torch.sum(v * u_hat_detached, dim=-1)
        return v.squeeze(-2), c


class CapsNet(nn.Module):
    def __init__(self, n_cls=3):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3)
        self.primary = PrimaryCaps()
        self.digits = DigitCaps(in_caps=4 * 2 * 2)
        self.decoder = nn.Sequential(nn.Linear(6 * n_cls, 32), nn.ReLU(inplace=True), nn.Linear(32, 64), nn.Sigmoid())

    def forward(self, x, y=None):
        v, c = self.digits(self.primary(F.relu(self.conv1(x))))
        lengths = v.norm(dim=-1)
        if y is None:
            y = F.one_hot(lengths.argmax(dim=1), num_classes=v.size(1)).float()
        recon = self.decoder((v * y[:, :, None]).flatten(1))
        return lengths, recon, c


def margin_loss(lengths, y, m_pos=0.9, m_neg=0.1, lam=0.5):
    left = F.relu(m_pos - lengths).pow(2)
    right = torch.clamp(lengths - m_neg, min=0.0) ** 2
    return (y * left + lam * (1 - y) * right).sum(dim=1).mean()


rng = np.random.RandomState(0)
n = 48
labels = rng.randint(0, 3, n)
imgs = 0.1 * rng.rand(n, 1, 8, 8)
for i, k in enumerate(labels):
    if k == 0:
        imgs[i, 0, 2:6, 3:5] = 1
    elif k == 1:
        imgs[i, 0, 3:5, 1:7] = 1
    else:
        imgs[i, 0, [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]] = 1
x = torch.tensor(imgs, dtype=torch.float32)
y_idx = torch.from_numpy(labels)
y = torch.eye(3).index_select(dim=0, index=y_idx)

torch.manual_seed(0)
model = CapsNet()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.95)
losses = []
for epoch in range(6):
    for start in range(0, n, 16):
        xb, yb = x[start:start + 16], y[start:start + 16]
        lengths, recon, _ = model(xb, yb)
        loss = margin_loss(lengths, yb) + 0.0005 * 64 * F.mse_loss(recon, xb.view(len(xb), -1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    sched.step()
model.eval()
with torch.no_grad():
    lengths, recon, c = model(x)
acc = (lengths.argmax(1) == y_idx).float().mean().item()
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"mean_length={lengths.mean().item():.6f}")
print(f"coupling_entropy={-(c * c.clamp_min(1e-12).log()).sum(1).mean().item():.6f}")
print(f"recon_mse={F.mse_loss(recon, x.view(n, -1)).item():.6f}")
