"""An optimizer/scheduler benchmark harness (the kind of sweep script papers on optimizers ship): the same small
regression MLP trained with AdamW(amsgrad), RMSprop(centered, momentum), Adagrad(lr_decay, initial_accumulator),
Adadelta, NAdam(momentum_decay, decoupled_weight_decay), RAdam(decoupled), Adamax, SGD(nesterov, dampening=0),
ASGD and Rprop, each with two parameter groups (no decay on biases / norms), paired with OneCycleLR,
CosineAnnealingWarmRestarts(T_mult=2), CyclicLR(triangular2), PolynomialLR, MultiStepLR, ChainedScheduler and
SequentialLR(LinearLR -> ExponentialLR); mid-run every optimizer and scheduler is saved with state_dict(), rebuilt
fresh and loaded (torch.save / torch.load round trip through io.BytesIO), and training continues.

Weights come from torch.manual_seed, data from NumPy; nothing is random during training, so metrics must match.
"""
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import lr_scheduler as sch

rng = np.random.RandomState(0)
X = torch.tensor(rng.randn(128, 5), dtype=torch.float32)
y = torch.sin(X[:, :1] * 2) + 0.5 * X[:, 1:2] * X[:, 2:3]

OPTIMIZERS = {
    "adamw_ams": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, weight_decay=0.05),
    "rmsprop_c": lambda p: torch.optim.RMSprop(p, lr=3e-3, alpha=0.9, centered=True, momentum=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.05, lr_decay=1e-3, initial_accumulator_value=0.1),
    "adadelta": lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.9),
    "nadam": lambda p: torch.optim.NAdam(p, lr=5e-3, momentum_decay=4e-3, decoupled_weight_decay=True,
                                         weight_decay=0.01),
    "radam": lambda p: torch.optim.RAdam(p, lr=1e-2, decoupled_weight_decay=True, weight_decay=0.01),
    "adamax": lambda p: torch.optim.Adamax(p, lr=1e-2),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "asgd": lambda p: torch.optim.ASGD(p, lr=0.05, t0=10),
    "rprop": lambda p: torch.optim.Rprop(p, lr=1e-3, etas=(0.4, 1.3), step_sizes=(1e-6, 0.1)),
}
SCHEDULERS = {
    "adamw_ams": lambda o: sch.OneCycleLR(o, max_lr=[2e-2, 1e-2], total_steps=40, pct_start=0.25,
                                          anneal_strategy="cos", three_phase=True),
    "rmsprop_c": lambda o: sch.CosineAnnealingWarmRestarts(o, T_0=5, T_mult=2, eta_min=1e-4),
    "adagrad": lambda o: sch.PolynomialLR(o, total_iters=30, power=2.0),
    "adadelta": lambda o: sch.MultiStepLR(o, milestones=[10, 25], gamma=0.3),
    "nadam": lambda o: sch.ChainedScheduler([sch.ConstantLR(o, factor=0.5, total_iters=8),
                                             sch.ExponentialLR(o, gamma=0.97)]),
    "radam": lambda o: sch.SequentialLR(o, [sch.LinearLR(o, start_factor=0.1, total_iters=5),
                                            sch.ExponentialLR(o, gamma=0.95)], milestones=[5]),
    "adamax": lambda o: sch.StepLR(o, step_size=7, gamma=0.5),
    "sgd_nesterov": lambda o: sch.CyclicLR(o, base_lr=0.005, max_lr=0.05, step_size_up=6, mode="triangular2"),
    "asgd": lambda o: sch.LambdaLR(o, [lambda e: 1 / (1 + 0.1 * e), lambda e: 0.95 ** e]),
    "rprop": lambda o: sch.CosineAnnealingLR(o, T_max=40, eta_min=1e-5),
}


def build(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 32), nn.LayerNorm(32), nn.Tanh(), nn.Linear(32, 1))
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = OPTIMIZERS[name]([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
    return model, opt, SCHEDULERS[name](opt)


def train(model, opt, sched, steps):
    losses, lrs = [], []
    for _ in range(steps):
        loss = F.mse_loss(model(X), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        lrs.append(opt.param_groups[0]["lr"])
    return losses, lrs


for name in OPTIMIZERS:
    model, opt, sched = build(name)
    first, _ = train(model, opt, sched, 20)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True) if name != "asgd" else torch.load(buf, weights_only=False)
    model2, opt2, sched2 = build(name)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    sched2.load_state_dict(ckpt["sched"])
    second, lrs = train(model2, opt2, sched2, 20)
    print(f"{name}_first={first[0]:.6f}")
    print(f"{name}_mid={first[-1]:.6f}")
    print(f"{name}_final={second[-1]:.6f}")
    print(f"{name}_lr={lrs[-1]:.8f}")
    print(f"{name}_lr_mid={lrs[3]:.8f}")
