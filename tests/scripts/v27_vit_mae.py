"""A small Vision Transformer: patches by Tensor.unfold, a class token and learned position embeddings,
nn.TransformerEncoder (batch_first, norm_first, GELU) for classification with mixup and CutMix (Beta draws from
NumPy), and an MAE-style masked autoencoder step (random masking by argsort of noise, gather of kept patches,
F.scaled_dot_product_attention in the decoder), trained with an optimizer stepped inside backward through
register_post_accumulate_grad_hook.

Weights, data and masks come from NumPy, so every printed metric is the same under every backend.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(12)
N, C, H, P = 48, 3, 16, 4
labels_np = rng.integers(0, 3, N)
imgs = rng.normal(scale=0.3, size=(N, C, H, H)).astype(np.float32)
for i, c in enumerate(labels_np):
    imgs[i, c] += np.outer(np.hanning(H), np.hanning(H)).astype(np.float32)
images, labels = torch.from_numpy(imgs), torch.from_numpy(labels_np)


def numpy_init(module, seed, scale=0.05):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
                continue
            if "norm" in name:
                continue
            p.copy_(torch.from_numpy(g.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))
    return module


def patchify(x, p=P):
    b, c, _, _ = x.shape
    patches = x.unfold(2, p, p).unfold(3, p, p)  # b, c, h/p, w/p, p, p
    return patches.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)


class ViT(nn.Module):
    def __init__(self, dim=32, depth=2, heads=4, n_classes=3):
        super().__init__()
        n_patches = (H // P) ** 2
        self.embed = nn.Linear(C * P * P, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, n_patches + 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def tokens(self, x):
        t = self.embed(patchify(x))
        return torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + self.pos

    def forward(self, x):
        return self.head(self.norm(self.encoder(self.tokens(x)))[:, 0])


def mixup_cutmix(x, y, step, alpha=0.4):
    g = np.random.default_rng(100 + step)
    lam = float(g.beta(alpha, alpha))
    perm = torch.from_numpy(g.permutation(x.shape[0]))
    y_onehot = F.one_hot(y, 3).float()
    if step % 2 == 0:
        mixed = lam * x + (1 - lam) * x[perm]
    else:
        cut = int(H * np.sqrt(1 - lam))
        cy, cx = g.integers(0, H - cut + 1, 2)
        mixed = x.clone()
        mixed[:, :, cy:cy + cut, cx:cx + cut] = x[perm][:, :, cy:cy + cut, cx:cx + cut]
        lam = 1 - cut * cut / (H * H)
    return mixed, lam * y_onehot + (1 - lam) * y_onehot[perm]


vit = numpy_init(ViT(), 0)
optimizer = torch.optim.AdamW(vit.parameters(), lr=2e-3, weight_decay=0.05)
with torch.no_grad():
    vit.eval()
    initial = F.cross_entropy(vit(images), labels).item()
vit.train()
for step in range(12):
    i = (step * 16) % N
    x, y = mixup_cutmix(images[i:i + 16], labels[i:i + 16], step)
    loss = torch.sum(-y * F.log_softmax(vit(x), dim=-1), dim=-1).mean()  # soft-target cross-entropy
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(vit.parameters(), 1.0)
    optimizer.step()
vit.eval()
with torch.no_grad():
    logits = vit(images)
    final = F.cross_entropy(logits, labels).item()
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"vit_accuracy={(logits.argmax(-1) == labels).float().mean().item():.6f}")
soft_ce = F.cross_entropy(logits, F.one_hot(labels, 3).float())  # probability targets
print(f"soft_ce_matches={float(torch.allclose(soft_ce, torch.tensor(final))):.1f}")


class MAEDecoder(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, C * P * P)

    def forward(self, latent, ids_restore):
        b, n_keep, d = latent.shape
        n = ids_restore.shape[1]
        full = torch.cat([latent, self.mask_token.repeat(b, n - n_keep, 1)], dim=1)
        full = torch.gather(full, 1, ids_restore.unsqueeze(-1).repeat(1, 1, d))
        q, k, v = self.qkv(full).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = F.scaled_dot_product_attention(q, k, v)
        full = full + self.proj(att.transpose(1, 2).reshape(b, n, d))
        return self.out(full)


def random_masking(tokens, ratio, g):
    b, n, d = tokens.shape
    keep = int(n * (1 - ratio))
    noise = torch.from_numpy(g.random((b, n)).astype(np.float32))
    ids_shuffle = torch.argsort(noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    ids_keep = ids_shuffle[:, :keep]
    kept = torch.gather(tokens, 1, ids_keep.unsqueeze(-1).repeat(1, 1, d))
    mask = torch.ones(b, n)
    mask[:, :keep] = 0
    return kept, torch.gather(mask, 1, ids_restore), ids_restore


encoder = numpy_init(ViT(), 1)
decoder = numpy_init(MAEDecoder(), 2)
params = list(encoder.parameters()) + list(decoder.parameters())
# Optimizer-in-backward: one optimizer per parameter, stepped as soon as its gradient is accumulated.
per_param = {p: torch.optim.Adam([p], lr=3e-3) for p in params}


def step_hook(p):
    per_param[p].step()
    per_param[p].zero_grad()


handles = [p.register_post_accumulate_grad_hook(step_hook) for p in params]
g = np.random.default_rng(7)
mae_losses = []
for step in range(10):
    x = images[(step * 16) % N:(step * 16) % N + 16]
    tokens = encoder.embed(patchify(x)) + encoder.pos[:, 1:]
    kept, mask, ids_restore = random_masking(tokens, 0.75, g)
    latent = encoder.encoder(torch.cat([encoder.cls.expand(x.shape[0], -1, -1) + encoder.pos[:, :1], kept], 1))
    pred = decoder(latent[:, 1:], ids_restore)
    target = patchify(x)
    target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5
    loss = (((pred - target) ** 2).mean(-1) * mask).sum() / mask.sum()
    loss.backward()  # the hooks step every parameter
    mae_losses.append(loss.item())
for h in handles:
    h.remove()
print(f"mae_first_loss={mae_losses[0]:.6f}")
print(f"mae_last_loss={mae_losses[-1]:.6f}")
print(f"mae_grads_cleared={float(all(p.grad is None for p in params)):.1f}")
