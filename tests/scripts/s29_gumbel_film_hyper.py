"""Conditioning and discrete-latent tricks from the research literature in one small benchmark: a categorical VAE
with F.gumbel_softmax (soft with a temperature schedule, then hard=True straight-through) whose noise comes from
torch's exponential_ stream after torch.manual_seed, the KL to a uniform prior, a FiLM-conditioned conv net
(Perez et al. 2018: per-channel gamma/beta from a question embedding, broadcast with [:, :, None, None]), and a
HyperNetwork (Ha et al. 2016) that emits the weights of a target MLP per task, applied with F.linear on batched
generated weights via torch.baddbmm / torch.bmm, trained jointly; plus RelaxedOneHotCategorical /
RelaxedBernoulli rsample and Gumbel log_prob from torch.distributions.

Weights and all noise come from torch.manual_seed's CPU stream (which jitorch reproduces), data from NumPy: every
metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Gumbel, RelaxedBernoulli, RelaxedOneHotCategorical


class CatVAE(nn.Module):
    def __init__(self, n_in=16, n_lat=4, n_cat=5):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(n_in, 32), nn.ReLU(), nn.Linear(32, n_lat * n_cat))
        self.dec = nn.Sequential(nn.Linear(n_lat * n_cat, 32), nn.ReLU(), nn.Linear(32, n_in))
        self.n_lat, self.n_cat = n_lat, n_cat

    def forward(self, x, tau, hard):
        logits = self.enc(x).view(-1, self.n_lat, self.n_cat)
        z = F.gumbel_softmax(logits, tau=tau, hard=hard, dim=-1)
        q = F.softmax(logits, -1)
        kl = (q * (torch.log(q + 1e-20) - np.log(1.0 / self.n_cat))).sum((1, 2)).mean()
        return self.dec(z.flatten(1)), kl


class FiLMNet(nn.Module):
    def __init__(self, n_q=3, ch=8):
        super().__init__()
        self.q_emb = nn.Embedding(n_q, 16)
        self.film = nn.Linear(16, 2 * 2 * ch)
        self.convs = nn.ModuleList([nn.Conv2d(1, ch, 3, padding=1), nn.Conv2d(ch, ch, 3, padding=1)])
        self.bns = nn.ModuleList([nn.BatchNorm2d(ch, affine=False), nn.BatchNorm2d(ch, affine=False)])
        self.head = nn.Linear(ch, 2)

    def forward(self, img, q):
        params = self.film(self.q_emb(q)).view(q.shape[0], 2, 2, -1)
        x = img
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            gamma, beta = params[:, i, 0], params[:, i, 1]
            x = F.relu((1 + gamma[:, :, None, None]) * bn(conv(x)) + beta[:, :, None, None])
        return self.head(x.amax((2, 3)))


class HyperNet(nn.Module):
    def __init__(self, n_tasks=4, z=6, n_in=2, hidden=8):
        super().__init__()
        self.task_z = nn.Embedding(n_tasks, z)
        self.gen_w1 = nn.Linear(z, hidden * n_in)
        self.gen_b1 = nn.Linear(z, hidden)
        self.gen_w2 = nn.Linear(z, hidden)
        self.n_in, self.hidden = n_in, hidden

    def forward(self, x, task):  # x: T, B, n_in; one task per row of T
        z = self.task_z(task)
        w1 = self.gen_w1(z).view(-1, self.hidden, self.n_in)
        h = torch.baddbmm(self.gen_b1(z).unsqueeze(1), x, w1.transpose(1, 2)).tanh()
        return torch.bmm(h, self.gen_w2(z).unsqueeze(-1)).squeeze(-1)


rng = np.random.RandomState(0)
protos = (rng.rand(5, 16) > 0.5).astype(np.float32)
data = torch.from_numpy(protos[rng.randint(0, 5, 64)])
torch.manual_seed(0)
vae = CatVAE()
opt = torch.optim.Adam(vae.parameters(), lr=3e-3)
vae_losses = []
for step in range(30):
    tau = max(0.5, float(np.exp(-0.05 * step)))
    recon, kl = vae(data, tau, hard=step >= 20)
    loss = F.binary_cross_entropy_with_logits(recon, data, reduction="sum") / len(data) + kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    vae_losses.append(loss.item())

imgs = torch.tensor(rng.rand(48, 1, 6, 6), dtype=torch.float32)
qs = torch.from_numpy(rng.randint(0, 3, 48))
answers = torch.stack([imgs[:, 0, :3].mean((1, 2)) > 0.5, imgs[:, 0, :, :3].mean((1, 2)) > 0.5,
                       imgs.amax((1, 2, 3)) > 0.97], 1)[torch.arange(48), qs].long()
film = FiLMNet()
opt2 = torch.optim.Adam(film.parameters(), lr=5e-3)
film_losses = []
for step in range(20):
    loss = F.cross_entropy(film(imgs, qs), answers)
    opt2.zero_grad()
    loss.backward()
    opt2.step()
    film_losses.append(loss.item())

hyper = HyperNet()
opt3 = torch.optim.Adam(hyper.parameters(), lr=1e-2)
xs = torch.tensor(rng.randn(4, 16, 2), dtype=torch.float32)
tasks = torch.arange(4)
ys = torch.stack([torch.sin(xs[t, :, 0] * (t + 1)) + 0.5 * xs[t, :, 1] for t in range(4)])
hyper_losses = []
for step in range(30):
    loss = F.mse_loss(hyper(xs, tasks), ys)
    opt3.zero_grad()
    loss.backward()
    opt3.step()
    hyper_losses.append(loss.item())

relaxed = RelaxedOneHotCategorical(torch.tensor(0.5), logits=torch.tensor([[1.0, 0.0, -1.0]])).rsample((4,))
rb = RelaxedBernoulli(torch.tensor(0.3), probs=torch.tensor([0.2, 0.7])).rsample((3,))
gumbel_lp = Gumbel(torch.tensor(0.5), torch.tensor(2.0)).log_prob(torch.linspace(-2, 4, 5)).sum()
print(f"initial_loss={vae_losses[0]:.6f}")
print(f"final_loss={vae_losses[-1]:.6f}")
print(f"soft_phase_last={vae_losses[19]:.6f}")
print(f"film_first={film_losses[0]:.6f}")
print(f"film_last={film_losses[-1]:.6f}")
print(f"hyper_first={hyper_losses[0]:.6f}")
print(f"hyper_last={hyper_losses[-1]:.6f}")
print(f"relaxed_sum={relaxed[:, 0, 0].sum().item():.6f}")
print(f"relaxed_bern_sum={rb.sum().item():.6f}")
print(f"gumbel_lp={gumbel_lp.item():.6f}")
print(f"next_rand={torch.rand(1).item():.6f}")
