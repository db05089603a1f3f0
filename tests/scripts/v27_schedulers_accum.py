"""Training utilities: parameter groups with their own lr / weight decay, linear warmup chained into cosine restarts
with SequentialLR, OneCycleLR, LambdaLR and ReduceLROnPlateau, gradient accumulation with clip_grad_norm_ and
clip_grad_value_.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils import clip_grad_norm_, clip_grad_value_
from torch.optim import lr_scheduler

rng = np.random.default_rng(5)
X = torch.from_numpy(rng.normal(size=(96, 10)).astype(np.float32))
W_true = rng.normal(size=(10, 4)).astype(np.float32)
Y = torch.from_numpy(np.argmax(X.numpy() @ W_true + 0.3 * rng.normal(size=(96, 4)), axis=1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(10, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.backbone(x))


def build(seed):
    model = Net()
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(g.normal(scale=0.2, size=tuple(p.shape)).astype(np.float32)))
    return model


def param_groups(model):
    return [
        {"params": model.backbone.parameters(), "lr": 1e-2, "weight_decay": 1e-4},
        {"params": model.head.parameters(), "lr": 3e-2, "weight_decay": 0.0},
    ]


def train(model, optimizer, scheduler, epochs, accum_steps=3, micro=8, per_batch=True, clip="norm"):
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    lrs, norms = [], []
    for epoch in range(epochs):
        optimizer.zero_grad()
        for step, i in enumerate(range(0, len(X), micro)):
            loss = loss_fn(model(X[i:i + micro]), Y[i:i + micro]) / accum_steps
            loss.backward()
            if (step + 1) % accum_steps == 0:
                if clip == "norm":
                    norms.append(float(clip_grad_norm_(model.parameters(), max_norm=0.5)))
                else:
                    clip_grad_value_(model.parameters(), clip_value=0.05)
                optimizer.step()
                optimizer.zero_grad()
                if per_batch:
                    scheduler.step()
                lrs.append(optimizer.param_groups[-1]["lr"])
        if not per_batch:
            with torch.no_grad():
                val = loss_fn(model(X), Y).item()
            if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
                scheduler.step(val)
            else:
                scheduler.step()
    with torch.no_grad():
        logits = model(X)
        return loss_fn(logits, Y).item(), (logits.argmax(1) == Y).float().mean().item(), lrs, norms


with torch.no_grad():
    initial = nn.functional.cross_entropy(build(0)(X), Y, label_smoothing=0.05).item()
print(f"initial_loss={initial:.6f}")

# 1. SGD + nesterov, warmup (LinearLR) then CosineAnnealingWarmRestarts, chained by SequentialLR, stepped per batch.
model = build(0)
opt = torch.optim.SGD(param_groups(model), momentum=0.9, nesterov=True)
warmup = lr_scheduler.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=4)
restarts = lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=5, T_mult=2, eta_min=1e-4)
sched = lr_scheduler.SequentialLR(opt, schedulers=[warmup, restarts], milestones=[4])
loss, acc, lrs, norms = train(model, opt, sched, 6)
print(f"seq_loss={loss:.6f}")
print(f"seq_acc={acc:.6f}")
print(f"seq_lr_sum={sum(lrs):.6f}")
for k, v in enumerate(sched.get_last_lr()):
    print(f"seq_last_lr{k}={v:.6g}")
print(f"seq_grad_norm_max={max(norms):.6f}")

# 2. AdamW + OneCycleLR (cycles momentum through betas), clip by value.
model = build(1)
opt = torch.optim.AdamW(param_groups(model), betas=(0.9, 0.98))
sched = lr_scheduler.OneCycleLR(opt, max_lr=[2e-2, 5e-2], total_steps=24, pct_start=0.25, anneal_strategy="cos")
loss, acc, lrs, _ = train(model, opt, sched, 6, clip="value")
print(f"onecycle_loss={loss:.6f}")
print(f"onecycle_lr_sum={sum(lrs):.6f}")
print(f"onecycle_beta1={opt.param_groups[0]['betas'][0]:.6f}")

# 3. Adam + LambdaLR with one lambda per group, stepped per epoch.
model = build(2)
opt = torch.optim.Adam(param_groups(model))
sched = lr_scheduler.LambdaLR(opt, lr_lambda=[lambda e: 0.9 ** e, lambda e: 1.0 / (1 + e)])
loss, acc, lrs, _ = train(model, opt, sched, 5, per_batch=False)
print(f"lambda_loss={loss:.6f}")
for k, group in enumerate(opt.param_groups):
    print(f"lambda_lr{k}={group['lr']:.6g}")

# 4. RMSprop + ReduceLROnPlateau on the epoch's full-batch loss.
model = build(3)
opt = torch.optim.RMSprop(param_groups(model), alpha=0.95, momentum=0.5)
sched = lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0, threshold=0.05, min_lr=[1e-4, 1e-4])
loss, acc, lrs, _ = train(model, opt, sched, 6, per_batch=False)
print(f"plateau_loss={loss:.6f}")
for k, group in enumerate(opt.param_groups):
    print(f"plateau_lr{k}={group['lr']:.6g}")
print(f"plateau_bad_epochs={sched.num_bad_epochs}")
print(f"final_loss={min(loss, math.inf):.6f}")
