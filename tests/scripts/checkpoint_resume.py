"""Checkpointing: save model + optimizer + scheduler state mid-training, load into fresh objects, resume.

The resumed run must match an uninterrupted run exactly. Weights and data come from NumPy, so the printed metrics
are the same under every backend.
"""
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

rng = np.random.default_rng(7)
X = torch.from_numpy(rng.normal(size=(64, 6)).astype(np.float32))
true_w = torch.from_numpy(rng.normal(size=(6, 3)).astype(np.float32))
Y = torch.tanh(X @ true_w)
init = {k: rng.normal(scale=0.3, size=s).astype(np.float32)
        for k, s in [("0.weight", (16, 6)), ("0.bias", (16,)), ("2.weight", (3, 16)), ("2.bias", (3,))]}


def build():
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in init.items()})
    optimizer = optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    scheduler = optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, epochs):
    loss_fn = nn.MSELoss()
    for _ in range(epochs):
        for i in range(0, 64, 16):
            optimizer.zero_grad()
            loss = loss_fn(model(X[i:i + 16]), Y[i:i + 16])
            loss.backward()
            optimizer.step()
        scheduler.step()
    with torch.no_grad():
        return loss_fn(model(X), Y).item()


# Uninterrupted reference run.
ref_model, ref_opt, ref_sched = build()
with torch.no_grad():
    initial = nn.functional.mse_loss(ref_model(X), Y).item()
ref_loss = train(ref_model, ref_opt, ref_sched, 10)

# Interrupted run: 5 epochs, checkpoint, fresh objects, load, 5 more epochs.
model, optimizer, scheduler = build()
mid_loss = train(model, optimizer, scheduler, 5)
with tempfile.TemporaryDirectory() as tmp:
    PATH = os.path.join(tmp, "checkpoint.pt")
    torch.save({
        "epoch": 5,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "scheduler_state_dict": scheduler.state_dict(),
        "loss": mid_loss,
    }, PATH)
    del model, optimizer, scheduler
    model, optimizer, scheduler = build()
    checkpoint = torch.load(PATH, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model_state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
    epoch = checkpoint["epoch"]
    assert checkpoint["loss"] == mid_loss
    # Also the plain model-only pattern: save the state_dict, load into a new model with strict checking.
    torch.save(model.state_dict(), os.path.join(tmp, "model.pth"))
    clone = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    result = clone.load_state_dict(torch.load(os.path.join(tmp, "model.pth"), weights_only=True))
    assert not result.missing_keys and not result.unexpected_keys
    assert all(torch.equal(a, b) for a, b in zip(clone.parameters(), model.parameters()))

model.train()
resumed_loss = train(model, optimizer, scheduler, 10 - epoch)
max_diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref_model.parameters()))
assert max_diff < 1e-6, max_diff
assert optimizer.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
print(f"initial_loss={initial:.6f}")
print(f"mid_loss={mid_loss:.6f}")
print(f"final_loss={resumed_loss:.6f}")
print(f"reference_loss={ref_loss:.6f}")
print(f"max_param_diff={max_diff:.3g}")
