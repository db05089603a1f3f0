"""Deep metric learning as face-recognition / retrieval repos write it (after KevinMusgrave's pytorch-metric-learning
ideas, ArcFace's insightface PyTorch head and FaceNet's batch-hard triplet mining): an embedding net with an
ArcFace additive-angular-margin head (F.normalize, F.linear on normalised weights, acos-free cos(theta + m) via
sqrt(1 - cos^2), torch.where for the easy-margin rule, scatter_ into a one-hot), batch-hard triplet mining on
torch.cdist with masked max/min, nn.TripletMarginLoss(swap=True), TripletMarginWithDistanceLoss with a cosine
distance, CosineEmbeddingLoss, MarginRankingLoss, ContrastiveLoss by hand, MultiMarginLoss(p=2, weight),
MultiLabelSoftMarginLoss, HingeEmbeddingLoss, SoftMarginLoss, F.pairwise_distance / F.pdist, and recall@1 of
nearest-neighbour retrieval.

Data from NumPy, weights from torch.manual_seed, no dropout: every metric must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ArcMarginProduct(nn.Module):
    def __init__(self, in_features, out_features, s=16.0, m=0.3, easy_margin=False):
        super().__init__()
        self.weight = nn.Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        self.s, self.easy_margin = s, easy_margin
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th, self.mm = math.cos(math.pi - m), math.sin(math.pi - m) * m

    def forward(self, x, label):
        cosine = F.linear(F.normalize(x), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where(cosine > 0, phi, cosine) if self.easy_margin else torch.where(cosine > self.th, phi,
                                                                                         cosine - self.mm)
        one_hot = torch.zeros(cosine.size()).scatter_(1, label.view(-1, 1).long(), 1)
        return ((one_hot * phi) + ((1.0 - one_hot) * cosine)) * self.s


def batch_hard_triplet(emb, labels, margin=0.3):
    d = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    hardest_pos = (d * same.float()).max(1).values
    hardest_neg = d.masked_fill(same, float("inf")).min(1).values
    return F.relu(hardest_pos - hardest_neg + margin).mean(), (hardest_pos < hardest_neg).float().mean()


rng = np.random.RandomState(0)
n_cls, per = 6, 8
protos = rng.randn(n_cls, 10)
X = torch.tensor(np.repeat(protos, per, 0) + 0.6 * rng.randn(n_cls * per, 10), dtype=torch.float32)
y = torch.arange(n_cls).repeat_interleave(per)

torch.manual_seed(0)
embed = nn.Sequential(nn.Linear(10, 32), nn.PReLU(), nn.Linear(32, 8, bias=False), nn.BatchNorm1d(8))
arc = ArcMarginProduct(8, n_cls)
triplet = nn.TripletMarginLoss(margin=0.5, p=2, swap=True)
cos_triplet = nn.TripletMarginWithDistanceLoss(distance_function=lambda a, b: 1 - F.cosine_similarity(a, b),
                                               margin=0.2)
opt = torch.optim.Adam(list(embed.parameters()) + list(arc.parameters()), lr=3e-3)
losses, fracs = [], []
for step in range(20):
    emb = embed(X)
    arc_loss = F.cross_entropy(arc(emb, y), y)
    bh_loss, frac = batch_hard_triplet(F.normalize(emb), y)
    a_idx = torch.arange(0, len(y), 2)
    p_idx = a_idx + 1
    n_idx = (a_idx + per) % len(y)
    tl = triplet(emb[a_idx], emb[p_idx], emb[n_idx]) + cos_triplet(emb[a_idx], emb[p_idx], emb[n_idx])
    loss = arc_loss + bh_loss + 0.5 * tl
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    fracs.append(frac.item())

embed.eval()
with torch.no_grad():
    emb = F.normalize(embed(X))
    sim = emb @ emb.T
    sim.fill_diagonal_(-2)
    recall1 = (y[sim.argmax(1)] == y).float().mean().item()
    a, b = emb[::2], emb[1::2]
    same = (y[::2] == y[1::2]).float() * 2 - 1
    dist = F.pairwise_distance(a, b)
    contrastive = (0.5 * ((same > 0) * dist.pow(2) + (same < 0) * F.relu(1.0 - dist).pow(2))).mean()
    extras = {
        "cos_emb": nn.CosineEmbeddingLoss(margin=0.1)(a, b, same),
        "rank": nn.MarginRankingLoss(margin=0.2)(a[:, 0], b[:, 0], same),
        "multi_margin": nn.MultiMarginLoss(p=2, margin=0.5, weight=torch.linspace(0.5, 1.5, n_cls))(arc(emb, y), y),
        "mlsm": nn.MultiLabelSoftMarginLoss()(sim[:, :n_cls], F.one_hot(y, n_cls).float()),
        "hinge": nn.HingeEmbeddingLoss(margin=1.0)(dist, same),
        "soft_margin": nn.SoftMarginLoss()(a[:, 0] - b[:, 0], same),
        "pdist": F.pdist(emb[:10]).mean(),
    }
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"hard_frac_last={fracs[-1]:.6f}")
print(f"recall_at_1={recall1:.6f}")
print(f"contrastive={contrastive.item():.6f}")
for k, v in extras.items():
    print(f"{k}={v.item():.6f}")
