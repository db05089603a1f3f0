"""A ShuffleNetV2-style classifier (after torchvision's shufflenetv2.py and megvii's reference code) trained with
imbalanced-classification losses: channel_shuffle by view/transpose/contiguous (and nn.ChannelShuffle), depthwise
convolutions (groups == channels), channel split with chunk, InstanceNorm2d with affine and track_running_stats,
GroupNorm, Hardswish / SiLU / Mish activations, label-smoothed cross entropy with class weights, a sigmoid focal
loss written as torchvision.ops.sigmoid_focal_loss does and a softmax focal loss with gather, class-balanced weights
from the "effective number of samples", F.nll_loss with ignore_index on a log_softmax, and eval-mode running stats.

Data from NumPy, weights from torch.manual_seed, no dropout: every metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, norm="bn"):
        super().__init__()
        self.stride = stride
        branch = oup // 2
        Norm = {"bn": nn.BatchNorm2d, "in": lambda c: nn.InstanceNorm2d(c, affine=True, track_running_stats=True),
                "gn": lambda c: nn.GroupNorm(2, c)}[norm]
        if stride > 1:
            self.branch1 = nn.Sequential(nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False), Norm(inp),
                                         nn.Conv2d(inp, branch, 1, bias=False), Norm(branch), nn.Hardswish())
        else:
            self.branch1 = nn.Sequential()
        in2 = inp if stride > 1 else branch
        self.branch2 = nn.Sequential(nn.Conv2d(in2, branch, 1, bias=False), Norm(branch), nn.SiLU(),
                                     nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False), Norm(branch),
                                     nn.Conv2d(branch, branch, 1, bias=False), Norm(branch), nn.Mish())

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNet(nn.Module):
    def __init__(self, n_cls=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.stages = nn.Sequential(InvertedResidual(8, 16, 2, "bn"), InvertedResidual(16, 16, 1, "in"),
                                    InvertedResidual(16, 32, 2, "gn"), nn.ChannelShuffle(4),
                                    InvertedResidual(32, 32, 1, "bn"))
        self.fc = nn.Linear(32, n_cls)

    def forward(self, x):
        return self.fc(self.stages(self.stem(x)).mean([2, 3]))


def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0, reduction="mean"):
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss.mean() if reduction == "mean" else loss.sum()


def softmax_focal_loss(logits, target, gamma=2.0, weight=None):
    logp = F.log_softmax(logits, dim=1)
    logp_t = logp.gather(1, target[:, None]).squeeze(1)
    w = 1.0 if weight is None else weight[target]
    return (-w * (1 - logp_t.exp()) ** gamma * logp_t).mean()


rng = np.random.RandomState(0)
counts = np.array([40, 20, 8, 4])
labels = np.concatenate([np.full(c, k) for k, c in enumerate(counts)])
imgs = 0.3 * rng.randn(len(labels), 3, 8, 8)
for i, k in enumerate(labels):
    imgs[i, k % 3] += 0.8 * (k + 1) / 4
    imgs[i, :, k:k + 3, k:k + 3] += 0.5
X, y = torch.tensor(imgs, dtype=torch.float32), torch.from_numpy(labels)
beta = 0.99
effective = (1 - beta ** torch.tensor(counts, dtype=torch.float32)) / (1 - beta)
cb_weights = (1 / effective) / (1 / effective).sum() * 4

torch.manual_seed(0)
model = ShuffleNet()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=4e-5)
losses = []
perm_rng = np.random.RandomState(1)
for epoch in range(4):
    perm = torch.from_numpy(perm_rng.permutation(len(y)))
    for i in range(0, len(y), 24):
        idx = perm[i:i + 24]
        logits = model(X[idx])
        onehot = F.one_hot(y[idx], 4).float()
        loss = (F.cross_entropy(logits, y[idx], weight=cb_weights, label_smoothing=0.1)
                + sigmoid_focal_loss(logits, onehot) + softmax_focal_loss(logits, y[idx], weight=cb_weights))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
model.eval()
with torch.no_grad():
    logits = model(X)
masked_target = y.clone()
masked_target[::5] = -100
inorm = model.stages[1].branch2[1]
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={(logits.argmax(1) == y).float().mean().item():.6f}")
print(f"minority_recall={(logits.argmax(1)[y == 3] == 3).float().mean().item():.6f}")
print(f"nll_ignore={F.nll_loss(F.log_softmax(logits, 1), masked_target, ignore_index=-100).item():.6f}")
print(f"focal_sum={sigmoid_focal_loss(logits, F.one_hot(y, 4).float(), reduction='sum').item():.6f}")
print(f"in_running_mean={inorm.running_mean.sum().item():.6f}")
print(f"in_running_var={inorm.running_var.sum().item():.6f}")
print(f"bn_batches={model.stem[1].num_batches_tracked.item()}")
