"""CLIP-style contrastive pretraining (after openai/CLIP's model.py and mlfoundations/open_clip's loss.py): an image
tower (small conv net with CLIP's AttentionPool2d on nn.MultiheadAttention) and a text tower (token embedding +
nn.TransformerEncoder, EOT-token pooling by argmax), L2-normalised embeddings, a learnable logit_scale initialised
to log(1/0.07) and clamped to ln(100) in place under torch.no_grad(), the symmetric cross-entropy over the
similarity matrix with label_smoothing, gradient clipping, and zero-shot classification with prompt-ensembled class
embeddings.

Weights come from torch.manual_seed (jitorch reproduces torch's CPU stream) and data from NumPy, and there is no
dropout, so every metric must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class AttentionPool2d(nn.Module):
    def __init__(self, spatial, dim, heads, out_dim):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(spatial * spatial + 1, dim) / dim ** 0.5)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.proj = nn.Linear(dim, out_dim)

    def forward(self, x):
        x = x.flatten(2).transpose(1, 2)  # B, HW, C
        x = torch.cat([x.mean(dim=1, keepdim=True), x], dim=1) + self.pos
        out, _ = self.attn(x[:, :1], x, x, need_weights=False)
        return self.proj(out.squeeze(1))


class ImageTower(nn.Module):
    def __init__(self, width=16, embed=12):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU())
        self.pool = AttentionPool2d(4, width, 4, embed)

    def forward(self, x):
        return self.pool(self.stem(x))


class TextTower(nn.Module):
    def __init__(self, vocab=20, ctx=6, width=16, embed=12):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.empty(ctx, width).normal_(std=0.01))
        layer = nn.TransformerEncoderLayer(width, 2, 32, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, embed).normal_(std=width ** -0.5))
        self.register_buffer("causal", torch.full((ctx, ctx), float("-inf")).triu_(1), persistent=False)

    def forward(self, text):
        x = self.tok(text) + self.pos
        x = self.ln(self.enc(x, mask=self.causal))
        eot = x[torch.arange(x.shape[0]), text.argmax(dim=-1)]  # the EOT token has the largest id
        return eot @ self.text_projection


class CLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = ImageTower()
        self.text = TextTower()
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def forward(self, image, text):
        img = F.normalize(self.visual(image), dim=-1)
        txt = F.normalize(self.text(text), dim=-1)
        return img, txt, self.logit_scale.exp()


def clip_loss(img, txt, scale, smoothing=0.1):
    logits_per_image = scale * img @ txt.t()
    labels = torch.arange(img.shape[0], dtype=torch.long)
    return (F.cross_entropy(logits_per_image, labels, label_smoothing=smoothing)
            + F.cross_entropy(logits_per_image.t(), labels, label_smoothing=smoothing)) / 2


rng = np.random.RandomState(0)
n_cls, per = 4, 6
colors = rng.rand(n_cls, 3).astype(np.float32)
images = np.clip(colors.repeat(per, 0)[:, :, None, None] + 0.2 * rng.randn(n_cls * per, 3, 8, 8), 0, 1)
labels = np.repeat(np.arange(n_cls), per)
texts = np.stack([[1, 2 + c, 3 + rng.randint(0, 3), 10 + c, 0, 19] for c in labels]).astype(np.int64)
images, texts = torch.tensor(images, dtype=torch.float32), torch.from_numpy(texts)

torch.manual_seed(0)
model = CLIP()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
losses = []
for step in range(25):
    perm = torch.from_numpy(np.random.RandomState(step).permutation(len(labels))[:12])
    img, txt, scale = model(images[perm], texts[perm])
    loss = clip_loss(img, txt, scale)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(100))
    losses.append(loss.item())

model.eval()
with torch.no_grad():
    prompts = torch.tensor([[[1, 2 + c, 3 + k, 10 + c, 0, 19] for k in range(3)] for c in range(n_cls)])
    cls_emb = F.normalize(model.text(prompts.view(-1, 6)), dim=-1).view(n_cls, 3, -1).mean(1)
    cls_emb = cls_emb / cls_emb.norm(dim=-1, keepdim=True)
    img_emb = F.normalize(model.visual(images), dim=-1)
    probs = (100.0 * img_emb @ cls_emb.T).softmax(dim=-1)
    acc = (probs.argmax(-1) == torch.from_numpy(labels)).float().mean().item()
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"grad_norm={gnorm.item():.6f}")
print(f"logit_scale={model.logit_scale.item():.6f}")
print(f"zero_shot_acc={acc:.6f}")
print(f"mean_top_prob={probs.max(-1).values.mean().item():.6f}")
