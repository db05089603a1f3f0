"""Weight averaging: an EMA teacher via AveragedModel(multi_avg_fn=get_ema_multi_avg_fn) with use_buffers, and
stochastic weight averaging (AveragedModel + SWALR + update_bn) of a BatchNorm convnet.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(11)
N = 64
labels = rng.integers(0, 3, size=N)
images = rng.normal(scale=0.5, size=(N, 2, 8, 8)).astype(np.float32)
for i, c in enumerate(labels):  # class c brightens a quarter of the image
    images[i, :, (c % 2) * 4:(c % 2) * 4 + 4, (c // 2) * 4:(c // 2) * 4 + 4] += 1.0
X, Y = torch.from_numpy(images), torch.from_numpy(labels)
# shuffle=False: the batch order is part of the result and must not depend on the backend's RNG.
loader = DataLoader(TensorDataset(X, Y), batch_size=16, shuffle=False)


def net():
    model = nn.Sequential(
        nn.Conv2d(2, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8, momentum=None), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(p=0.0), nn.Linear(8, 3),
    )
    g = np.random.default_rng(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.from_numpy(g.normal(scale=0.3, size=tuple(p.shape)).astype(np.float32)))
            elif name.endswith("bias"):
                p.zero_()
    return model


def evaluate(model):
    model.eval()
    with torch.no_grad():
        logits = model(X)
    return F.cross_entropy(logits, Y).item(), (logits.argmax(-1) == Y).float().mean().item()


model = net()
initial, _ = evaluate(model)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
swa_model = AveragedModel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
swa_start = 3
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=swa_start)
swa_scheduler = SWALR(optimizer, swa_lr=0.02, anneal_epochs=2, anneal_strategy="linear")

for epoch in range(7):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        ema.update_parameters(model)
    if epoch >= swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()

update_bn(loader, swa_model)
final, acc = evaluate(model)
ema_loss, ema_acc = evaluate(ema)
swa_loss, swa_acc = evaluate(swa_model)
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"accuracy={acc:.6f}")
print(f"ema_loss={ema_loss:.6f}")
print(f"swa_loss={swa_loss:.6f}")
print(f"swa_n_averaged={int(swa_model.n_averaged)}")
print(f"ema_n_averaged={int(ema.n_averaged)}")
print(f"swa_bn_mean_sum={swa_model.module[1].running_mean.sum().item():.6f}")
print(f"swa_bn_var_sum={swa_model.module[4].running_var.sum().item():.6f}")
print(f"ema_bn_var_sum={ema.module[1].running_var.sum().item():.6f}")
print(f"lr={optimizer.param_groups[0]['lr']:.6f}")
