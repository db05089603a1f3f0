"""DINO self-distillation with multi-crop (after facebookresearch/dino's main_dino.py / vision_transformer.py):
global and local crops cut from NumPy-chosen boxes and resized with F.interpolate(mode="bilinear", antialias=True)
(and bicubic antialias for the global crops), a tiny ViT backbone with a CLS token and interpolated position
embeddings (bicubic, align_corners=False, scale_factor path) for the smaller local crops, the DINO head with a
weight-normalised last layer (nn.utils.parametrizations.weight_norm with weight_g frozen to 1), teacher centering
with an EMA center buffer, sharpened teacher softmax and the cross-entropy over all (teacher global, student any)
pairs, a cosine teacher-momentum schedule, freezing the last layer for the first steps by zeroing its gradients,
and clip_gradients per parameter as the reference code does.

Crops from NumPy, weights from torch.manual_seed, dropout 0: every metric must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyViT(nn.Module):
    def __init__(self, img=16, patch=4, dim=24, depth=2, heads=3):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def interpolate_pos_encoding(self, n_patches_side):
        n = self.pos.shape[1] - 1
        side = int(math.sqrt(n))
        if n_patches_side == side:
            return self.pos
        patch_pos = self.pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        patch_pos = F.interpolate(patch_pos, scale_factor=(n_patches_side + 0.1) / side, mode="bicubic",
                                  align_corners=False, recompute_scale_factor=False)
        return torch.cat([self.pos[:, :1], patch_pos.permute(0, 2, 3, 1).flatten(1, 2)], 1)

    def forward(self, x):
        tok = self.proj(x).flatten(2).transpose(1, 2)
        tok = torch.cat([self.cls.expand(x.shape[0], -1, -1), tok], 1)
        tok = tok + self.interpolate_pos_encoding(x.shape[-1] // self.patch)
        return self.norm(self.blocks(tok))[:, 0]


class DINOHead(nn.Module):
    def __init__(self, dim=24, out=32, hidden=48, bottleneck=16):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, bottleneck))
        self.last_layer = nn.utils.parametrizations.weight_norm(nn.Linear(bottleneck, out, bias=False))
        self.last_layer.parametrizations.weight.original0.data.fill_(1)
        self.last_layer.parametrizations.weight.original0.requires_grad = False

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class DINOLoss(nn.Module):
    def __init__(self, out=32, student_temp=0.1, teacher_temp=0.04, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp, self.center_momentum = student_temp, teacher_temp, center_momentum
        self.register_buffer("center", torch.zeros(1, out))

    def forward(self, student_out, teacher_out, n_global):
        student = (student_out / self.student_temp).chunk(len(student_out) // (len(teacher_out) // n_global))
        teacher = F.softmax((teacher_out - self.center) / self.teacher_temp, dim=-1).detach().chunk(n_global)
        total, n_terms = 0, 0
        for iq, q in enumerate(teacher):
            for v, s in enumerate(student):
                if v == iq:
                    continue
                total = total + torch.sum(-q * F.log_softmax(s, dim=-1), dim=-1).mean()
                n_terms += 1
        self.update_center(teacher_out)
        return total / n_terms

    @torch.no_grad()
    def update_center(self, teacher_out):
        batch_center = teacher_out.sum(dim=0, keepdim=True) / len(teacher_out)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def crops(images, rng, size, n, scale):
    out = []
    for _ in range(n):
        batch = []
        for img in images:
            s = int(rng.uniform(*scale) * img.shape[-1])
            y0, x0 = rng.randint(0, img.shape[-1] - s + 1, 2)
            c = img[:, y0:y0 + s, x0:x0 + s][None]
            mode = "bicubic" if size == 16 else "bilinear"
            batch.append(F.interpolate(c, size=(size, size), mode=mode, antialias=True, align_corners=False))
        out.append(torch.cat(batch))
    return out


rng = np.random.RandomState(0)
images = torch.tensor(rng.rand(8, 3, 24, 24), dtype=torch.float32)
images[:4, 0] += 1.0
torch.manual_seed(0)
student = nn.Sequential(TinyViT(), DINOHead())
teacher = nn.Sequential(TinyViT(), DINOHead())
teacher.load_state_dict(student.state_dict())
for p in teacher.parameters():
    p.requires_grad = False
loss_fn = DINOLoss()
opt = torch.optim.AdamW(student.parameters(), lr=1e-3, weight_decay=0.04)
steps, losses = 10, []
for it in range(steps):
    g = crops(images, rng, 16, 2, (0.6, 1.0))
    l = crops(images, rng, 8, 3, (0.2, 0.5))
    with torch.no_grad():
        t_out = teacher(torch.cat(g))
    s_out = torch.cat([student(torch.cat(g)), student(torch.cat(l))])
    loss = loss_fn(s_out, t_out, 2)
    opt.zero_grad()
    loss.backward()
    for p in student.parameters():
        if p.grad is not None:
            clip = 3.0 / (p.grad.data.norm(2) + 1e-6)
            if clip < 1:
                p.grad.data.mul_(clip)
    if it < 3:
        for n, p in student.named_parameters():
            if "last_layer" in n:
                p.grad = None
    opt.step()
    m = 1 - (1 - 0.99) * (math.cos(math.pi * it / steps) + 1) / 2
    with torch.no_grad():
        for ps, pt in zip(student.parameters(), teacher.parameters()):
            pt.data.mul_(m).add_((1 - m) * ps.detach().data)
    losses.append(loss.item())
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"center_norm={loss_fn.center.norm().item():.6f}")
print(f"teacher_entropy={(-(F.softmax(t_out / 0.04, -1) * F.log_softmax(t_out / 0.04, -1)).sum(-1)).mean().item():.6f}")
print(f"local_crop_mean={l[0].mean().item():.6f}")
print(f"global_crop_mean={g[0].mean().item():.6f}")
print(f"weight_g={student[1].last_layer.parametrizations.weight.original0.mean().item():.6f}")
