"""Recommender-system training as DLRM / TorchRec-free code writes it: multi-hot user features pooled by
nn.EmbeddingBag (mode="sum" with offsets and per_sample_weights, mode="mean" with padding_idx, mode="max" on a
2-D input), item embeddings with sparse=True gradients optimised by torch.optim.SparseAdam while dense layers
use Adagrad, a DLRM-style pairwise dot-product interaction via bmm + triu_indices, BPR loss with F.logsigmoid on
sampled negatives, and recall@k evaluation with topk after masking seen items with index_put_.

Data and weights come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class DLRMish(nn.Module):
    def __init__(self, n_users, n_items, n_tags, d=8):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, d)
        self.item_emb = nn.Embedding(n_items, d, sparse=True)
        self.tag_bag = nn.EmbeddingBag(n_tags, d, mode="sum")
        self.hist_bag = nn.EmbeddingBag(n_items + 1, d, mode="mean", padding_idx=n_items)
        self.ctx_bag = nn.EmbeddingBag(5, d, mode="max")
        self.bottom = nn.Sequential(nn.Linear(3, d), nn.ReLU())
        n_feat = 5
        li, lj = torch.triu_indices(n_feat, n_feat, offset=1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = nn.Sequential(nn.Linear(d + len(li), 16), nn.ReLU(), nn.Linear(16, 1))

    def user_vector(self, users, tags, tag_offsets, tag_weights, hist, ctx, dense):
        return [self.user_emb(users), self.tag_bag(tags, tag_offsets, per_sample_weights=tag_weights),
                self.hist_bag(hist), self.ctx_bag(ctx), self.bottom(dense)]

    def score(self, feats, items):
        T = torch.stack(feats[:4] + [self.item_emb(items)], dim=1)  # (B, 5, d)
        Z = torch.bmm(T, T.transpose(1, 2))
        inter = Z[:, self.li, self.lj]
        return self.top(torch.cat([feats[4], inter], dim=1)).squeeze(-1)


rng = np.random.RandomState(0)
n_users, n_items, n_tags = 20, 30, 12
model = DLRMish(n_users, n_items, n_tags)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.3).astype(np.float32)))
    model.hist_bag.weight[n_items].zero_()
user_pref = rng.randint(0, 3, n_users)
pos_items = np.array([rng.choice(np.arange(n_items)[np.arange(n_items) % 3 == user_pref[u]], 4, replace=False)
                      for u in range(n_users)])
tag_lists = [rng.randint(0, n_tags, rng.randint(1, 4)) for _ in range(n_users)]
tags = torch.from_numpy(np.concatenate(tag_lists))
tag_offsets = torch.from_numpy(np.cumsum([0] + [len(t) for t in tag_lists[:-1]]))
tag_weights = torch.from_numpy(rng.uniform(0.5, 1.5, len(tags)).astype(np.float32))
hist = torch.from_numpy(np.where(rng.rand(n_users, 3) < 0.7, pos_items[:, :3], n_items))
ctx = torch.from_numpy(rng.randint(0, 5, (n_users, 2)))
dense = torch.from_numpy(rng.randn(n_users, 3).astype(np.float32))
users = torch.arange(n_users)

sparse_params = [model.item_emb.weight]
dense_params = [p for n, p in model.named_parameters() if n != "item_emb.weight"]
opt_sparse = torch.optim.SparseAdam(sparse_params, lr=0.02)
opt_dense = torch.optim.Adagrad(dense_params, lr=0.05)
neg_draws = rng.randint(0, n_items, (40, n_users))
losses = []
for step in range(40):
    pos = torch.from_numpy(pos_items[np.arange(n_users), step % 4])
    neg = torch.from_numpy(neg_draws[step])
    feats = model.user_vector(users, tags, tag_offsets, tag_weights, hist, ctx, dense)
    loss = -F.logsigmoid(model.score(feats, pos) - model.score(feats, neg)).mean()
    opt_sparse.zero_grad()
    opt_dense.zero_grad()
    loss.backward()
    assert model.item_emb.weight.grad.is_sparse
    opt_sparse.step()
    opt_dense.step()
    losses.append(loss.item())

with torch.no_grad():
    feats = model.user_vector(users, tags, tag_offsets, tag_weights, hist, ctx, dense)
    all_scores = torch.stack([model.score(feats, torch.full((n_users,), i)) for i in range(n_items)], dim=1)
    seen_u = torch.arange(n_users).repeat_interleave(2)
    seen_i = torch.from_numpy(pos_items[:, :2].reshape(-1))
    all_scores.index_put_((seen_u, seen_i), torch.tensor(float("-inf")))
    top = all_scores.topk(5, dim=1).indices
    held_out = torch.from_numpy(pos_items[:, 2:])
    hits = (top.unsqueeze(2) == held_out.unsqueeze(1)).any(1).float().sum(1)
    recall = (hits / 2).mean().item()
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_20={losses[20]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"recall_at_5={recall:.6f}")
print(f"item_emb_norm={model.item_emb.weight.norm().item():.6f}")
print(f"tag_bag_norm={model.tag_bag.weight.norm().item():.6f}")
print(f"pad_row_norm={model.hist_bag.weight[n_items].norm().item():.6f}")
