"""Permutation-invariant set models (after juho-lee/set_transformer's modules.py and manzilzaheer/DeepSets): a
DeepSets phi/rho network with sum pooling over padded sets under a boolean mask (masked_fill + sum / count), a
Set Transformer with MAB/SAB/ISAB (inducing points) and PMA seeds written with torch.split/torch.cat across heads
as the reference code does, and nn.MultiheadAttention with key_padding_mask for the same pooling. The task is
predicting the max and the spread of variable-size sets; permutation invariance is checked by shuffling elements.

Data from NumPy, weights from torch.manual_seed, no dropout: every metric must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MAB(nn.Module):
    def __init__(self, dim_Q, dim_K, dim_V, num_heads, ln=True):
        super().__init__()
        self.dim_V, self.num_heads = dim_V, num_heads
        self.fc_q, self.fc_k, self.fc_v = nn.Linear(dim_Q, dim_V), nn.Linear(dim_K, dim_V), nn.Linear(dim_K, dim_V)
        self.ln0, self.ln1 = (nn.LayerNorm(dim_V), nn.LayerNorm(dim_V)) if ln else (None, None)
        self.fc_o = nn.Linear(dim_V, dim_V)

    def forward(self, Q, K, mask=None):
        Q = self.fc_q(Q)
        K, V = self.fc_k(K), self.fc_v(K)
        dim_split = self.dim_V // self.num_heads
        Q_ = torch.cat(Q.split(dim_split, 2), 0)
        K_ = torch.cat(K.split(dim_split, 2), 0)
        V_ = torch.cat(V.split(dim_split, 2), 0)
        scores = Q_.bmm(K_.transpose(1, 2)) / math.sqrt(self.dim_V)
        if mask is not None:  # mask: B, N (True = padding)
            scores = scores.masked_fill(mask.repeat(self.num_heads, 1).unsqueeze(1), float("-inf"))
        A = torch.softmax(scores, 2)
        O = torch.cat((Q_ + A.bmm(V_)).split(Q.size(0), 0), 2)
        O = O if self.ln0 is None else self.ln0(O)
        O = O + F.relu(self.fc_o(O))
        return O if self.ln1 is None else self.ln1(O)


class SAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads):
        super().__init__()
        self.mab = MAB(dim_in, dim_in, dim_out, num_heads)

    def forward(self, X, mask=None):
        return self.mab(X, X, mask)


class ISAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, num_inds):
        super().__init__()
        self.I = nn.Parameter(torch.Tensor(1, num_inds, dim_out))
        nn.init.xavier_uniform_(self.I)
        self.mab0 = MAB(dim_out, dim_in, dim_out, num_heads)
        self.mab1 = MAB(dim_in, dim_out, dim_out, num_heads)

    def forward(self, X, mask=None):
        H = self.mab0(self.I.repeat(X.size(0), 1, 1), X, mask)
        return self.mab1(X, H)


class PMA(nn.Module):
    def __init__(self, dim, num_heads, num_seeds):
        super().__init__()
        self.S = nn.Parameter(torch.Tensor(1, num_seeds, dim))
        nn.init.xavier_uniform_(self.S)
        self.mab = MAB(dim, dim, dim, num_heads)

    def forward(self, X, mask=None):
        return self.mab(self.S.repeat(X.size(0), 1, 1), X, mask)


class SetTransformer(nn.Module):
    def __init__(self, dim_in=1, dim_hidden=16, heads=2):
        super().__init__()
        self.enc = nn.ModuleList([ISAB(dim_in, dim_hidden, heads, 4), ISAB(dim_hidden, dim_hidden, heads, 4)])
        self.pma = PMA(dim_hidden, heads, 1)
        self.dec = nn.Linear(dim_hidden, 2)

    def forward(self, X, mask):
        for layer in self.enc:
            X = layer(X, mask)
        return self.dec(self.pma(X, mask).squeeze(1))


class DeepSets(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(1, hidden), nn.ELU(), nn.Linear(hidden, hidden))
        self.attn = nn.MultiheadAttention(hidden, 4, batch_first=True)
        self.query = nn.Parameter(torch.zeros(1, 1, hidden))
        self.rho = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ELU(), nn.Linear(hidden, 2))

    def forward(self, X, mask):
        h = self.phi(X).masked_fill(mask.unsqueeze(-1), 0.0)
        pooled = h.sum(1) / (~mask).sum(1, keepdim=True).clamp(min=1)
        attn, _ = self.attn(self.query.expand(X.size(0), -1, -1), h, h, key_padding_mask=mask)
        return self.rho(torch.cat([pooled, attn.squeeze(1)], -1))


def make_batch(rng, b=16, n_max=10):
    sizes = rng.randint(3, n_max + 1, b)
    X = np.zeros((b, n_max, 1), np.float32)
    mask = np.ones((b, n_max), bool)
    target = np.zeros((b, 2), np.float32)
    for i, s in enumerate(sizes):
        vals = rng.randn(s)
        X[i, :s, 0], mask[i, :s] = vals, False
        target[i] = vals.max(), vals.std()
    return torch.from_numpy(X), torch.from_numpy(mask), torch.from_numpy(target)


rng = np.random.RandomState(0)
results = {}
for name, cls in [("settf", SetTransformer), ("deepsets", DeepSets)]:
    torch.manual_seed(0)
    model = cls()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    data_rng = np.random.RandomState(1)
    losses = []
    for step in range(20):
        X, mask, target = make_batch(data_rng)
        loss = F.l1_loss(model(X, mask), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    X, mask, target = make_batch(np.random.RandomState(2))
    perm = torch.from_numpy(np.random.RandomState(3).permutation(10))
    with torch.no_grad():
        out, out_perm = model(X, mask), model(X[:, perm], mask[:, perm])
    results[name] = (losses[0], losses[-1], F.l1_loss(out, target).item(), (out - out_perm).abs().max().item())
print(f"initial_loss={results['settf'][0]:.6f}")
print(f"final_loss={results['settf'][1]:.6f}")
print(f"settf_test_l1={results['settf'][2]:.6f}")
print(f"settf_perm_invariant={float(results['settf'][3] < 1e-5):.1f}")
print(f"deepsets_first={results['deepsets'][0]:.6f}")
print(f"deepsets_last={results['deepsets'][1]:.6f}")
print(f"deepsets_test_l1={results['deepsets'][2]:.6f}")
print(f"deepsets_perm_invariant={float(results['deepsets'][3] < 1e-5):.1f}")
