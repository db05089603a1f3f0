"""Skip-gram word2vec with negative sampling (SGNS) on a toy corpus: two nn.Embedding(sparse=True) tables trained
by optim.SparseAdam, negatives drawn from the unigram^0.75 table with NumPy, logsigmoid losses, then a bag-of-words
classifier on nn.EmbeddingBag (offsets, per_sample_weights, mode="sum"/"mean"/"max", padding_idx) initialised
from the learned vectors, trained with dense Adam; nearest neighbours by cosine similarity.

Deterministic: everything random comes from NumPy; metrics must match torch.
"""
import collections

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.RandomState(0)
animals = ["cat", "dog", "cow", "horse", "sheep"]
tools = ["hammer", "saw", "drill", "wrench", "pliers"]
sentences = []
for _ in range(200):
    if rng.rand() < 0.5:
        sentences.append(["the", animals[rng.randint(5)], "eats", "grass", "and", "the",
                          animals[rng.randint(5)], "sleeps"])
    else:
        sentences.append(["a", tools[rng.randint(5)], "fixes", "the", "metal", "with", "a",
                          tools[rng.randint(5)]])
counts = collections.Counter(w for s in sentences for w in s)
vocab = sorted(counts)
w2i = {w: i for i, w in enumerate(vocab)}
V, D, WINDOW, K = len(vocab), 16, 2, 4
freq = np.array([counts[w] for w in vocab], dtype=np.float64) ** 0.75
noise = freq / freq.sum()

pairs = []
for s in sentences:
    ids = [w2i[w] for w in s]
    for i, c in enumerate(ids):
        for j in range(max(0, i - WINDOW), min(len(ids), i + WINDOW + 1)):
            if j != i:
                pairs.append((c, ids[j]))
pairs = np.array(pairs)


class SkipGram(nn.Module):
    def __init__(self):
        super().__init__()
        self.u = nn.Embedding(V, D, sparse=True)
        self.v = nn.Embedding(V, D, sparse=True)
        r = np.random.RandomState(1)
        with torch.no_grad():
            self.u.weight.copy_(torch.from_numpy(r.uniform(-0.5 / D, 0.5 / D, (V, D)).astype(np.float32)))
            self.v.weight.zero_()

    def forward(self, center, context, negatives):
        eu = self.u(center)  # (B, D)
        ev = self.v(context)  # (B, D)
        en = self.v(negatives)  # (B, K, D)
        pos = F.logsigmoid((eu * ev).sum(1))
        neg = F.logsigmoid(-torch.bmm(en, eu.unsqueeze(2)).squeeze(2)).sum(1)
        return -(pos + neg).mean()


sg = SkipGram()
opt = torch.optim.SparseAdam(list(sg.parameters()), lr=0.05)
losses = []
for epoch in range(3):
    order = rng.permutation(len(pairs))
    for b in range(0, len(order), 256):
        batch = pairs[order[b:b + 256]]
        center = torch.from_numpy(batch[:, 0])
        context = torch.from_numpy(batch[:, 1])
        negatives = torch.from_numpy(rng.choice(V, size=(len(batch), K), p=noise))
        loss = sg(center, context, negatives)
        opt.zero_grad()
        loss.backward()
        assert sg.u.weight.grad.is_sparse
        opt.step()
        losses.append(loss.item())

emb = sg.u.weight.detach()
normed = F.normalize(emb, dim=1)
sim = normed @ normed.t()
cat_row = sim[w2i["cat"]].clone()
cat_row[w2i["cat"]] = -1
nearest = vocab[cat_row.argmax().item()]
same = np.mean([sim[w2i[a], w2i[b]].item() for a in animals for b in animals if a != b])
cross = np.mean([sim[w2i[a], w2i[t]].item() for a in animals for t in tools])
print("nearest to cat:", nearest)

# Bag-of-words topic classifier on EmbeddingBag with flat input + offsets, pretrained from the skip-gram vectors.
docs = [[w2i[w] for w in s if w not in ("the", "a")] for s in sentences]
labels = torch.tensor([int(s[0] == "a") for s in sentences])
flat = torch.tensor([i for d in docs for i in d])
offsets = torch.tensor([0] + list(np.cumsum([len(d) for d in docs])[:-1]))
weights = torch.from_numpy(rng.uniform(0.5, 1.5, len(flat)).astype(np.float32))


class BagClassifier(nn.Module):
    def __init__(self, pretrained):
        super().__init__()
        self.bag_sum = nn.EmbeddingBag.from_pretrained(pretrained.clone(), freeze=False, mode="sum")
        self.bag_max = nn.EmbeddingBag(V, D, mode="max")
        self.bag_mean = nn.EmbeddingBag(V, D, mode="mean", padding_idx=w2i["with"])
        with torch.no_grad():
            self.bag_max.weight.copy_(pretrained)
            self.bag_mean.weight.copy_(pretrained)
        self.fc = nn.Linear(3 * D, 2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(np.random.RandomState(2).randn(2, 3 * D).astype(np.float32) * .1))
            self.fc.bias.zero_()

    def forward(self, flat, offsets, weights):
        return self.fc(torch.cat([self.bag_sum(flat, offsets, per_sample_weights=weights),
                                  self.bag_max(flat, offsets), self.bag_mean(flat, offsets)], 1))


clf = BagClassifier(emb)
copt = torch.optim.Adam(clf.parameters(), lr=0.02)
clf_losses = []
for step in range(20):
    logits = clf(flat, offsets, weights)
    loss = F.cross_entropy(logits, labels)
    copt.zero_grad()
    loss.backward()
    copt.step()
    clf_losses.append(loss.item())
acc = (clf(flat, offsets, weights).argmax(1) == labels).float().mean().item()
# the padding_idx row never receives gradient
pad_grad = clf.bag_mean.weight.grad[w2i["with"]].abs().sum().item()

print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"sg_loss_mean_last10={np.mean(losses[-10:]):.6f}")
print(f"emb_norm={emb.norm().item():.6f}")
print(f"same_topic_sim={same:.6f}")
print(f"cross_topic_sim={cross:.6f}")
print(f"clf_initial_loss={clf_losses[0]:.6f}")
print(f"clf_final_loss={clf_losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"pad_row_grad={pad_grad:.6f}")
