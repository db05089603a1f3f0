"""Spectrally normalised GAN and orthogonal recurrent weights: an SN-GAN discriminator (after
christiansafka/img2img / the SNGAN pytorch ports) with nn.utils.spectral_norm and
nn.utils.parametrizations.spectral_norm (power-iteration vectors u/v in buffers, drawn by normal_ from
torch.manual_seed's stream), hinge losses, a generator with ConvTranspose2d + BatchNorm2d, two Adam optimizers
with betas=(0.0, 0.9) and n_critic steps, plus an orthogonal RNN cell through
nn.utils.parametrizations.orthogonal (matrix_exp / cayley / householder maps) whose weight stays orthogonal
while training, and nn.AdaptiveLogSoftmaxWithLoss on its outputs.

Weights and data come from NumPy and the power-iteration vectors from the torch stream (which jitorch
reproduces), so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations

SN = nn.utils.spectral_norm


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = SN(nn.Conv2d(1, 8, 3, 1, 1))
        self.c2 = SN(nn.Conv2d(8, 16, 4, 2, 1))
        self.c3 = parametrizations.spectral_norm(nn.Conv2d(16, 16, 4, 2, 1))
        self.fc = parametrizations.spectral_norm(nn.Linear(16 * 2 * 2, 1))

    def forward(self, x):
        x = F.leaky_relu(self.c1(x), 0.1)
        x = F.leaky_relu(self.c2(x), 0.1)
        x = F.leaky_relu(self.c3(x), 0.1)
        return self.fc(x.flatten(1))


class Generator(nn.Module):
    def __init__(self, z_dim=8):
        super().__init__()
        self.fc = nn.Linear(z_dim, 16 * 2 * 2)
        self.net = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(), nn.ConvTranspose2d(16, 8, 4, 2, 1),
                                 nn.BatchNorm2d(8), nn.ReLU(), nn.ConvTranspose2d(8, 1, 4, 2, 1), nn.Tanh())

    def forward(self, z):
        return self.net(self.fc(z).view(-1, 16, 2, 2))


class OrthoRNN(nn.Module):
    def __init__(self, n_in, hidden, vocab, maps=("matrix_exp", "cayley", "householder")):
        super().__init__()
        self.inp = nn.Linear(n_in, hidden)
        self.recs = nn.ModuleList([parametrizations.orthogonal(nn.Linear(hidden, hidden, bias=False),
                                                                orthogonal_map=m) for m in maps])
        self.out = nn.AdaptiveLogSoftmaxWithLoss(hidden, vocab, cutoffs=[4, 10], div_value=2.0)

    def forward(self, x, target):
        h = torch.zeros(x.size(0), self.inp.out_features)
        for t in range(x.size(1)):
            h = torch.tanh(self.inp(x[:, t]) + self.recs[t % len(self.recs)](h))
        return self.out(h, target)


torch.manual_seed(0)
rng = np.random.RandomState(0)
D, G = Discriminator(), Generator()
with torch.no_grad():
    for n, p in list(D.named_parameters()) + list(G.named_parameters()):
        if p.dim() > 1 or n.endswith("bias"):
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
real = torch.from_numpy(np.clip(rng.randn(16, 1, 8, 8) * 0.3 + np.linspace(-1, 1, 8)[None, None, None], -1, 1)
                        .astype(np.float32))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.0, 0.9))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.0, 0.9))
d_losses, g_losses = [], []
for it in range(8):
    for _ in range(2):  # n_critic
        z = torch.from_numpy(rng.randn(16, 8).astype(np.float32))
        d_loss = F.relu(1.0 - D(real)).mean() + F.relu(1.0 + D(G(z).detach())).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
    z = torch.from_numpy(rng.randn(16, 8).astype(np.float32))
    g_loss = -D(G(z)).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    d_losses.append(d_loss.item())
    g_losses.append(g_loss.item())
D.eval()
with torch.no_grad():
    w = D.c2.weight_orig.flatten(1)
    sigma_est = torch.dot(D.c2.weight_u, w @ D.c2.weight_v).item()
    sigma_true = torch.linalg.matrix_norm(w, ord=2).item()
    fc_sigma = torch.linalg.matrix_norm(D.fc.weight, ord=2).item()

rnn = OrthoRNN(3, 8, 16)
seqs = torch.from_numpy(rng.randn(24, 6, 3).astype(np.float32))
targets = torch.from_numpy((np.abs(seqs.numpy()).sum((1, 2)) * 2).astype(np.int64) % 16)
opt = torch.optim.Adam(rnn.parameters(), lr=1e-2)
rnn_losses = []
for step in range(20):
    out = rnn(seqs, targets)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    rnn_losses.append(out.loss.item())
with torch.no_grad():
    ortho_err = max((m.weight.T @ m.weight - torch.eye(8)).abs().max().item() for m in rnn.recs)
    h = torch.zeros(24, 8)
    for t in range(6):
        h = torch.tanh(rnn.inp(seqs[:, t]) + rnn.recs[t % 3](h))
    pred = rnn.out.predict(h)
    logprob_sum = rnn.out.log_prob(h).exp().sum(1).mean().item()
print(f"d_loss_first={d_losses[0]:.6f}")
print(f"d_loss_last={d_losses[-1]:.6f}")
print(f"g_loss_last={g_losses[-1]:.6f}")
print(f"sigma_ratio={sigma_est / sigma_true:.5f}")
print(f"fc_sigma={fc_sigma:.5f}")
print(f"initial_loss={rnn_losses[0]:.6f}")
print(f"final_loss={rnn_losses[-1]:.6f}")
print(f"ortho_ok={int(ortho_err < 1e-4)}")
print(f"pred_checksum={int((pred * torch.arange(1, 25)).sum().item())}")
print(f"prob_mass={logprob_sum:.6f}")
