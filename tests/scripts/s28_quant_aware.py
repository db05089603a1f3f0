"""Quantization-aware training as research code writes it without torch.ao: LSQ (Esser et al. 2020) learned step
sizes with the grad_scale / round_pass straight-through tricks (y.detach() - y_grad.detach() + y_grad), symmetric
per-channel weight fake-quantization via torch.fake_quantize_per_channel_affine, per-tensor activation
fake-quantization with torch.fake_quantize_per_tensor_affine and EMA-tracked min/max observers in buffers,
a PACT clipped ReLU with a learnable alpha, BatchNorm folding into conv weights for export, and int8 export via
torch.quantize_per_tensor-free integer arithmetic (round, clamp, to(torch.int8)).

Weights and data come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def grad_scale(x, scale):
    y_grad = x * scale
    return (x - y_grad).detach() + y_grad


def round_pass(x):
    return (x.round() - x).detach() + x


class LSQQuantizer(nn.Module):
    def __init__(self, bits, signed=True):
        super().__init__()
        self.Qn, self.Qp = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
        self.s = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("initialized", torch.tensor(False))

    def forward(self, x):
        if not bool(self.initialized):
            with torch.no_grad():
                self.s.copy_(2 * x.abs().mean() / (self.Qp ** 0.5))
                self.initialized.fill_(True)
        g = 1.0 / ((x.numel() * self.Qp) ** 0.5)
        s = grad_scale(self.s, g)
        return round_pass((x / s).clamp(self.Qn, self.Qp)) * s


class EMAObserverFakeQuant(nn.Module):
    def __init__(self, momentum=0.1, quant_max=255):
        super().__init__()
        self.momentum, self.quant_max = momentum, quant_max
        self.register_buffer("min_val", torch.tensor(float("inf")))
        self.register_buffer("max_val", torch.tensor(float("-inf")))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                mn, mx = x.min(), x.max()
                if torch.isinf(self.min_val):
                    self.min_val.copy_(mn)
                    self.max_val.copy_(mx)
                else:
                    self.min_val.lerp_(mn, self.momentum)
                    self.max_val.lerp_(mx, self.momentum)
        mn, mx = torch.clamp(self.min_val, max=0.0), torch.clamp(self.max_val, min=0.0)
        scale = float((mx - mn).clamp_min(1e-8) / self.quant_max)
        zero_point = int(torch.clamp(torch.round(-mn / scale), 0, self.quant_max))
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, 0, self.quant_max)


class PACT(nn.Module):
    def __init__(self, alpha=4.0):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(alpha))

    def forward(self, x):
        return 0.5 * (x.abs() - (x - self.alpha).abs() + self.alpha)


class QConvBN(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        w = self.conv.weight
        scale = w.detach().abs().amax(dim=(1, 2, 3)).clamp_min(1e-8) / 127
        wq = torch.fake_quantize_per_channel_affine(w, scale, torch.zeros(w.size(0), dtype=torch.int32), 0, -128, 127)
        return self.bn(F.conv2d(x, wq, padding=1))

    def folded(self):
        std = (self.bn.running_var + self.bn.eps).sqrt()
        w = self.conv.weight * (self.bn.weight / std).view(-1, 1, 1, 1)
        b = self.bn.bias - self.bn.running_mean * self.bn.weight / std
        return w, b


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.block1, self.block2 = QConvBN(1, 8), QConvBN(8, 8)
        self.act1, self.act2 = PACT(), PACT()
        self.fq1 = EMAObserverFakeQuant()
        self.fc_q = LSQQuantizer(4)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.fq1(self.act1(self.block1(x)))
        x = F.max_pool2d(x, 2)
        x = self.act2(self.block2(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.linear(x, self.fc_q(self.fc.weight), self.fc.bias)


rng = np.random.RandomState(0)
labels = torch.from_numpy(rng.randint(0, 4, 32))
imgs = np.zeros((32, 1, 8, 8), dtype=np.float32)
for k, c in enumerate(labels.tolist()):
    imgs[k, 0, 2 * c:2 * c + 2, :] = 1.0
imgs += 0.2 * rng.randn(32, 1, 8, 8).astype(np.float32)
x = torch.from_numpy(imgs)
model = QNet()
with torch.no_grad():
    for n, p in model.named_parameters():
        if p.dim() > 1 or n == "fc.bias":
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.4).astype(np.float32)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
losses = []
for step in range(30):
    model.train()
    loss = F.cross_entropy(model(x), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    acc = (model(x).argmax(1) == labels).float().mean().item()
    w, b = model.block1.folded()
    folded_out = F.conv2d(x, w, b, padding=1)
    ref = model.block1.bn(model.block1.conv(x))
    fold_err = (folded_out - ref).abs().max().item()
    s = w.abs().max() / 127
    w_int8 = torch.clamp(torch.round(w / s), -128, 127).to(torch.int8)
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"lsq_step={model.fc_q.s.item():.6f}")
print(f"pact_alpha={model.act1.alpha.item():.6f}")
print(f"ema_min={model.fq1.min_val.item():.6f}")
print(f"ema_max={model.fq1.max_val.item():.6f}")
print(f"fold_ok={int(fold_err < 1e-4)}")
print(f"int8_sum={int(w_int8.sum().item())}")
print(f"int8_dtype_ok={int(w_int8.dtype == torch.int8)}")
