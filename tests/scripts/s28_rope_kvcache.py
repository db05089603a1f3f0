"""LLaMA-style decoder (after meta-llama/llama's model.py and gpt-fast): RMSNorm, rotary embeddings through
torch.polar / view_as_complex / view_as_real, grouped-query attention with repeat_interleave, a preallocated KV
cache written by slice assignment during generation under torch.inference_mode, and nucleus (top-p) / top-k
sampling with sort, cumsum, masked_fill(-inf), scatter and multinomial.

Weights and data come from NumPy; training and greedy decoding are deterministic, so metrics must match torch
(the multinomial draws use each backend's own RNG and only their validity is checked).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def reshape_for_broadcast(freqs_cis, x):
    shape = [d if i == 1 or i == x.ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, max_batch, max_seq):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.n_rep = n_heads // n_kv_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.register_buffer("cache_k", torch.zeros(max_batch, max_seq, n_kv_heads, self.head_dim), persistent=False)
        self.register_buffer("cache_v", torch.zeros(max_batch, max_seq, n_kv_heads, self.head_dim), persistent=False)

    def forward(self, x, start_pos, freqs_cis, mask, use_cache):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        if use_cache:
            self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk
            self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv
            keys = self.cache_k[:bsz, : start_pos + seqlen]
            values = self.cache_v[:bsz, : start_pos + seqlen]
        else:
            keys, values = xk, xv
        keys = torch.repeat_interleave(keys, dim=2, repeats=self.n_rep)
        values = torch.repeat_interleave(values, dim=2, repeats=self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class Block(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, max_batch, max_seq):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, max_batch, max_seq)
        self.w1, self.w3 = nn.Linear(dim, 64, bias=False), nn.Linear(dim, 64, bias=False)
        self.w2 = nn.Linear(64, dim, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, start_pos, freqs_cis, mask, use_cache):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask, use_cache)
        return h + self.w2(F.silu(self.w1(self.ffn_norm(h))) * self.w3(self.ffn_norm(h)))


class Transformer(nn.Module):
    def __init__(self, vocab=24, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_batch=4, max_seq=32):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim, n_heads, n_kv_heads, max_batch, max_seq) for _ in range(n_layers)])
        self.norm, self.output = RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        self.freqs_cis = precompute_freqs_cis(dim // n_heads, max_seq * 2)

    def forward(self, tokens, start_pos=0, use_cache=False):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask, use_cache)
        return self.output(self.norm(h)).float()


def sample_top_p(probs, p):
    probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    mask = probs_sum - probs_sort > p
    probs_sort[mask] = 0.0
    probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
    next_token = torch.multinomial(probs_sort, num_samples=1)
    return torch.gather(probs_idx, -1, next_token), mask.sum().item()


def top_k_top_p_filter(logits, top_k, top_p):
    """HF's TopKLogitsWarper + TopPLogitsWarper: filtered logits are -inf."""
    kth = torch.topk(logits, top_k)[0][..., -1, None]
    logits = logits.masked_fill(logits < kth, -float("inf"))
    sorted_logits, sorted_indices = torch.sort(logits, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_remove = cumulative_probs <= (1 - top_p)
    remove = sorted_remove.scatter(1, sorted_indices, sorted_remove)
    return logits.masked_fill(remove, -float("inf"))


rng = np.random.RandomState(0)
model = Transformer()
with torch.no_grad():
    for n, p in model.named_parameters():
        if "norm" not in n:
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.1).astype(np.float32)))
seq = torch.from_numpy(np.array([[i % 7 + (i // 7) % 3 for i in range(s, s + 17)] for s in range(4)]))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
losses = []
for step in range(30):
    logits = model(seq[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), seq[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

model.eval()
prompt = seq[:2, :6]
with torch.inference_mode():
    full_ids, cached_ids = prompt.clone(), prompt.clone()
    for _ in range(8):  # no cache: recompute the whole prefix
        nxt = model(full_ids)[:, -1].argmax(-1, keepdim=True)
        full_ids = torch.cat([full_ids, nxt], dim=1)
    prev_pos = 0
    for cur_pos in range(prompt.shape[1], prompt.shape[1] + 8):
        logits = model(cached_ids[:, prev_pos:cur_pos], prev_pos, use_cache=True)
        nxt = torch.argmax(logits[:, -1], dim=-1).reshape(-1, 1)
        cached_ids = torch.cat([cached_ids, nxt], dim=1)
        prev_pos = cur_pos
    last_logits = logits[:, -1]
    assert not last_logits.requires_grad and torch.is_inference(last_logits)
    probs = torch.softmax(last_logits / 0.7, dim=-1)
    torch.manual_seed(0)
    sampled, n_masked = sample_top_p(probs, 0.9)
    filtered = top_k_top_p_filter(last_logits, top_k=5, top_p=0.8)
    n_kept = torch.isfinite(filtered).sum().item()
    draw = torch.multinomial(F.softmax(filtered, dim=-1), 4, replacement=True)
    assert torch.isfinite(filtered.gather(1, draw)).all()
print("greedy:", cached_ids.tolist())
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_15={losses[15]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"cache_matches_full={int(torch.equal(full_ids, cached_ids))}")
print(f"greedy_checksum={sum((i + 1) * t for i, t in enumerate(cached_ids.flatten().tolist()))}")
print(f"last_logit_sum={last_logits.sum().item():.5f}")
print(f"top_p_masked={n_masked}")
print(f"top_k_p_kept={n_kept}")
print(f"sampled_valid={int(((sampled >= 0) & (sampled < 24)).all().item())}")
print(f"freqs_real_sum={model.freqs_cis.real.sum().item():.5f}")
