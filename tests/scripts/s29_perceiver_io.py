"""A Perceiver / Perceiver IO model (after lucidrains/perceiver-pytorch and deepmind's Perceiver IO), in the
"modern training script" style: the usual preamble flags (torch.backends.cudnn.benchmark,
torch.set_float32_matmul_precision("high"), torch.backends.cuda.matmul.allow_tf32, use_deterministic_algorithms),
Fourier-feature position encodings from torch.linspace / meshgrid, a latent array cross-attending to the inputs
with einsum-written attention ("b i d, b j d -> b i j") and a boolean key mask via masked_fill with
-torch.finfo(dtype).max, GEGLU feed-forwards, latent self-attention blocks with weight sharing across depth,
an output-query cross-attention decoder (Perceiver IO), and a check that padded positions do not matter. (No
torch.compile here: torch's inductor takes minutes to compile this on CPU.)

Data from NumPy; weights, input noise (randn_like of a transposed view) and dropout masks (of a permuted view)
from torch.manual_seed's stream, which jitorch reproduces in memory order as torch: every metric must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("high")
torch.use_deterministic_algorithms(True)


def fourier_encode(pos, max_freq=8.0, num_bands=4):
    freqs = torch.linspace(1.0, max_freq / 2, num_bands, dtype=pos.dtype)
    x = pos.unsqueeze(-1) * freqs * math.pi
    return torch.cat([x.sin(), x.cos(), pos.unsqueeze(-1)], dim=-1).flatten(-2)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class Attention(nn.Module):
    def __init__(self, q_dim, ctx_dim=None, heads=2, dim_head=8):
        super().__init__()
        inner, ctx_dim = heads * dim_head, ctx_dim or q_dim
        self.scale, self.heads = dim_head ** -0.5, heads
        self.to_q = nn.Linear(q_dim, inner, bias=False)
        self.to_kv = nn.Linear(ctx_dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, q_dim)
        self.norm, self.norm_ctx = nn.LayerNorm(q_dim), nn.LayerNorm(ctx_dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, context=None, mask=None):
        h = self.heads
        xn = self.norm(x)
        context = xn if context is None else self.norm_ctx(context)
        q, (k, v) = self.to_q(xn), self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3).reshape(-1, t.shape[1], t.shape[2] // h)
                   for t in (q, k, v))
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * self.scale
        if mask is not None:
            mask = mask.repeat_interleave(h, dim=0)[:, None, :]
            sim = sim.masked_fill(~mask, -torch.finfo(sim.dtype).max)
        out = torch.einsum("b i j, b j d -> b i d", sim.softmax(dim=-1), v)
        # dropout on the heads' outputs while they are still a permuted (non-contiguous) view
        out = self.drop(out.reshape(-1, h, out.shape[1], out.shape[2]).permute(0, 2, 1, 3)).flatten(2)
        return x + self.to_out(out)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=2):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult * 2), GEGLU(), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return x + self.net(x)


class PerceiverIO(nn.Module):
    def __init__(self, in_dim, latents=8, dim=16, depth=2, out_queries=4, out_dim=3):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, dim))
        self.cross = Attention(dim, in_dim)
        self.cross_ff = FeedForward(dim)
        self.self_attn, self.self_ff = Attention(dim), FeedForward(dim)  # shared across depth
        self.depth = depth
        self.queries = nn.Parameter(torch.randn(out_queries, dim))
        self.decoder = Attention(dim, dim)
        self.to_logits = nn.Linear(dim, out_dim)

    def forward(self, data, mask):
        b = data.shape[0]
        x = self.latents.expand(b, -1, -1)
        x = self.cross_ff(self.cross(x, data, mask))
        for _ in range(self.depth):
            x = self.self_ff(self.self_attn(x))
        out = self.decoder(self.queries.expand(b, -1, -1), x)
        return self.to_logits(out)


rng = np.random.RandomState(0)
n, length = 32, 12
pos = torch.linspace(-1, 1, length)
pe = fourier_encode(pos[:, None])  # one spatial axis
signal = rng.randn(n, length, 1).astype(np.float32)
lens = rng.randint(6, length + 1, n)
mask = torch.from_numpy(np.arange(length)[None, :] < lens[:, None])
data = torch.cat([torch.from_numpy(signal), pe.expand(n, -1, -1)], -1)
targets = torch.from_numpy(np.stack([(signal[i, :lens[i], 0] > 0).sum() % 3 for i in range(n)])).long()
targets4 = torch.stack([targets, (targets + 1) % 3, targets, (targets + 2) % 3], 1)

torch.manual_seed(0)
model = PerceiverIO(in_dim=data.shape[-1])
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
losses = []
for step in range(15):
    idx = torch.arange(step * 8, step * 8 + 8) % n
    x = data[idx].transpose(1, 2)  # channels-first view, as the signal augmentations of such pipelines take it
    x = (x + 0.05 * torch.randn_like(x)).transpose(1, 2)
    logits = model(x, mask[idx])
    loss = F.cross_entropy(logits.reshape(-1, 3), targets4[idx].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    eager = model(data, mask)
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={(eager.argmax(-1) == targets4).float().mean().item():.6f}")
print(f"mask_invariance={float(torch.allclose(model(data * mask[..., None], mask), eager, atol=1e-5))}")
print(f"matmul_precision_ok={float(torch.get_float32_matmul_precision() == 'high')}")
print(f"deterministic={float(torch.are_deterministic_algorithms_enabled())}")
