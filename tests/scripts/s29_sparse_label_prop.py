"""Sparse graph computations as semi-supervised learning code writes them (after Zhou et al.'s label propagation,
APPNP and the kipf/pygcn utilities): a k-NN affinity graph built from torch.topk over torch.cdist, the COO adjacency
torch.sparse_coo_tensor(...).coalesce() symmetrised with .t() and added, degrees by torch.sparse.sum(dim=1).to_dense(),
D^-1/2 A D^-1/2 by scaling values through indices(), label propagation by repeated torch.sparse.mm, APPNP
personalised-PageRank propagation of an MLP's logits with gradients flowing through torch.sparse.mm into the dense
operand, a sparse row softmax (torch.sparse.softmax), sparse-times-dense via torch.mm and torch.sparse.addmm, and
sparse-dense conversions (to_sparse, to_dense, _nnz). (A CSR copy, to_sparse_csr, is left out: jitorch has only the
COO layout; tests/test_s29_fixes.py pins that.)

Data from NumPy, weights from torch.manual_seed, dropout off: every metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.RandomState(0)
n_per, k = 30, 6
centers = np.array([[0, 0], [3, 0], [1.5, 2.5]])
X = torch.tensor(np.concatenate([c + 0.7 * rng.randn(n_per, 2) for c in centers]), dtype=torch.float32)
y = torch.arange(3).repeat_interleave(n_per)
n = X.shape[0]
labeled = torch.zeros(n, dtype=torch.bool)
labeled[torch.from_numpy(rng.choice(n, 9, replace=False))] = True

dist = torch.cdist(X, X)
knn_d, knn_i = dist.topk(k + 1, largest=False)
rows = torch.arange(n).repeat_interleave(k)
cols = knn_i[:, 1:].reshape(-1)
weights = torch.exp(-knn_d[:, 1:].reshape(-1) ** 2 / 2)
W = torch.sparse_coo_tensor(torch.stack([rows, cols]), weights, (n, n)).coalesce()
W = ((W + W.t()) * 0.5).coalesce()
deg = torch.sparse.sum(W, dim=1).to_dense()
idx = W.indices()
d_inv_sqrt = deg.pow(-0.5)
S = torch.sparse_coo_tensor(idx, W.values() * d_inv_sqrt[idx[0]] * d_inv_sqrt[idx[1]], (n, n)).coalesce()

# Label propagation: F <- alpha S F + (1 - alpha) Y.
Y0 = torch.zeros(n, 3)
Y0[labeled] = F.one_hot(y[labeled], 3).float()
Fm = Y0.clone()
for _ in range(30):
    Fm = 0.9 * torch.sparse.mm(S, Fm) + 0.1 * Y0
lp_acc = (Fm.argmax(1) == y)[~labeled].float().mean().item()


class APPNP(nn.Module):
    def __init__(self, K=5, alpha=0.1):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 3))
        self.K, self.alpha = K, alpha

    def forward(self, x, adj):
        h0 = self.mlp(x)
        h = h0
        for _ in range(self.K):
            h = (1 - self.alpha) * torch.sparse.mm(adj, h) + self.alpha * h0
        return h


torch.manual_seed(0)
model = APPNP()
opt = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=5e-4)
losses = []
for epoch in range(40):
    out = model(X, S)
    loss = F.cross_entropy(out[labeled], y[labeled])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
with torch.no_grad():
    appnp_acc = (model(X, S).argmax(1) == y)[~labeled].float().mean().item()

# Sparse softmax over each row's neighbours, CSR product, hybrid conversions.
att = torch.sparse.softmax(torch.sparse_coo_tensor(idx, -W.values(), (n, n)), dim=1).coalesce()
att_rowsum = torch.sparse.sum(att, dim=1).to_dense()
H = torch.tensor(rng.randn(n, 4), dtype=torch.float32)
coo_prod = torch.mm(S, H)
addmm_prod = torch.sparse.addmm(H[:, :1].expand(n, 4), S, H, beta=0.5, alpha=2.0)
dense_prod = S.to_dense() @ H
thresholded = (S.to_dense() * (S.to_dense() > 0.1)).to_sparse()
print(f"nnz={W._nnz()}")
print(f"deg_mean={deg.mean().item():.6f}")
print(f"lp_acc={lp_acc:.6f}")
print(f"lp_mass={Fm.sum().item():.6f}")
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"appnp_acc={appnp_acc:.6f}")
print(f"att_rowsum_min={att_rowsum.min().item():.6f}")
print(f"att_max={att.values().max().item():.6f}")
print(f"coo_vs_dense={(coo_prod - dense_prod).abs().max().item() * 1e6:.3f}")
print(f"addmm_vs_dense={(addmm_prod - 0.5 * H[:, :1] - 2 * dense_prod).abs().max().item() * 1e6:.3f}")
print(f"thresh_nnz={thresholded._nnz()}")
print(f"is_sparse={float(S.is_sparse and not dense_prod.is_sparse)}")
