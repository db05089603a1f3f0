"""LoRA fine-tuning (after microsoft/LoRA's loralib and HF peft): a small pretrained MLP classifier is frozen with
requires_grad_(False), LoRA A/B adapters are injected into its Linear layers by module surgery, only the
adapter parameters train, the adapter state_dict is filtered by name ("lora_"), then merged into the base weights
and the merged model must reproduce the adapted outputs.

Weights and data come from NumPy; full-batch training is deterministic, so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    """y = x W^T + b + (alpha / r) * x A^T B^T, with W and b frozen."""

    def __init__(self, base: nn.Linear, r=4, lora_alpha=8, lora_dropout=0.0):
        super().__init__()
        self.base = base
        self.r, self.scaling = r, lora_alpha / r
        self.lora_A = nn.Parameter(base.weight.new_zeros((r, base.in_features)))
        self.lora_B = nn.Parameter(base.weight.new_zeros((base.out_features, r)))
        self.lora_dropout = nn.Dropout(lora_dropout) if lora_dropout > 0 else nn.Identity()
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # overwritten below by numpy for determinism
        nn.init.zeros_(self.lora_B)
        self.merged = False

    def forward(self, x):
        result = F.linear(x, self.base.weight, self.base.bias)
        if self.r > 0 and not self.merged:
            result = result + (self.lora_dropout(x) @ self.lora_A.transpose(0, 1)
                               @ self.lora_B.transpose(0, 1)) * self.scaling
        return result

    @torch.no_grad()
    def merge(self):
        if not self.merged:
            self.base.weight.data += (self.lora_B @ self.lora_A) * self.scaling
            self.merged = True


def inject_lora(model: nn.Module, target_names=("fc1", "fc2"), r=4, alpha=8):
    for name, module in list(model.named_children()):
        if isinstance(module, nn.Linear) and name in target_names:
            setattr(model, name, LoRALinear(module, r=r, lora_alpha=alpha))
        else:
            inject_lora(module, target_names, r, alpha)


def mark_only_lora_as_trainable(model: nn.Module, bias="none"):
    for n, p in model.named_parameters():
        if "lora_" not in n:
            p.requires_grad = False
    if bias == "lora_only":
        for m in model.modules():
            if isinstance(m, LoRALinear) and m.base.bias is not None:
                m.base.bias.requires_grad = True


def lora_state_dict(model: nn.Module):
    return {k: v for k, v in model.state_dict().items() if "lora_" in k}


class MLP(nn.Module):
    def __init__(self, d_in=10, d_h=32, n_cls=3):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_h)
        self.norm = nn.LayerNorm(d_h)
        self.fc2 = nn.Linear(d_h, d_h)
        self.head = nn.Linear(d_h, n_cls)

    def forward(self, x):
        x = F.gelu(self.norm(self.fc1(x)))
        x = x + F.relu(self.fc2(x))
        return self.head(x)


rng = np.random.RandomState(0)
model = MLP()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.3).astype(np.float32)))
X = torch.from_numpy(rng.randn(128, 10).astype(np.float32))
y = torch.from_numpy(((X[:, 0] * X[:, 1]).numpy() > 0).astype(np.int64) + (X[:, 2].numpy() > 1).astype(np.int64))

model.requires_grad_(False)
inject_lora(model, r=4, alpha=8)
mark_only_lora_as_trainable(model, bias="lora_only")
with torch.no_grad():
    for n, p in model.named_parameters():
        if n.endswith("lora_A"):
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.1).astype(np.float32)))
trainable = [n for n, p in model.named_parameters() if p.requires_grad]
n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
n_total = sum(p.numel() for p in model.parameters())
print("trainable:", trainable)
print(f"n_trainable={n_trainable}")
print(f"n_total={n_total}")
frozen_before = model.head.weight.clone()

opt = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-2, weight_decay=0.01)
losses = []
for step in range(60):
    opt.zero_grad()
    loss = F.cross_entropy(model(X), y, label_smoothing=0.05)
    loss.backward()
    assert model.head.weight.grad is None and model.fc1.base.weight.grad is None
    opt.step()
    losses.append(loss.item())
assert torch.equal(model.head.weight, frozen_before)

sd = lora_state_dict(model)
print("lora keys:", sorted(sd))
print(f"lora_sd_norm={sum(v.float().pow(2).sum() for v in sd.values()).sqrt().item():.6f}")
model.eval()
with torch.no_grad():
    adapted = model(X)
    for m in model.modules():
        if isinstance(m, LoRALinear):
            m.merge()
    merged = model(X)
print(f"merge_max_diff_small={int((adapted - merged).abs().max().item() < 1e-4)}")

# a fresh base + adapter weights loaded from the filtered dict reproduces the adapter
fresh = MLP()
fresh.load_state_dict({k.replace("base.", ""): v for k, v in model.state_dict().items() if "lora_" not in k})
with torch.no_grad():
    acc = (fresh(X).argmax(-1) == y).float().mean().item()
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_30={losses[30]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"merged_logit_sum={merged.sum().item():.5f}")
