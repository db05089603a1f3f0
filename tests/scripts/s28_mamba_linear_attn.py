"""Recurrent sequence mixers written the way research code writes them: a selective state-space (Mamba) block
after johnma2006/mamba-minimal (depthwise causal Conv1d, softplus delta, A = -exp(A_log), discretisation with
einsum and a sequential scan loop, torch.stack of the states), the same scan in parallel form through a cumsum of
log decays (segsum, as in Mamba-2's ssd_minimal), and causal linear attention (Katharopoulos et al.) both as a
cumsum of outer products and as an explicit loop with a running state. The two forms of each must agree, and a
tiny model trains with AdamW.

Data and weights come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MambaBlock(nn.Module):
    def __init__(self, d_model, d_state=4, expand=2, d_conv=4, parallel=False):
        super().__init__()
        d_inner = expand * d_model
        self.dt_rank = max(1, d_model // 4)
        self.in_proj = nn.Linear(d_model, d_inner * 2, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, kernel_size=d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + d_state * 2, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner, bias=True)
        A = torch.arange(1, d_state + 1).repeat(d_inner, 1).float()
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)
        self.d_state, self.parallel = d_state, parallel

    def forward(self, x):
        b, l, _ = x.shape
        x, res = self.in_proj(x).chunk(2, dim=-1)
        x = self.conv1d(x.transpose(1, 2))[:, :, :l].transpose(1, 2)
        x = F.silu(x)
        y = self.ssm(x)
        return self.out_proj(y * F.silu(res))

    def ssm(self, x):
        A = -torch.exp(self.A_log.float())
        delta, B, C = self.x_proj(x).split(split_size=[self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(delta))
        scan = parallel_scan if self.parallel else selective_scan
        return scan(x, delta, A, B, C, self.D)


def selective_scan(u, delta, A, B, C, D):
    b, l, d_in = u.shape
    deltaA = torch.exp(torch.einsum("b l d, d n -> b l d n", delta, A))
    deltaB_u = torch.einsum("b l d, b l n, b l d -> b l d n", delta, B, u)
    x = torch.zeros((b, d_in, A.shape[1]), device=u.device)
    ys = []
    for i in range(l):
        x = deltaA[:, i] * x + deltaB_u[:, i]
        ys.append(torch.einsum("b d n, b n -> b d", x, C[:, i, :]))
    return torch.stack(ys, dim=1) + u * D


def segsum(x):
    """exp(segsum(x))[..., i, j] = prod_{j < k <= i} exp(x_k) for j <= i, 0 above the diagonal."""
    T = x.size(-1)
    x_cumsum = torch.cumsum(x, dim=-1)
    out = x_cumsum[..., :, None] - x_cumsum[..., None, :]
    mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool), diagonal=0)
    return out.masked_fill(~mask, -torch.inf)


def parallel_scan(u, delta, A, B, C, D):
    log_a = torch.einsum("bld,dn->bdnl", delta, A)
    L = torch.exp(segsum(log_a))  # (b, d, n, l, l)
    deltaB_u = torch.einsum("bld,bln,bld->bdnl", delta, B, u)
    states = torch.einsum("bdnts,bdns->bdnt", L, deltaB_u)
    y = torch.einsum("bdnt,btn->btd", states, C)
    return y + u * D


def elu_feature_map(x):
    return F.elu(x) + 1


def linear_attention_cumsum(q, k, v, eps=1e-6):
    q, k = elu_feature_map(q), elu_feature_map(k)
    kv = torch.einsum("bhtd,bhte->bhtde", k, v).cumsum(dim=2)
    z = 1.0 / (torch.einsum("bhtd,bhtd->bht", q, k.cumsum(dim=2)) + eps)
    return torch.einsum("bhtd,bhtde,bht->bhte", q, kv, z)


def linear_attention_loop(q, k, v, eps=1e-6):
    q, k = elu_feature_map(q), elu_feature_map(k)
    b, h, t, d = q.shape
    S = q.new_zeros(b, h, d, v.shape[-1])
    Z = q.new_zeros(b, h, d)
    out = []
    for i in range(t):
        S = S + k[:, :, i, :, None] * v[:, :, i, None, :]
        Z = Z + k[:, :, i]
        num = (q[:, :, i, :, None] * S).sum(-2)
        den = (q[:, :, i] * Z).sum(-1, keepdim=True) + eps
        out.append(num / den)
    return torch.stack(out, dim=2)


class Model(nn.Module):
    def __init__(self, vocab=16, d=16, heads=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mamba = MambaBlock(d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads
        self.lm = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        x = x + self.mamba(self.norm1(x))
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm2(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + linear_attention_cumsum(q, k, v).transpose(1, 2).reshape(b, t, d)
        return self.lm(x)


rng = np.random.RandomState(0)
model = Model()
with torch.no_grad():
    for n, p in model.named_parameters():
        if n.endswith("A_log") or n.endswith(".D") or "norm" in n:
            continue
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
u = torch.from_numpy(rng.randn(2, 10, 32).astype(np.float32))
with torch.no_grad():
    m = model.mamba
    seq = m.ssm(u[:, :, :32])
    m.parallel = True
    par = m.ssm(u[:, :, :32])
    m.parallel = False
    q, k, v = torch.from_numpy(rng.randn(3, 2, 2, 10, 8).astype(np.float32)).unbind(0)
    la_cumsum, la_loop = linear_attention_cumsum(q, k, v), linear_attention_loop(q, k, v)
print(f"scan_forms_agree={int(torch.allclose(seq, par, atol=1e-4))}")
print(f"linear_attn_forms_agree={int(torch.allclose(la_cumsum, la_loop, atol=1e-5))}")
print(f"scan_sum={seq.sum().item():.5f}")
print(f"linear_attn_sum={la_loop.sum().item():.5f}")

seqs = torch.from_numpy(np.array([[(s * j + 3) % 16 for j in range(13)] for s in range(1, 9)]))
opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
losses = []
for step in range(25):
    model.mamba.parallel = step % 2 == 1  # both scans carry gradients
    logits = model(seqs[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 16), seqs[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_12={losses[12]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"A_log_grad_norm={model.mamba.A_log.grad.norm().item():.6f}")
print(f"conv_weight_norm={model.mamba.conv1d.weight.norm().item():.6f}")
