"""Mixed precision on CPU: a deep residual MLP under torch.autocast("cpu", dtype=torch.bfloat16) with activation
checkpointing (torch.utils.checkpoint, checkpoint_sequential), a torch.amp.GradScaler loop with gradient
unscaling and clipping, then a full checkpoint (model, optimizer, scheduler, scaler, RNG state) and an exact resume
of a run that uses dropout.

Weights and data come from NumPy; dropout draws from the backend's RNG, so only the runs' relations (exact resume,
matching dtypes) and the dropout-free metrics are compared across backends.
"""
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

rng = np.random.default_rng(9)
X = torch.from_numpy(rng.normal(size=(64, 16)).astype(np.float32))
Y = torch.from_numpy(rng.integers(0, 4, size=64))


class Block(nn.Module):
    def __init__(self, dim, p):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class DeepMLP(nn.Module):
    def __init__(self, depth=6, dim=16, p=0.0, use_checkpoint=True):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, p) for _ in range(depth))
        self.head = nn.Linear(dim, 4)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        for block in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x)


def build(p=0.0, use_checkpoint=True):
    model = DeepMLP(p=p, use_checkpoint=use_checkpoint)
    g = np.random.default_rng(0)
    with torch.no_grad():
        for name, w in model.named_parameters():
            if w.dim() > 1:
                w.copy_(torch.from_numpy(g.normal(scale=0.25, size=tuple(w.shape)).astype(np.float32)))
            elif name.endswith("bias"):
                w.zero_()
    return model


def make_training(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    return optimizer, scheduler, scaler


def train_epoch(model, optimizer, scheduler, scaler):
    model.train()
    total = 0.0
    for i in range(0, 64, 16):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(X[i:i + 16])
            assert logits.dtype == torch.bfloat16
            loss = F.cross_entropy(logits, Y[i:i + 16])
            assert loss.dtype == torch.float32  # cross_entropy autocasts to float32
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        total += loss.item()
    scheduler.step()
    return total / 4


def full_loss(model):
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(X), Y).item()


# 1. Checkpointed vs plain fp32 gradients agree.
plain, ckpt = build(use_checkpoint=False), build(use_checkpoint=True)
ckpt.train()
F.cross_entropy(plain(X), Y).backward()
F.cross_entropy(ckpt(X), Y).backward()
grad_diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(plain.parameters(), ckpt.parameters()))
print(f"ckpt_grad_match={float(grad_diff < 1e-6):.1f}")
print(f"grad_norm_fp32={torch.cat([p.grad.flatten() for p in plain.parameters()]).norm().item():.5f}")
seq = nn.Sequential(*build().blocks)
x_in = X.clone().requires_grad_(True)
out = checkpoint_sequential(seq, 3, x_in, use_reentrant=False)
out.square().mean().backward()
print(f"ckpt_sequential_grad={x_in.grad.abs().sum().item():.5f}")

# 2. bf16 autocast training with a GradScaler, no dropout: deterministic.
model = build()
initial = full_loss(model)
optimizer, scheduler, scaler = make_training(model)
for _ in range(6):
    train_loss = train_epoch(model, optimizer, scheduler, scaler)
final = full_loss(model)
print(f"initial_loss={initial:.5f}")
print(f"final_loss={final:.5f}")
print(f"amp_scale={scaler.get_scale():.1f}")
print(f"amp_lr={optimizer.param_groups[0]['lr']:.6f}")
with torch.autocast("cpu", dtype=torch.bfloat16):
    h = model.blocks[0].fc1(X)
    print(f"autocast_linear_bf16={int(h.dtype == torch.bfloat16)}")
    # CPU autocast has no float32 list for these: they run in their input's dtype.
    print(f"autocast_ln_keeps_bf16={int(model.blocks[0].norm(X.bfloat16()).dtype == torch.bfloat16)}")
    print(f"autocast_softmax_keeps_bf16={int(torch.softmax(h, -1).dtype == torch.bfloat16)}")
    with torch.autocast("cpu", enabled=False):
        print(f"autocast_disabled_fp32={int(model.head(X).dtype == torch.float32)}")

# 3. Dropout run: checkpoint everything mid-training, restore into fresh objects, and replay exactly.
torch.manual_seed(123)
ref = build(p=0.1)
ref_opt, ref_sched, ref_scaler = make_training(ref)
for _ in range(4):
    train_epoch(ref, ref_opt, ref_sched, ref_scaler)

torch.manual_seed(123)
model = build(p=0.1)
optimizer, scheduler, scaler = make_training(model)
for _ in range(2):
    train_epoch(model, optimizer, scheduler, scaler)
buf = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(), "rng": torch.get_rng_state(), "epoch": 2}, buf)
torch.manual_seed(999)  # clobber the RNG; the checkpoint must restore it
buf.seek(0)
state = torch.load(buf, weights_only=False)
model = build(p=0.1)
optimizer, scheduler, scaler = make_training(model)
model.load_state_dict(state["model"])
optimizer.load_state_dict(state["optimizer"])
scheduler.load_state_dict(state["scheduler"])
scaler.load_state_dict(state["scaler"])
torch.set_rng_state(state["rng"])
for _ in range(state["epoch"], 4):
    train_epoch(model, optimizer, scheduler, scaler)
diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
print(f"resume_exact={float(diff == 0.0):.1f}")
print(f"resume_scale_match={float(scaler.get_scale() == ref_scaler.get_scale()):.1f}")
print(f"resume_lr={optimizer.param_groups[0]['lr']:.6f}")
print(f"rng_state_dtype_uint8={int(state['rng'].dtype == torch.uint8)}")
